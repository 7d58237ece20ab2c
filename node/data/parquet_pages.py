"""What a Parquet column chunk's pages declare they decompress to, read from their own headers.

A reader allocates each page's declared uncompressed size before it decompresses it, and a few
kilobytes of zstd can declare gigabytes; the footer's per-chunk totals are written by the same
hand and need not agree with the pages. So the pipeline walks the page headers the reader will
walk (Thrift compact protocol, the only fields read being the page's two sizes) and refuses a
chunk whose pages add up to more than it allows, before a single page is decompressed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from .errors import PipelineError

MAX_HEADER_BYTES = 64 * 1024  # real page headers are tens of bytes, statistics included
FIRST_READ = 1024  # most headers fit; a longer one is read again whole
MAX_PAGES = 100_000  # per column chunk; writers cut pages at about 1 MiB
MAX_NESTING = 16

# Thrift compact protocol type ids
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_UNCOMPRESSED_SIZE, _COMPRESSED_SIZE = 2, 3  # PageHeader's field ids


class _Truncated(PipelineError):
    pass


class _Header:
    """A cursor over one page header's bytes; running off their end is an error."""

    def __init__(self, data: bytes):
        self.data = data
        self.at = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise _Truncated("Parquet page header is truncated or too long")
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise PipelineError("Parquet page header holds an over-long varint")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int) -> None:
        if depth > MAX_NESTING:
            raise PipelineError("Parquet page header is nested too deep")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.bytes(8)
        elif kind == _BINARY:
            self.bytes(self.varint())
        elif kind in (_LIST, _SET):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(size):
                self.element(head & 0x0F, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            types = self.byte() if size else 0
            for _ in range(size):
                self.element(types >> 4, depth + 1)
                self.element(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            self.struct(depth + 1)
        else:
            raise PipelineError(f"Parquet page header holds an unknown Thrift type {kind}")

    def element(self, kind: int, depth: int) -> None:
        """A collection's element: there a boolean takes a byte of its own."""
        if kind in (_TRUE, _FALSE):
            self.byte()
        else:
            self.skip(kind, depth)

    def bytes(self, n: int) -> None:
        if self.at + n > len(self.data):
            raise _Truncated("Parquet page header is truncated or too long")
        self.at += n

    def struct(self, depth: int, wanted: tuple[int, ...] = ()) -> dict[int, int]:
        """Skip a struct, returning the i32 fields whose ids are in `wanted`."""
        found: dict[int, int] = {}
        field = 0
        while (head := self.byte()) != 0:
            kind = head & 0x0F
            field = field + (head >> 4) if head >> 4 else self.zigzag()
            if field in wanted and kind == _I32:
                found[field] = self.zigzag()
            else:
                self.skip(kind, depth)
        return found


def page_sizes(file: BinaryIO, start: int, length: int) -> Iterator[tuple[int, int]]:
    """(uncompressed, compressed) sizes of the pages stored in file[start : start + length], in
    order; pages must tile the range exactly, as a reader walks them."""
    if start < 0 or length < 0:
        raise PipelineError("Parquet column chunk has a negative offset or length")
    end = start + length
    at = start
    pages = 0
    while at < end:
        pages += 1
        if pages > MAX_PAGES:
            raise PipelineError(f"a Parquet column chunk holds over {MAX_PAGES:,} pages")
        header, sizes = _read_header(file, at, end - at)
        uncompressed = sizes.get(_UNCOMPRESSED_SIZE, -1)
        compressed = sizes.get(_COMPRESSED_SIZE, -1)
        if uncompressed < 0 or compressed < 0:
            raise PipelineError("Parquet page header lacks its sizes")
        at += header.at + compressed
        if at > end:
            raise PipelineError("Parquet page runs past its column chunk")
        yield uncompressed, compressed


def _read_header(file: BinaryIO, at: int, room: int) -> tuple[_Header, dict[int, int]]:
    for window in (FIRST_READ, MAX_HEADER_BYTES):
        file.seek(at)
        header = _Header(file.read(min(window, room)))
        try:
            return header, header.struct(0, (_UNCOMPRESSED_SIZE, _COMPRESSED_SIZE))
        except _Truncated:
            if window >= room:
                raise
    raise PipelineError("Parquet page header is longer than 64 KiB")


def chunk_bytes(file: BinaryIO, start: int, length: int, limit: int) -> int:
    """What a column chunk's pages declare they decompress to in all, or a PipelineError as
    soon as that passes `limit`."""
    total = 0
    for uncompressed, _ in page_sizes(file, start, length):
        total += uncompressed
        if total > limit:
            raise PipelineError(
                f"a Parquet column chunk decompresses to over {limit >> 20} MiB "
                "(write it with smaller row groups)"
            )
    return total
