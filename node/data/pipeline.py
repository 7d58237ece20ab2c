"""The pipeline proper: documents in, filtered and deduplicated one at a time, tokenized a
buffer at a time, and written out as a stream of int32 token ids."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, Protocol

import numpy as np
from tokenizers import Tokenizer

from marketplace.protocol import tokenizer as tokenizers
from marketplace.protocol.spec import DedupSpec, FilterSpec

from .dedup import Deduplicator
from .quality import QualityFilter

TOKEN_DTYPE = np.dtype("<i4")  # little-endian int32 on disk, whatever the machine
BYTE_SEPARATOR = b"\n\n"  # between two documents when tokens are bytes
ENCODE_BATCH = 256  # documents a tokenizer encodes at once: enough for its threads


class Encoder(Protocol):
    """Texts to token ids, and the ids that separate two documents."""

    separator: np.ndarray

    def encode(self, texts: list[str]) -> list[np.ndarray]: ...


class ByteEncoder:
    """The byte-level default: a document's tokens are its UTF-8 bytes."""

    separator = np.frombuffer(BYTE_SEPARATOR, dtype=np.uint8).astype(TOKEN_DTYPE)

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode(), dtype=np.uint8).astype(TOKEN_DTYPE) for t in texts]


class TokenizerEncoder:
    """A Hugging Face tokenizer, encoding a buffer's documents in batches (in parallel in the
    library's own threads; each document's ids do not depend on its batch), so that only one
    batch's `Encoding` objects, with their strings and offsets, are alive at a time."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.separator = np.array(tokenizers.separator(tokenizer), dtype=TOKEN_DTYPE)

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        ids = []
        for start in range(0, len(texts), ENCODE_BATCH):  # an Encoding holds ~100 bytes a token
            chunk = texts[start : start + ENCODE_BATCH]
            encoded = self.tokenizer.encode_batch_fast(chunk, add_special_tokens=False)
            ids += [np.array(e.ids, dtype=TOKEN_DTYPE) for e in encoded]
        return ids


@dataclass
class PipelineStats:
    documents: int = 0  # read from the source
    filtered: int = 0  # dropped by the quality filters
    exact_duplicates: int = 0  # dropped as exact duplicates
    near_duplicates: int = 0  # dropped as near duplicates
    kept: int = 0  # tokenized
    tokens: int = 0  # written, separators included
    peak_buffered_bytes: int = 0  # most text and token bytes held at once
    sha256: str = ""  # of the token stream as written


class Pipeline:
    """Filters, deduplicates and tokenizes documents into a token stream.

    Memory: documents wait in a buffer of at most `buffer_bytes` of text (plus the one that
    overflows it, at most MAX_DOCUMENT_BYTES) and are tokenized together, their ids held until
    written (4 bytes a token: up to 4x the text with byte tokens, ~1x with a trained BPE); the
    dedup window (see dedup.py) is the only other state that grows, and it is bounded too. The
    corpus itself only streams through.
    """

    def __init__(
        self,
        encoder: Encoder,
        filters: FilterSpec | None = None,
        dedup: DedupSpec | None = None,
        buffer_bytes: int = 8 << 20,
    ):
        self.encoder = encoder
        self.filter = QualityFilter(filters) if filters is not None else None
        self.dedup = Deduplicator(dedup) if dedup is not None else None
        self.buffer_bytes = buffer_bytes

    def run(self, documents: Iterable[str], out: IO[bytes]) -> PipelineStats:
        """Write the token stream of `documents` to `out`; a separator follows every document."""
        stats = PipelineStats()
        digest = hashlib.sha256()
        buffer: list[str] = []
        buffered = 0
        for text in documents:
            stats.documents += 1
            if self.filter is not None and not self.filter.keep(text):
                continue
            if self.dedup is not None and not self.dedup.keep(text):
                continue
            buffer.append(text)
            buffered += sys.getsizeof(text)
            if buffered >= self.buffer_bytes:
                self._flush(buffer, buffered, out, digest, stats)
                buffer, buffered = [], 0
        self._flush(buffer, buffered, out, digest, stats)
        if self.filter is not None:
            stats.filtered = self.filter.dropped
        if self.dedup is not None:
            stats.exact_duplicates = self.dedup.exact_dropped
            stats.near_duplicates = self.dedup.near_dropped
        stats.sha256 = digest.hexdigest()
        return stats

    def _flush(
        self, buffer: list[str], buffered: int, out: IO[bytes], digest: Any, stats: PipelineStats
    ) -> None:
        if not buffer:
            return
        separator = self.encoder.separator.tobytes()
        encoded = self.encoder.encode(buffer)
        held = sum(ids.nbytes for ids in encoded)
        for ids in encoded:
            raw = ids.tobytes()
            for part in (raw, separator):
                out.write(part)
                digest.update(part)
        stats.kept += len(buffer)
        stats.tokens += (held + len(separator) * len(buffer)) // TOKEN_DTYPE.itemsize
        # the text, its ids, and one document's ids as bytes on their way out
        largest = max(ids.nbytes for ids in encoded)
        stats.peak_buffered_bytes = max(stats.peak_buffered_bytes, buffered + held + largest)
