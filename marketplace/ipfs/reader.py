"""Walking a UnixFS file DAG: its bytes in order (with a byte range), or every block it spans.

The DAG may be an attacker's, so every walk is bounded (WalkLimits) and checks the sizes the
DAG declares: a node's file size must be its own bytes plus its links' sizes, each child must
declare the size its parent's link says, and a raw leaf must hold that many bytes. Sizes that
add up make the root's declared size the true size, so one look at the root refuses a DAG that
claims more than the bound."""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from marketplace.ipfs import dagpb, unixfs
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import DagTooLarge, InvalidBlock, NotAFile, Unsupported
from marketplace.ipfs.limits import DEFAULT_WALK_LIMITS, WalkLimits

# Returns a block's bytes already checked against the CID; the walkers never re-verify.
GetBlock = Callable[[CID], bytes]
# Returns the blocks of the given CIDs, verified, in the same order.
FetchMany = Callable[[list[CID]], Iterable[bytes]]
# What a walk keeps to visit each block once: (codec, multihash), so a raw block never hides
# the links of a dag-pb block with the same hash.
Seen = set[tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class FileNode:
    """One node of a file DAG, decoded: the bytes it holds itself and its children in order."""

    data: bytes
    children: list[CID]
    child_sizes: list[int]  # file bytes under each child (UnixFS blocksizes)
    filesize: int


def decode_file_node(cid: CID, block: bytes) -> FileNode:
    """Decode a block as part of a file; directories and foreign codecs are refused, and so is
    a node whose declared size is not its own bytes plus its links' sizes."""
    if cid.codec == RAW:
        return FileNode(block, [], [], len(block))
    if cid.codec != DAG_PB:
        raise NotAFile(f"{cid}: codec 0x{cid.codec:x} is not a UnixFS file")
    return _file_node(cid, dagpb.decode(block))


def _file_node(cid: CID, node: dagpb.Node) -> FileNode:
    if node.data is None:
        raise NotAFile(f"{cid}: dag-pb node without UnixFS data")
    meta = unixfs.decode(node.data)
    if meta.type in (unixfs.DIRECTORY, unixfs.HAMT_SHARD):
        raise NotAFile(f"{cid}: this dag node is a directory")
    if meta.type not in (unixfs.FILE, unixfs.RAW):
        raise NotAFile(f"{cid}: UnixFS type {meta.type} is not a file")
    if len(meta.blocksizes) != len(node.links):
        raise InvalidBlock(f"{cid}: {len(node.links)} links but {len(meta.blocksizes)} sizes")
    if 0 in meta.blocksizes:  # an empty subtree adds nothing but work to every read
        raise InvalidBlock(f"{cid}: a link declares an empty subtree")
    data = meta.data or b""
    held = len(data) + sum(meta.blocksizes)
    if meta.filesize is not None and meta.filesize != held:
        raise InvalidBlock(f"{cid}: declares {meta.filesize} bytes but its data and links {held}")
    return FileNode(data, [link.cid for link in node.links], meta.blocksizes, held)


def _check_declared(
    cid: CID, node: FileNode, expected: int | None, depth: int, limits: WalkLimits
) -> None:
    if expected is not None and node.filesize != expected:
        raise InvalidBlock(
            f"{cid}: holds {node.filesize} bytes but its parent's link says {expected}"
        )
    if node.filesize > limits.max_bytes:
        raise DagTooLarge(
            f"{cid}: declares {node.filesize} bytes, more than {limits.max_bytes} bytes allowed"
        )
    if depth > limits.max_depth:
        raise DagTooLarge(f"{cid}: more than {limits.max_depth} levels deep")


def file_size(cid: CID, get_block: GetBlock, limits: WalkLimits = DEFAULT_WALK_LIMITS) -> int:
    """The file's size as its root declares it, refused if past the bound: a read checks
    every level against it, so this is the size a read will deliver or fail on."""
    node = decode_file_node(cid, get_block(cid))
    _check_declared(cid, node, None, 0, limits)
    return node.filesize


def fetch_in_order(get_block: GetBlock) -> FetchMany:
    """Fetch siblings one after another: the default, and right for a local block store."""
    return lambda cids: map(get_block, cids)


def iter_file(
    cid: CID,
    get_block: GetBlock,
    offset: int = 0,
    length: int | None = None,
    fetch_many: FetchMany | None = None,
    limits: WalkLimits = DEFAULT_WALK_LIMITS,
) -> Iterator[bytes]:
    """Yield the file's bytes from `offset`, at most `length` of them, one block at a time;
    subtrees wholly before the range are skipped by their recorded sizes, never fetched.
    `fetch_many` fetches a node's children (in order); a remote reader can fetch ahead."""
    end = None if length is None else offset + length
    walk = _FileWalk(fetch_many or fetch_in_order(get_block), limits)
    yield from walk.bytes(walk.node(cid, get_block(cid), None, 0), 0, offset, end)


# What one read keeps decoded: the nodes seen last (a path down a DAG of any sane depth, and
# its siblings' small leaves), at most about 10 MiB of them.
_KEPT_NODES = 256
_KEPT_LEAF = 16 * 1024


class _FileWalk:
    """One read of a file. Every visit counts against the limits, and each holds at least one
    byte of the output (no link may declare an empty subtree), so the work is bounded by the
    bytes the root declared and by the count of visits. A DAG may link one subtree many times
    (honest repeated content, or a bomb doing it thousands of times over): the internal nodes
    and small leaves seen last are kept decoded, so a repeated one is neither fetched again
    (over the network, for a remote reader) nor parsed again."""

    def __init__(self, fetch_many: FetchMany, limits: WalkLimits) -> None:
        self._fetch_many = fetch_many
        self._limits = limits
        self._recent: dict[CID, FileNode] = {}  # oldest first
        self._visits = 0

    def node(self, cid: CID, block: bytes, expected: int | None, depth: int) -> FileNode:
        """Decode a fetched block and visit it."""
        node = decode_file_node(cid, block)
        if node.children or len(node.data) <= _KEPT_LEAF:
            self._recent[cid] = node
            if len(self._recent) > _KEPT_NODES:
                del self._recent[next(iter(self._recent))]
        return self.visit(cid, node, expected, depth)

    def visit(self, cid: CID, node: FileNode, expected: int | None, depth: int) -> FileNode:
        """Count the visit and check the node against the size its parent declared for it."""
        self._visits += 1
        if self._visits > self._limits.max_blocks:
            raise DagTooLarge(f"reading it visits more than {self._limits.max_blocks} blocks")
        _check_declared(cid, node, expected, depth, self._limits)
        return node

    def bytes(self, node: FileNode, depth: int, start: int, end: int | None) -> Iterator[bytes]:
        """Bytes of the subtree `node` within [start, end), positions relative to it."""
        pos = len(node.data)
        if node.data and start < pos and (end is None or end > 0):
            yield node.data[max(start, 0) : end]
        wanted = []  # (child, its size, its first byte's position) overlapping the range
        for child, size in zip(node.children, node.child_sizes, strict=True):
            if end is not None and pos >= end:
                break
            if pos + size > start:
                wanted.append((child, size, pos))
            pos += size
        kept = [self._recent.get(child) for child, _, _ in wanted]
        fetched = iter(self._fetch_many([c for (c, _, _), k in zip(wanted, kept) if k is None]))
        for (child, size, child_pos), known in zip(wanted, kept, strict=True):
            if known is None:
                child_node = self.node(child, next(fetched), size, depth + 1)
            else:
                child_node = self.visit(child, known, size, depth + 1)
            yield from self.bytes(
                child_node,
                depth + 1,
                start - child_pos,
                None if end is None else end - child_pos,
            )


def iter_blocks(
    cid: CID,
    get_block: GetBlock,
    limits: WalkLimits | None = DEFAULT_WALK_LIMITS,
    seen: Seen | None = None,
) -> Iterator[tuple[CID, bytes | None]]:
    """Yield (CID, block) for every distinct block of a DAG once, root first. Raw blocks have
    no links, so they are not read (block is None): a caller that needs them present checks
    for them. Blocks already in `seen` are skipped and every block yielded is added, so walks
    that share the set visit each block once in all.

    With `limits`, the walk stops past them and checks the sizes UnixFS file nodes declare;
    without, it only keeps the visited set: garbage collection must mark every block a pin
    reaches, and the set already bounds that by the blocks the store holds."""
    seen = set() if seen is None else seen
    declared: dict[CID, int] = {}  # the file size each file node visited declares
    stack: list[tuple[CID, int | None, int]] = [(cid, None, 0)]  # (CID, size, depth)
    visited = 0
    while stack:
        current, expected, depth = stack.pop()
        if (current.codec, current.multihash) in seen:
            if (
                limits is not None
                and expected is not None
                and declared.get(current, expected) != expected
            ):
                raise InvalidBlock(f"{current}: linked with sizes that do not agree")
            continue
        seen.add((current.codec, current.multihash))
        visited += 1
        if limits is not None and visited > limits.max_blocks:
            raise DagTooLarge(f"{cid}: its DAG holds more than {limits.max_blocks} blocks")
        if current.codec == RAW:
            yield current, None
            continue
        if current.codec != DAG_PB:
            raise Unsupported(f"{current}: only dag-pb and raw DAGs can be walked")
        block = get_block(current)
        node = dagpb.decode(block)
        sizes: list[int | None] = [None] * len(node.links)
        if limits is not None and (expected is not None or _is_file(node)):
            file = _file_node(current, node)
            _check_declared(current, file, expected, depth, limits)
            declared[current] = file.filesize
            sizes = list(file.child_sizes)
        yield current, block
        stack.extend(
            (link.cid, size, depth + 1)
            for link, size in reversed(list(zip(node.links, sizes, strict=True)))
        )


def _is_file(node: dagpb.Node) -> bool:
    """Whether a dag-pb node is a UnixFS file node (the only kind whose sizes are checked);
    other dag-pb (directories, foreign data) is walked by its links alone."""
    try:
        return node.data is not None and unixfs.decode(node.data).type in (unixfs.FILE, unixfs.RAW)
    except InvalidBlock:
        return False
