"""`ipfs add` for one file: fixed-size chunks into Kubo's balanced UnixFS DAG, streamed."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from marketplace.ipfs import dagpb, unixfs
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import Unsupported
from marketplace.ipfs.multihash import Buffer

DEFAULT_CHUNK_SIZE = 256 * 1024
MAX_CHUNK_SIZE = 1024 * 1024  # Kubo's limit: a block must fit the 1 MiB bitswap message
MAX_LINKS = 174  # go-unixfs: 8 KiB of links per node / ~47 bytes per link

# Stores (or only hashes) one block, given as consecutive buffers, and returns its CID:
# Blockstore.add, or CID.of_parts to only hash.
BlockSink = Callable[[Sequence[Buffer], int, int], CID]


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


@lru_cache(maxsize=16)
def _leaf_frame(size: int) -> tuple[bytes, bytes]:
    """The bytes before and after `size` bytes of file data in a dag-pb leaf. They depend
    on the size alone, so each size is encoded once, not once per 256 KiB of every add; a
    leaf is then three buffers to hash and write rather than six."""
    data = memoryview(bytes(size))
    parts = dagpb.encode([], unixfs.encode_parts(unixfs.FILE, [data], size, []))
    # An empty leaf has no Data field, hence no place for the data.
    at = next((i for i, part in enumerate(parts) if part is data), len(parts))
    return b"".join(parts[:at]), b"".join(parts[at + 1 :])


@dataclass(frozen=True, slots=True)
class Imported:
    cid: CID
    size: int  # cumulative DAG size, what Kubo reports as `Size`
    filesize: int


@dataclass(frozen=True, slots=True)
class Child:
    """A stored block as its parent links it, with the file bytes under it."""

    link: dagpb.Link
    filesize: int


class FileImporter:
    """Feed bytes with `write`, then `finish` for the root. Full levels of the tree are closed
    only when one more child arrives, which yields exactly go-unixfs's balanced layout: every
    leaf at the same depth, nodes filled to 174 links left to right, a lone chunk as the root.

    A chunk is kept as views of the buffers it arrived in until it is complete, so `write`
    must be given buffers that do not change afterwards (bytes, or views of bytes).

    `write` is three steps that a caller may also take one by one, to store several leaves
    at once: `chunks` cuts the stream, `leaf` stores one chunk (it only calls the sink, so it
    may run on any thread), and `link` adds the leaves to the tree in file order; every leaf
    is linked before `finish`."""

    def __init__(
        self,
        sink: BlockSink,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        cid_version: int = 0,
        raw_leaves: bool = False,
    ) -> None:
        self._sink = sink
        self._chunk_size = chunk_size
        self._version = cid_version
        self._raw_leaves = raw_leaves
        self._pending: list[memoryview] = []
        self._pending_size = 0
        self._levels: list[list[Child]] = []

    def write(self, data: Buffer) -> None:
        for chunk in self.chunks(data):
            self.link(self.leaf(chunk))

    def chunks(self, data: Buffer) -> list[list[memoryview]]:
        """The chunks `data` completes, each as the views of the buffers it arrived in; the
        bytes of an incomplete chunk wait for the next write."""
        complete = []
        view = memoryview(data).cast("B")
        while view:
            take = min(len(view), self._chunk_size - self._pending_size)
            self._pending.append(view[:take])
            self._pending_size += take
            view = view[take:]
            if self._pending_size == self._chunk_size:
                complete.append(self._pending)
                self._pending, self._pending_size = [], 0
        return complete

    def leaf(self, chunk: list[memoryview]) -> Child:
        """Store one chunk as a leaf block."""
        size = sum(len(part) for part in chunk)
        if self._raw_leaves:
            return Child(dagpb.Link(self._sink(chunk, RAW, 1), "", size), size)
        prefix, suffix = _leaf_frame(size)
        cid = self._sink([prefix, *chunk, suffix], DAG_PB, self._version)
        return Child(dagpb.Link(cid, "", len(prefix) + size + len(suffix)), size)

    def link(self, leaf: Child) -> None:
        """Add the file's next leaf to the tree."""
        self._push(0, leaf)

    def finish(self) -> Imported:
        if self._pending or not self._levels:
            self.link(self.leaf(self._pending))
            self._pending, self._pending_size = [], 0
        level = 0
        while level < len(self._levels) - 1 or len(self._levels[level]) > 1:
            self._push(level + 1, self._close(level))
            level += 1
        root = self._levels[level][0]
        return Imported(root.link.cid, root.link.tsize, root.filesize)

    def _push(self, level: int, child: Child) -> None:
        if level == len(self._levels):
            self._levels.append([])
        if len(self._levels[level]) == MAX_LINKS:
            self._push(level + 1, self._close(level))
        self._levels[level].append(child)

    def _close(self, level: int) -> Child:
        """Turn a level's pending children into one internal node."""
        children, self._levels[level] = self._levels[level], []
        sizes = [c.filesize for c in children]
        filesize = sum(sizes)
        block = dagpb.encode(
            [c.link for c in children], unixfs.encode_parts(unixfs.FILE, [], filesize, sizes)
        )
        cid = self._sink(block, DAG_PB, self._version)
        tsize = sum(len(part) for part in block) + sum(c.link.tsize for c in children)
        return Child(dagpb.Link(cid, "", tsize), filesize)


def only_hash(data: bytes | memoryview, **options) -> CID:
    """The CID `ipfs add --only-hash` gives for `data` (options as FileImporter's), storing
    nothing."""
    importer = FileImporter(CID.of_parts, **options)
    importer.write(data)
    return importer.finish().cid
