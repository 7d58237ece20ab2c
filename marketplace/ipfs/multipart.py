"""A streaming multipart/form-data reader: file parts come out in pieces, never whole in memory."""

import re
import urllib.parse
from collections.abc import AsyncIterator

from marketplace.ipfs.errors import IpfsError

_MAX_HEADER_BYTES = 16 * 1024
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?')
_FILENAME = re.compile(r'filename="([^"]*)"')


class MalformedMultipart(IpfsError, ValueError):
    """A request body that is not the multipart/form-data its headers announce."""


def boundary_of(content_type: str | None) -> bytes:
    if not content_type or not content_type.lower().startswith("multipart/"):
        raise MalformedMultipart("expected a multipart/form-data body with a file")
    match = _BOUNDARY.search(content_type)
    if not match:
        raise MalformedMultipart("multipart Content-Type without a boundary")
    return match.group(1).encode()


class Part:
    """One part: its headers, then its body via `chunks()` (read it before the next part)."""

    def __init__(self, reader: "MultipartReader", headers: dict[str, str]) -> None:
        self._reader = reader
        self.headers = headers

    @property
    def filename(self) -> str:
        match = _FILENAME.search(self.headers.get("content-disposition", ""))
        return urllib.parse.unquote(match.group(1)) if match else ""

    @property
    def is_directory(self) -> bool:
        return self.headers.get("content-type", "").startswith("application/x-directory")

    def chunks(self) -> AsyncIterator[memoryview]:
        return self._reader.body_chunks()


class MultipartReader:
    """Parse from an async byte stream. The body scan keeps only a delimiter's length of bytes
    back between reads, so memory stays at one network read however large the part."""

    def __init__(self, stream: AsyncIterator[bytes], boundary: bytes) -> None:
        self._stream = stream.__aiter__()
        # A leading CRLF lets the first boundary match the same "CRLF--boundary" delimiter.
        self._buf = b"\r\n"
        self._delimiter = b"\r\n--" + boundary
        self._done = False

    async def _fill(self) -> bool:
        try:
            self._buf += await self._stream.__anext__()
        except StopAsyncIteration:
            return False
        return True

    async def parts(self) -> AsyncIterator[Part]:
        await self._skip_to_delimiter()
        while not self._done:
            yield Part(self, await self._read_headers())

    async def _skip_to_delimiter(self) -> None:
        async for _ in self.body_chunks():
            pass

    async def _read_headers(self) -> dict[str, str]:
        while len(self._buf) < 2:
            if not await self._fill():
                raise MalformedMultipart("multipart body ended before a part's headers")
        if self._buf.startswith(b"\r\n"):  # a part with no headers at all
            self._buf = self._buf[2:]
            return {}
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > _MAX_HEADER_BYTES or not await self._fill():
                raise MalformedMultipart("multipart part headers are missing or too long")
        raw, self._buf = self._buf[:end], self._buf[end + 4 :]
        headers = {}
        for line in raw.decode("utf-8", "replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return headers

    async def body_chunks(self) -> AsyncIterator[memoryview]:
        """Yield the current part's bytes up to the next delimiter as views of the received
        buffers (no copy), then consume the delimiter and note whether it closed the body.
        Only a delimiter's length of bytes is held back between reads; the two reads around
        it are joined only when a delimiter actually straddles them."""
        keep = len(self._delimiter) - 1
        while True:
            idx = self._buf.find(self._delimiter)
            if idx >= 0:
                if idx:
                    yield memoryview(self._buf)[:idx]
                self._buf = self._buf[idx + len(self._delimiter) :]
                await self._after_delimiter()
                return
            tail = self._buf[-keep:] if len(self._buf) > keep else self._buf
            if len(self._buf) > keep:
                yield memoryview(self._buf)[:-keep]
            try:
                chunk = await self._stream.__anext__()
            except StopAsyncIteration:
                raise MalformedMultipart("multipart body ended inside a part") from None
            if len(chunk) < keep or self._delimiter in tail + chunk[:keep]:
                self._buf = tail + chunk  # short reads, or a delimiter across the seam
            else:
                if tail:
                    yield memoryview(tail)
                self._buf = chunk

    async def _after_delimiter(self) -> None:
        while len(self._buf) < 2:
            if not await self._fill():
                raise MalformedMultipart("multipart body ended after a boundary")
        if self._buf.startswith(b"--"):
            self._done = True
            self._buf = b""
        elif self._buf.startswith(b"\r\n"):
            self._buf = self._buf[2:]
        else:
            raise MalformedMultipart("garbage after a multipart boundary")
