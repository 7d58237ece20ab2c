"""`ipfs add` for one file: fixed-size chunks into Kubo's balanced UnixFS DAG, streamed."""

from collections.abc import Callable
from dataclasses import dataclass

from marketplace.ipfs import dagpb, unixfs
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import Unsupported

DEFAULT_CHUNK_SIZE = 256 * 1024
MAX_CHUNK_SIZE = 1024 * 1024  # Kubo's limit: a block must fit the 1 MiB bitswap message
MAX_LINKS = 174  # go-unixfs: 8 KiB of links per node / ~47 bytes per link

# Stores (or only hashes) one block and returns its CID: Blockstore.add, or CID.of to
# only hash.
BlockSink = Callable[[bytes | memoryview, int, int], CID]


def parse_chunker(spec: str | None) -> int:
    """Chunk size from Kubo's `--chunker` value; only fixed-size chunking is offered."""
    if spec in (None, "", "default"):
        return DEFAULT_CHUNK_SIZE
    name, _, size = spec.partition("-")
    if name != "size":
        raise Unsupported(f"chunker {spec!r} is not supported, use size-<bytes>")
    if not size.isdigit() or not 0 < int(size) <= MAX_CHUNK_SIZE:
        raise Unsupported(f"chunker size must be 1..{MAX_CHUNK_SIZE} bytes, got {size!r}")
    return int(size)


@dataclass(frozen=True, slots=True)
class Imported:
    cid: CID
    size: int  # cumulative DAG size, what Kubo reports as `Size`
    filesize: int


@dataclass(frozen=True, slots=True)
class _Child:
    link: dagpb.Link
    filesize: int


class FileImporter:
    """Feed bytes with `write`, then `finish` for the root. Full levels of the tree are closed
    only when one more child arrives, which yields exactly go-unixfs's balanced layout: every
    leaf at the same depth, nodes filled to 174 links left to right, a lone chunk as the root."""

    def __init__(self, sink: BlockSink, *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 cid_version: int = 0, raw_leaves: bool = False) -> None:
        self._sink = sink
        self._chunk_size = chunk_size
        self._version = cid_version
        self._raw_leaves = raw_leaves
        self._pending = bytearray()
        self._levels: list[list[_Child]] = []

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        if self._pending:
            take = self._chunk_size - len(self._pending)
            self._pending += view[:take]
            view = view[take:]
            if len(self._pending) < self._chunk_size:
                return
            self._add_leaf(bytes(self._pending))
            self._pending.clear()
        while len(view) >= self._chunk_size:
            self._add_leaf(view[:self._chunk_size])
            view = view[self._chunk_size:]
        self._pending += view

    def finish(self) -> Imported:
        if self._pending or not self._levels:
            self._add_leaf(bytes(self._pending))
            self._pending.clear()
        level = 0
        while level < len(self._levels) - 1 or len(self._levels[level]) > 1:
            self._push(level + 1, self._close(level))
            level += 1
        root = self._levels[level][0]
        return Imported(root.link.cid, root.link.tsize, root.filesize)

    def _add_leaf(self, chunk: bytes | memoryview) -> None:
        if self._raw_leaves:
            cid = self._sink(chunk, RAW, 1)
            tsize = len(chunk)
        else:
            block = dagpb.encode([], unixfs.encode_parts(unixfs.FILE, chunk, len(chunk), []))
            cid = self._sink(block, DAG_PB, self._version)
            tsize = len(block)
        self._push(0, _Child(dagpb.Link(cid, "", tsize), len(chunk)))

    def _push(self, level: int, child: _Child) -> None:
        if level == len(self._levels):
            self._levels.append([])
        if len(self._levels[level]) == MAX_LINKS:
            self._push(level + 1, self._close(level))
        self._levels[level].append(child)

    def _close(self, level: int) -> _Child:
        """Turn a level's pending children into one internal node."""
        children, self._levels[level] = self._levels[level], []
        sizes = [c.filesize for c in children]
        filesize = sum(sizes)
        block = dagpb.encode([c.link for c in children],
                             unixfs.encode_parts(unixfs.FILE, None, filesize, sizes))
        cid = self._sink(block, DAG_PB, self._version)
        tsize = len(block) + sum(c.link.tsize for c in children)
        return _Child(dagpb.Link(cid, "", tsize), filesize)
