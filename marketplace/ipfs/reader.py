"""Walking a UnixFS file DAG: its bytes in order (with a byte range), or every block it spans."""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from marketplace.ipfs import dagpb, unixfs
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import InvalidBlock, NotAFile, Unsupported

# Returns a block's bytes already checked against the CID; the walkers never re-verify.
GetBlock = Callable[[CID], bytes]
# Returns the blocks of the given CIDs, verified, in the same order.
FetchMany = Callable[[list[CID]], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class FileNode:
    """One node of a file DAG, decoded: the bytes it holds itself and its children in order."""

    data: bytes
    children: list[CID]
    child_sizes: list[int]  # file bytes under each child (UnixFS blocksizes)
    filesize: int


def decode_file_node(cid: CID, block: bytes) -> FileNode:
    """Decode a block as part of a file; directories and foreign codecs are refused."""
    if cid.codec == RAW:
        return FileNode(block, [], [], len(block))
    if cid.codec != DAG_PB:
        raise NotAFile(f"{cid}: codec 0x{cid.codec:x} is not a UnixFS file")
    node = dagpb.decode(block)
    if node.data is None:
        raise NotAFile(f"{cid}: dag-pb node without UnixFS data")
    meta = unixfs.decode(node.data)
    if meta.type in (unixfs.DIRECTORY, unixfs.HAMT_SHARD):
        raise NotAFile(f"{cid}: this dag node is a directory")
    if meta.type not in (unixfs.FILE, unixfs.RAW):
        raise NotAFile(f"{cid}: UnixFS type {meta.type} is not a file")
    if len(meta.blocksizes) != len(node.links):
        raise InvalidBlock(f"{cid}: {len(node.links)} links but {len(meta.blocksizes)} sizes")
    data = meta.data or b""
    filesize = meta.filesize if meta.filesize is not None else len(data) + sum(meta.blocksizes)
    return FileNode(data, [link.cid for link in node.links], meta.blocksizes, filesize)


def file_size(cid: CID, get_block: GetBlock) -> int:
    return decode_file_node(cid, get_block(cid)).filesize


def fetch_in_order(get_block: GetBlock) -> FetchMany:
    """Fetch siblings one after another: the default, and right for a local block store."""
    return lambda cids: map(get_block, cids)


def iter_file(
    cid: CID,
    get_block: GetBlock,
    offset: int = 0,
    length: int | None = None,
    fetch_many: FetchMany | None = None,
) -> Iterator[bytes]:
    """Yield the file's bytes from `offset`, at most `length` of them, one block at a time;
    subtrees wholly before the range are skipped by their recorded sizes, never fetched.
    `fetch_many` fetches a node's children (in order); a remote reader can fetch ahead."""
    end = None if length is None else offset + length
    fetch_many = fetch_many or fetch_in_order(get_block)
    yield from _walk(cid, get_block(cid), fetch_many, offset, end)


def _walk(
    cid: CID, block: bytes, fetch_many: FetchMany, start: int, end: int | None
) -> Iterator[bytes]:
    """Bytes of the subtree at `cid` within [start, end), positions relative to the subtree."""
    node = decode_file_node(cid, block)
    pos = len(node.data)
    if node.data and start < pos and (end is None or end > 0):
        yield node.data[max(start, 0) : end]
    wanted = []  # (child, its first byte's position) for children overlapping the range
    for child, size in zip(node.children, node.child_sizes, strict=True):
        if end is not None and pos >= end:
            break
        if pos + size > start:
            wanted.append((child, pos))
        pos += size
    blocks = fetch_many([child for child, _ in wanted])
    for (child, child_pos), child_block in zip(wanted, blocks, strict=True):
        yield from _walk(
            child,
            child_block,
            fetch_many,
            start - child_pos,
            None if end is None else end - child_pos,
        )


def iter_blocks(cid: CID, get_block: GetBlock) -> Iterator[tuple[CID, bytes | None]]:
    """Yield (CID, block) for every block of a DAG, root first. Raw blocks have no links, so
    they are not read (block is None): a caller that needs them present checks for them."""
    stack = [cid]
    while stack:
        current = stack.pop()
        if current.codec == RAW:
            yield current, None
            continue
        if current.codec != DAG_PB:
            raise Unsupported(f"{current}: only dag-pb and raw DAGs can be walked")
        block = get_block(current)
        yield current, block
        stack.extend(reversed([link.cid for link in dagpb.decode(block).links]))
