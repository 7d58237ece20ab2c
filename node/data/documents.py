"""Documents out of JSONL, Parquet and plain-text files, read a line, a record batch or a
paragraph at a time so no file is ever held whole."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import BinaryIO, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import PipelineError
from .parquet_pages import chunk_bytes

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 1 << 20  # a longer JSONL line is skipped, a longer paragraph cut
PARQUET_BATCH_ROWS = 1024  # rows decoded at a time (a row group is read page by page)
MAX_PARQUET_CHUNK_BYTES = 256 << 20  # what one row group's text column may decompress to
DocumentKind = Literal["jsonl", "parquet", "text"]


class Documents:
    """The documents of one file, in file order; `skipped` counts the JSONL lines that were not
    an object with a string in `field` and the JSONL lines or Parquet rows longer than
    MAX_DOCUMENT_BYTES, which are passed over rather than ending a job over one bad record. The
    debug log names each by where an editor or Arrow finds it: a line from 1, a row from 0."""

    def __init__(self, kind: DocumentKind, file: BinaryIO, field: str = "text"):
        self.kind = kind
        self.file = file
        self.field = field
        self.skipped = 0

    def __iter__(self) -> Iterator[str]:
        if self.kind == "jsonl":
            return self._jsonl()
        if self.kind == "parquet":
            return self._parquet()
        return self._paragraphs()

    def _jsonl(self) -> Iterator[str]:
        for number, line in enumerate(_lines(self.file), start=1):
            if line is None:
                self._skip(f"line {number}", f"longer than {MAX_DOCUMENT_BYTES} bytes")
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, deep nesting, a
                self._skip(f"line {number}", f"not JSON ({exc})")  # number past int's digit limit
                continue
            text = record.get(self.field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                self._skip(f"line {number}", f"no string field {self.field!r}")
                continue
            yield text

    def _skip(self, where: str, why: str) -> None:
        self.skipped += 1
        logger.debug("%s %s skipped: %s", self.kind, where, why)

    def _parquet(self) -> Iterator[str]:
        """The column's strings, a batch at a time. The column is read dictionary-encoded, so a
        batch that repeats one long string holds it once (see `_batch_strings`); each chunk's
        pages are checked to decompress within MAX_PARQUET_CHUNK_BYTES before any is read."""
        try:
            table = pq.ParquetFile(self.file)
        except (pa.ArrowException, OSError) as exc:
            raise PipelineError(f"not a Parquet file ({exc})") from None
        schema = table.schema_arrow
        if schema.get_field_index(self.field) < 0:
            columns = ", ".join(schema.names)
            raise PipelineError(f"Parquet file has no column {self.field!r} (columns: {columns})")
        kind = schema.field(self.field).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise PipelineError(f"Parquet column {self.field!r} holds {kind}, not strings")
        self._check_chunks(table.metadata)
        try:
            table = pq.ParquetFile(self.file, metadata=table.metadata, read_dictionary=[self.field])
            first = 0  # the file row of the batch's first row
            for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[self.field]):
                entries, strings = _batch_strings(batch.column(0))
                for row, entry in enumerate(entries, start=first):
                    if entry is None:  # a null row
                        continue
                    text = strings.get(entry)
                    if text is None:
                        self._skip(f"row {row}", f"longer than {MAX_DOCUMENT_BYTES} bytes")
                        continue
                    yield text
                first += batch.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise PipelineError(f"unreadable Parquet file ({exc})") from None

    def _check_chunks(self, metadata: pq.FileMetaData) -> None:
        leaves = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        if self.field not in leaves:
            raise PipelineError(f"Parquet column {self.field!r} is not a top-level string")
        leaf = leaves.index(self.field)
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group).column(leaf)
            if chunk.num_values == 0:  # the reader reads no page of a chunk declaring no values,
                continue  # and an empty one's data page offset is 0, the file's magic
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < (chunk.dictionary_page_offset or 0) < start:
                start = chunk.dictionary_page_offset
            chunk_bytes(self.file, start, chunk.total_compressed_size, MAX_PARQUET_CHUNK_BYTES)

    def _paragraphs(self) -> Iterator[str]:
        paragraph: list[str] = []
        size = 0
        while line := self.file.readline(MAX_DOCUMENT_BYTES):  # a longer line comes in pieces
            text = line.decode("utf-8", errors="replace")
            if not text.strip() or size + len(line) > MAX_DOCUMENT_BYTES:
                if paragraph:
                    yield "".join(paragraph)
                paragraph, size = [], 0
                if not text.strip():
                    continue
            paragraph.append(text)
            size += len(line)
        if paragraph:
            yield "".join(paragraph)


def _batch_strings(column: pa.DictionaryArray) -> tuple[list[int | None], dict[int, str]]:
    """A dictionary-encoded batch in Python: each row's dictionary entry (None for a null row),
    and the string of each entry the rows name that is at most MAX_DOCUMENT_BYTES long.

    Arrow converts the batch's strings at once, where a scalar per row costs several times as
    much, and only those the batch names: the reader's dictionary grows over a row group, so
    converting all of it on each batch would cost the square of the group's rows. A string the
    batch repeats is converted once and shared, and an over-long one is measured in Arrow and
    never converted, so the batch holds no more than its distinct strings, which lie within its
    row group's MAX_PARQUET_CHUNK_BYTES.
    """
    used = pc.unique(column.indices).drop_null()
    values = column.dictionary.take(used)
    fits = [size <= MAX_DOCUMENT_BYTES for size in pc.binary_length(values).to_pylist()]
    if not all(fits):
        used, values = used.filter(fits), values.filter(fits)
    strings = dict(zip(used.to_pylist(), values.to_pylist(), strict=True))
    return column.indices.to_pylist(), strings


def _lines(file: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines, none longer than MAX_DOCUMENT_BYTES in memory: a longer one is None
    (its rest read and dropped)."""
    while True:
        line = file.readline(MAX_DOCUMENT_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_DOCUMENT_BYTES:
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = file.readline(MAX_DOCUMENT_BYTES)
        yield None


def documents(kind: DocumentKind, file: BinaryIO, field: str = "text") -> Documents:
    """The documents of `file`, read as `kind`; `field` names the JSONL field or Parquet
    column that holds the text."""
    return Documents(kind, file, field)
