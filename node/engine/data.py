"""Token corpora from a job's data sources, and the deterministic batches of a shard.

Byte sources (stdlib, synthetic, file, ipfs) are read whole and their bytes are the tokens;
document sources (jsonl, parquet, text) stream through the data pipeline (node.data) into a
token file that is mapped, not loaded, so a corpus may be larger than memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import stat
import sysconfig
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import torch
from tokenizers import Tokenizer

from marketplace.protocol import tokenizer as tokenizers
from marketplace.protocol.spec import (
    DOCUMENT_SOURCES,
    DataSpec,
    DocumentSource,
    FileSource,
    IpfsSource,
    JobSpec,
    JsonlSource,
    ParquetSource,
    Source,
    StdlibSource,
    SyntheticSource,
    TokenizerRef,
)
from node.data import ByteEncoder, Pipeline, PipelineError, TokenizerEncoder, documents
from node.data.pipeline import Encoder

logger = logging.getLogger(__name__)


class DataError(ValueError):
    """A data source that cannot be read, or is too small for the job."""


@dataclass(frozen=True)
class LocalData:
    """The local files a unit may read. A provider trains strangers' specs, so a `file` source is
    read only under the directories it configured, only as a regular file, only up to
    `max_bytes`: never its keys, its wallet's password or /dev/zero. With no directory (the
    default) no file source is read at all."""

    roots: tuple[Path, ...] = ()
    max_bytes: int = 4 << 30

    def check(self, data: DataSpec) -> None:
        """Refuse (DataError) a spec with a local source this machine would not read: a provider
        asks before it bids, since a slot whose units cannot read their data would miss every
        checkpoint deadline and be slashed for it."""
        for i, source in enumerate(data.sources):
            path = source.path if isinstance(source, (FileSource, *DOCUMENT_SOURCES)) else None
            if path is not None:
                self.open(path, f"data.sources[{i}]").close()

    def read(self, path: str, field: str) -> bytes:
        with self.open(path, field) as f:
            try:
                return f.read(self.max_bytes + 1)
            except OSError as exc:
                raise DataError(f"{field}: cannot read file {path}: {exc.strerror}") from None

    def open(self, path: str, field: str) -> BinaryIO:
        """The file at `path`, opened for reading once it passed every check."""
        if not self.roots:
            raise DataError(f"{field}: file sources are not read here (no local data directory)")
        resolved = Path(path).resolve()  # symlinks followed, so none leads outside
        if not any(resolved.is_relative_to(root.resolve()) for root in self.roots):
            raise DataError(f"{field}: {path} is outside the local data directories")
        try:
            f = resolved.open("rb")
        except OSError as exc:
            raise DataError(f"{field}: cannot read file {path}: {exc.strerror}") from None
        info = os.fstat(f.fileno())  # of the file opened, so it cannot be swapped after the check
        if not stat.S_ISREG(info.st_mode):
            f.close()
            raise DataError(f"{field}: {path} is not a regular file")
        if info.st_size > self.max_bytes:
            f.close()
            raise DataError(f"{field}: {path} holds more than {self.max_bytes} bytes")
        return f


NO_LOCAL_DATA = LocalData()


class ContentStore(Protocol):
    """What the engine needs from IPFS storage (marketplace.storage.Storage provides it): the
    content in memory or streamed to a file, refused with a ValueError once it runs past
    `max_bytes`."""

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes: ...

    def read_to(self, cid: str, path: str, max_bytes: int | None = None) -> None: ...


PIPELINE_BUFFER_BYTES = 8 << 20  # text a document source tokenizes at a time


@dataclass(frozen=True)
class Shard:
    """The data of a work unit, named by its sources, a shard index and an optimizer-step range.

    The same shard always yields the same batches: the batch for a step is drawn with a
    generator seeded by (job seed, shard index, batch cursor), never by global RNG state.
    Different indices are independent sample streams over the same sources.
    """

    sources: tuple[str, ...]  # source names: stdlib version, synthetic params, file paths, CIDs
    index: int  # which sample stream of those sources
    start_step: int  # first optimizer step this shard feeds
    end_step: int  # one past the last optimizer step it feeds

    def __post_init__(self) -> None:
        if self.index < 0:
            raise DataError(f"shard index must be >= 0; got {self.index}")
        if not 0 <= self.start_step < self.end_step:
            raise DataError(f"shard step range [{self.start_step}, {self.end_step}) is empty")

    @classmethod
    def of(cls, spec: JobSpec, index: int, start_step: int, end_step: int) -> Shard:
        """The shard of `spec`'s data with the given index and step range."""
        return cls(tuple(s.name for s in spec.data.sources), index, start_step, end_step)

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Shard:
        """The inverse of `to_dict`, for shards recorded in JSON or checkpoint metadata."""
        return cls(
            tuple(fields["sources"]),
            int(fields["index"]),
            int(fields["start_step"]),
            int(fields["end_step"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": list(self.sources),
            "index": self.index,
            "start_step": self.start_step,
            "end_step": self.end_step,
        }


@dataclass(frozen=True)
class Corpus:
    """One source's tokens, split into a training part and a held-out tail."""

    name: str  # the source's name, as in Shard.sources
    weight: float  # mixing ratio
    sha256: str  # digest of the full byte or token stream, so a verifier can compare data
    train: torch.Tensor  # (N,) uint8 bytes, or int32 token ids mapped from a file
    eval: torch.Tensor  # (M,) likewise


def load_corpora(
    data: DataSpec,
    storage: ContentStore | None = None,
    local: LocalData = NO_LOCAL_DATA,
    max_ipfs_bytes: int = 4 << 30,
) -> list[Corpus]:
    """Read every source of `data` and split each into train and eval tokens; an IPFS source is
    refused once it runs past `max_ipfs_bytes`.

    Recent corpora are kept in memory, so the units of one job read and digest their data
    once; a file is read again when its size or modification time changes.
    """
    corpora = []
    for i, source in enumerate(data.sources):
        key = (
            source,
            data.seq_len,
            data.eval_fraction,
            data.tokenizer,
            data.filters,
            data.dedup,
            _file_version(source),
            local,
            max_ipfs_bytes,
        )
        corpus = _CACHE.pop(key, None) or _split(
            source, data, storage, local, max_ipfs_bytes, f"data.sources[{i}]"
        )
        _CACHE[key] = corpus
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        corpora.append(corpus)
    return corpora


_CACHE: OrderedDict[tuple[Any, ...], Corpus] = OrderedDict()  # least recently used first
_CACHE_SIZE = 4


def _file_version(source: Source) -> tuple[int, int] | None:
    path = source.path if isinstance(source, (FileSource, *DOCUMENT_SOURCES)) else None
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None  # _read reports it
    return stat.st_mtime_ns, stat.st_size


def _split(
    source: Source,
    data: DataSpec,
    storage: ContentStore | None,
    local: LocalData,
    max_ipfs_bytes: int,
    field: str,
) -> Corpus:
    if isinstance(source, DOCUMENT_SOURCES):
        tensor, digest = _tokens(source, data, storage, local, max_ipfs_bytes, field)
        unit = "tokens"
    else:
        raw = _read(source, storage, local, max_ipfs_bytes, field)
        tensor, digest = torch.frombuffer(bytearray(raw), dtype=torch.uint8), _sha256(raw)
        unit = "bytes"
    n_eval = max(data.seq_len + 1, int(len(tensor) * data.eval_fraction))
    if len(tensor) - n_eval < data.seq_len + 1:
        raise DataError(
            f"{field} ({source.name}) has {len(tensor)} {unit}; seq_len {data.seq_len} with "
            f"eval_fraction {data.eval_fraction} needs at least {n_eval + data.seq_len + 1}"
        )
    logger.debug("loaded %s: %d %s", source.name, len(tensor), unit)
    return Corpus(
        name=source.name,
        weight=source.weight,
        sha256=digest,
        train=tensor[:-n_eval],
        eval=tensor[-n_eval:],
    )


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _tokens(
    source: DocumentSource,
    data: DataSpec,
    storage: ContentStore | None,
    local: LocalData,
    max_ipfs_bytes: int,
    field: str,
) -> tuple[torch.Tensor, str]:
    """A document source's token ids through the pipeline, and the digest of their stream.

    The tokens go to an unlinked temporary file that is mapped copy-on-write: pages are read
    as batches touch them and the kernel may drop them again, so memory stays bounded by the
    pipeline's buffer however large the corpus is, and the disk space goes with the mapping.
    """
    encoder = _encoder(data.tokenizer, storage)
    pipeline = Pipeline(encoder, data.filters, data.dedup, PIPELINE_BUFFER_BYTES)
    text_field = (
        source.field
        if isinstance(source, JsonlSource)
        else source.column
        if isinstance(source, ParquetSource)
        else "text"
    )
    with (
        _document_file(source, storage, local, max_ipfs_bytes, field) as file,
        tempfile.NamedTemporaryFile(prefix="zoo-tokens-") as out,
    ):
        docs = documents(source.kind, file, text_field)
        try:
            stats = pipeline.run(docs, out)
        except PipelineError as exc:
            raise DataError(f"{field} ({source.name}): {exc}") from None
        out.flush()
        logger.info(
            "%s: %d documents, %d skipped, %d filtered, %d exact and %d near duplicates, %d tokens",
            source.name,
            stats.documents,
            docs.skipped,
            stats.filtered,
            stats.exact_duplicates,
            stats.near_duplicates,
            stats.tokens,
        )
        if stats.tokens == 0:
            raise DataError(f"{field} ({source.name}) has no documents left to train on")
        tokens = torch.from_file(out.name, shared=False, size=stats.tokens, dtype=torch.int32)
    return tokens, stats.sha256


def _encoder(ref: TokenizerRef | None, storage: ContentStore | None) -> Encoder:
    """The named tokenizer, fetched within MAX_TOKENIZER_BYTES and checked against the spec's
    vocab_size; without one, the bytes of the text."""
    if ref is None:
        return ByteEncoder()
    raw = _ipfs_bytes(ref.cid, storage, tokenizers.MAX_TOKENIZER_BYTES, "data.tokenizer")
    try:
        tokenizer: Tokenizer = tokenizers.load(raw)
    except tokenizers.NotATokenizer as exc:
        raise DataError(f"data.tokenizer: {ref.cid} is not a tokenizer: {exc}") from None
    if tokenizer.get_vocab_size() != ref.vocab_size:
        raise DataError(
            f"data.tokenizer: vocab_size is {ref.vocab_size}, but the tokenizer at {ref.cid} "
            f"has {tokenizer.get_vocab_size()} tokens"
        )
    return TokenizerEncoder(tokenizer)


@contextmanager
def _document_file(
    source: DocumentSource,
    storage: ContentStore | None,
    local: LocalData,
    max_ipfs_bytes: int,
    field: str,
) -> Iterator[BinaryIO]:
    """A document source's file: a local one under the data directories, or one from IPFS
    streamed to a temporary file (refused past `max_ipfs_bytes`) and gone when done."""
    if source.cid is None:  # then it has a path: the spec holds exactly one
        with local.open(source.path or "", field) as f:
            yield f
        return
    store = storage if storage is not None else _default_storage()
    with tempfile.TemporaryDirectory(prefix="zoo-documents-") as folder:
        path = os.path.join(folder, "content")
        try:
            store.read_to(source.cid, path, max_bytes=max_ipfs_bytes)
        except ValueError as exc:  # ContentTooLarge, or a CID that does not parse
            raise DataError(f"{field}: ipfs source {source.cid}: {exc}") from None
        with open(path, "rb") as f:
            yield f


class Sampler:
    """Draws (inputs, targets) token batches from a mixture of corpora, reproducibly: each row
    comes from a source drawn by weight, at a start drawn uniformly, both seeded by the key."""

    def __init__(self, corpora: list[Corpus], seq_len: int, batch_size: int, seed: int):
        self.corpora = corpora
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.weights = torch.tensor([c.weight for c in corpora], dtype=torch.float64)
        self.window = torch.arange(seq_len + 1)  # (T + 1,)

    def batch(self, stream: int, cursor: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch `micro` of batch `cursor` in sample stream `stream` (a shard index)."""
        return self._draw(("train", stream, cursor, micro), [c.train for c in self.corpora])

    def eval_batches(self, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A fixed set of held-out batches: the same for every shard and unit of the job."""
        return [self.eval_batch(i) for i in range(count)]

    def eval_batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._draw(("eval", index), [c.eval for c in self.corpora])

    def _draw(
        self, key: tuple[Any, ...], parts: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(_derive_seed(self.seed, *key))
        B, T = self.batch_size, self.seq_len
        if len(parts) == 1:  # the common case, without the mixing bookkeeping
            starts = torch.randint(len(parts[0]) - T, (B,), generator=g)
            rows = parts[0][starts.unsqueeze(1) + self.window]  # (B, T + 1)
        else:
            which = torch.multinomial(self.weights, B, replacement=True, generator=g)  # (B,)
            rows = torch.empty(B, T + 1, dtype=torch.long)
            for i, part in enumerate(parts):
                picked = (which == i).nonzero().squeeze(1)  # rows drawn from source i
                starts = torch.randint(len(part) - T, (len(picked),), generator=g)
                rows[picked] = part[starts.unsqueeze(1) + self.window].long()  # (n_i, T + 1)
        rows = rows.long()
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()  # (B, T), (B, T)


def _derive_seed(*parts: Any) -> int:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _read(
    source: Source, storage: ContentStore | None, local: LocalData, max_ipfs_bytes: int, field: str
) -> bytes:
    if isinstance(source, StdlibSource):
        raw = _stdlib_bytes()
        return raw[: source.max_bytes] if source.max_bytes else raw
    if isinstance(source, SyntheticSource):
        return _synthetic_bytes(source.generator, source.num_bytes, source.seed)
    if isinstance(source, FileSource):
        return local.read(source.path, field)
    if isinstance(source, IpfsSource):
        return _ipfs_bytes(source.cid, storage, max_ipfs_bytes, field)
    raise DataError(f"{field}: unsupported source kind {source.kind!r}")


def _stdlib_bytes() -> bytes:
    """The standard library's .py files (site-packages excluded), concatenated in sorted order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__")
        ]
        files += [Path(dirpath, f) for f in filenames if f.endswith(".py")]
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise DataError(f"no Python sources found under {root}")
    return b"".join(p.read_bytes() for p in files)


def _synthetic_bytes(generator: str, num_bytes: int, seed: int) -> bytes:
    rng = random.Random(seed)  # random() sequences are stable across Python versions
    if generator == "markov":
        # a sparse first-order chain over 32 printable bytes: each has 4 possible successors
        alphabet = b"abcdefghijklmnopqrstuvwxyz .,;\n!"
        successors = [[alphabet[int(rng.random() * 32)] for _ in range(4)] for _ in range(256)]
        out = bytearray(num_bytes)
        state = alphabet[0]
        for i in range(num_bytes):
            state = successors[state][int(rng.random() * 4)]
            out[i] = state
        return bytes(out)
    lines = []
    size = 0
    while size < num_bytes:
        a, b = int(rng.random() * 1000), int(rng.random() * 1000)
        line = f"{a}+{b}={a + b}\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()[:num_bytes]


def _ipfs_bytes(cid: str, storage: ContentStore | None, max_bytes: int, field: str) -> bytes:
    """Fetch through the given storage, else through the marketplace's configured default."""
    if storage is None:
        storage = _default_storage()
    try:
        return storage.cat(cid, max_bytes=max_bytes)
    except ValueError as exc:  # ContentTooLarge, or a CID that does not parse
        raise DataError(f"{field}: ipfs source {cid}: {exc}") from None


def _default_storage() -> ContentStore:
    try:
        from marketplace.storage import Storage
    except ImportError as exc:
        raise DataError(f"an ipfs source needs marketplace.storage: {exc}") from None
    return Storage()
