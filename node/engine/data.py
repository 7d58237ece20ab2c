"""Byte corpora from a job's data sources, and the deterministic batches of a shard."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import stat
import sysconfig
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from marketplace.protocol.spec import (
    DataSpec,
    FileSource,
    IpfsSource,
    JobSpec,
    Source,
    StdlibSource,
    SyntheticSource,
)

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

    def read(self, path: str, field: str) -> bytes:
        if not self.roots:
            raise DataError(f"{field}: file sources are not read here (no local data directory)")
        resolved = Path(path).resolve()  # symlinks followed, so none leads outside
        if not any(resolved.is_relative_to(root.resolve()) for root in self.roots):
            raise DataError(f"{field}: {path} is outside the local data directories")
        try:
            with resolved.open("rb") as f:
                info = os.fstat(f.fileno())
                if not stat.S_ISREG(info.st_mode):
                    raise DataError(f"{field}: {path} is not a regular file")
                if info.st_size > self.max_bytes:
                    raise DataError(f"{field}: {path} holds more than {self.max_bytes} bytes")
                return f.read(self.max_bytes + 1)
        except OSError as exc:
            raise DataError(f"{field}: cannot read file {path}: {exc.strerror}") from None


NO_LOCAL_DATA = LocalData()


class ContentStore(Protocol):
    """What the engine needs from IPFS storage (marketplace.storage.Storage provides it): the
    content, refused with a ValueError once it runs past `max_bytes`."""

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes: ...


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
    """One source's bytes, split into a training part and a held-out tail."""

    name: str  # the source's name, as in Shard.sources
    weight: float  # mixing ratio
    sha256: str  # digest of the full byte stream, recorded so a verifier can compare data
    train: torch.Tensor  # (N,) uint8
    eval: torch.Tensor  # (M,) uint8


def load_corpora(
    data: DataSpec,
    storage: ContentStore | None = None,
    local: LocalData = NO_LOCAL_DATA,
    max_ipfs_bytes: int = 4 << 30,
) -> list[Corpus]:
    """Read every source of `data` and split each into train and eval bytes; an IPFS source is
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
    if not isinstance(source, FileSource):
        return None
    try:
        stat = os.stat(source.path)
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
    raw = _read(source, storage, local, max_ipfs_bytes, field)
    n_eval = max(data.seq_len + 1, int(len(raw) * data.eval_fraction))
    if len(raw) - n_eval < data.seq_len + 1:
        raise DataError(
            f"{field} ({source.name}) has {len(raw)} bytes; seq_len {data.seq_len} with "
            f"eval_fraction {data.eval_fraction} needs at least {n_eval + data.seq_len + 1}"
        )
    tensor = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    logger.debug("loaded %s: %d bytes", source.name, len(raw))
    return Corpus(
        name=source.name,
        weight=source.weight,
        sha256=hashlib.sha256(raw).hexdigest(),
        train=tensor[:-n_eval],
        eval=tensor[-n_eval:],
    )


class Sampler:
    """Draws (inputs, targets) byte batches from a mixture of corpora, reproducibly."""

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
            rows = torch.empty(B, T + 1, dtype=torch.uint8)
            for i, part in enumerate(parts):
                picked = (which == i).nonzero().squeeze(1)  # rows drawn from source i
                starts = torch.randint(len(part) - T, (len(picked),), generator=g)
                rows[picked] = part[starts.unsqueeze(1) + self.window]  # (n_i, T + 1)
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
        try:
            from marketplace.storage import Storage
        except ImportError as exc:
            raise DataError(f"an ipfs source needs marketplace.storage: {exc}") from None
        storage = Storage()
    try:
        return storage.cat(cid, max_bytes=max_bytes)
    except ValueError as exc:  # ContentTooLarge, or a CID that does not parse
        raise DataError(f"{field}: ipfs source {cid}: {exc}") from None
