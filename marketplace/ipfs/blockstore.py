"""Blocks on disk, one file per block named by its multihash (Kubo's flatfs layout)."""

import base64
import binascii
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from marketplace.ipfs import multihash
from marketplace.ipfs.cid import CID, RAW
from marketplace.ipfs.errors import BlockNotFound, HashMismatch, InvalidCid, RepoFull
from marketplace.ipfs.multihash import Buffer

log = logging.getLogger(__name__)

_SUFFIX = ".data"


class CorruptBlock(HashMismatch):
    """A stored block whose bytes no longer hash to its name (disk damage, a torn write)."""


def _write_all(fd: int, parts: Sequence[Buffer]) -> None:
    """writev until every byte is written (a short write is legal, if rare, on files)."""
    pending = [memoryview(p).cast("B") for p in parts if len(p)]
    while pending:
        written = os.writev(fd, pending)
        while pending and written >= len(pending[0]):
            written -= len(pending[0])
            pending.pop(0)
        if pending and written:
            pending[0] = pending[0][written:]


def _key(multihash: bytes) -> str:
    """flatfs key: unpadded upper-case base32 of the multihash ("CIQ..." for sha2-256)."""
    return base64.b32encode(multihash).decode().rstrip("=")


class Blockstore:
    """Content-addressed: a block is only ever written under the hash of the bytes being written,
    so nothing can be stored under a wrong name, and every read is checked again. Writes go to a
    per-thread temporary file renamed into place, so concurrent writers of the same block (two
    adds sharing a chunk) each rename a complete file and a reader never sees a partial one."""

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._made_dirs: set[str] = set()
        self._max_bytes = max_bytes
        self._used_lock = threading.Lock()
        # Counted once here, then kept by writes and deletes; two writers racing to store the
        # same block may both count it, which errs on the side of refusing.
        self._used = sum(self.size(cid) for cid in self.cids())

    @property
    def used(self) -> int:
        """Bytes of blocks held."""
        return self._used

    def _reserve(self, size: int) -> None:
        with self._used_lock:
            if self._max_bytes is not None and self._used + size > self._max_bytes:
                raise RepoFull(
                    f"the repo holds {self._used} bytes and may hold {self._max_bytes}: "
                    f"no room for a block of {size}; unpin and collect garbage (repo/gc)"
                )
            self._used += size

    def _release(self, size: int) -> None:
        with self._used_lock:
            self._used -= size

    def path(self, cid: CID) -> Path:
        """Where the block lives: blocks/<next-to-last two key characters>/<key>.data."""
        return Path(self._file(_key(cid.multihash)))

    def _file(self, key: str) -> str:
        # Plain strings: this runs once per 256 KiB of every add, where pathlib's object
        # churn showed up in profiles.
        return f"{self.root}/{key[-3:-1]}/{key}{_SUFFIX}"

    def has(self, cid: CID) -> bool:
        return os.path.exists(self._file(_key(cid.multihash)))

    def add(
        self,
        parts: Sequence[Buffer],
        codec: int,
        version: int = 1,
        hash_code: int = multihash.SHA2_256,
    ) -> CID:
        """Hash the block given as consecutive buffers, store it, and return its CID (a block
        already present is not rewritten). The buffers are hashed and written as they are,
        never joined: a chunk is not copied on its way to disk."""
        cid = CID.of_parts(parts, codec, version, hash_code)
        self._write(cid, parts)
        return cid

    def _write(self, cid: CID, parts: Sequence[Buffer]) -> None:
        """Store `parts` under `cid`, which the caller computed from exactly these bytes."""
        key = _key(cid.multihash)
        path = self._file(key)
        if os.path.exists(path):
            return
        shard = key[-3:-1]
        if shard not in self._made_dirs:
            os.makedirs(f"{self.root}/{shard}", exist_ok=True)
            self._made_dirs.add(shard)
        size = sum(memoryview(part).nbytes for part in parts)
        self._reserve(size)
        tmp = f"{self.root}/{shard}/.{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, parts)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            self._release(size)
            raise

    def get(self, cid: CID) -> bytes:
        """The block's bytes, verified against the CID."""
        try:
            data = self.path(cid).read_bytes()
        except FileNotFoundError:
            raise BlockNotFound(cid) from None
        try:
            cid.verify(data)
        except HashMismatch:
            log.error("block %s is corrupt on disk (hash mismatch)", cid)
            raise CorruptBlock(
                f"block {cid} is corrupt in this node's store (hash mismatch)"
            ) from None
        return data

    def size(self, cid: CID) -> int:
        try:
            return self.path(cid).stat().st_size
        except FileNotFoundError:
            raise BlockNotFound(cid) from None

    def cids(self) -> Iterator[CID]:
        """Every stored block as a CIDv1 raw: the store keeps multihashes, not codecs (as Kubo)."""
        for shard in self.root.iterdir():
            if not shard.is_dir():
                continue
            for entry in shard.iterdir():
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith("."):
                    padded = entry.name[: -len(_SUFFIX)]
                    padded += "=" * (-len(padded) % 8)
                    try:
                        mh = base64.b32decode(padded)
                        multihash.split(mh)
                    except (binascii.Error, InvalidCid):
                        log.warning("ignoring a file that is not a block: %s", entry)
                        continue
                    yield CID(1, RAW, mh)

    def delete(self, cid: CID) -> None:
        try:
            size = self.size(cid)
            self.path(cid).unlink()
        except (BlockNotFound, FileNotFoundError):
            return
        self._release(size)

    def remove_temporaries(self) -> None:
        """Delete temporary files left by writes that never finished (a crash mid-add). Only
        safe while no write is in flight, i.e. under the exclusive GC lock."""
        for tmp in self.root.glob("*/.*.tmp"):
            tmp.unlink(missing_ok=True)
