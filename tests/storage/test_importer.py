"""The importer makes Kubo's CIDs: checked against the independent `ipfs_cid` tool, and the DAG
shape checked against go-unixfs's balanced layout."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from marketplace.ipfs import dagpb, reader, unixfs
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import Unsupported
from marketplace.ipfs.importer import FileImporter, parse_chunker

from .support import CHUNK, MAX_LINKS, ipfs_cid, needs_ipfs_cid, random_bytes


class MemoryStore(dict):
    """A dict of blocks standing in for the block store, for importer unit tests."""

    def add(self, parts, codec: int, version: int) -> CID:
        block = b"".join(parts)
        cid = CID.of(block, codec, version)
        self[cid] = block
        return cid


def import_bytes(
    data: bytes, store: MemoryStore | None = None, write_size: int = 100_000, **options
) -> CID:
    """Import in uneven writes, as a network stream delivers them."""
    importer = FileImporter(store.add if store is not None else CID.of_parts, **options)
    for start in range(0, len(data), write_size):
        importer.write(data[start : start + write_size])
    return importer.finish().cid


SIZES = {
    "empty": 0,
    "one byte": 1,
    "hello": 6,
    "one chunk": CHUNK,
    "one chunk + 1": CHUNK + 1,
    "uneven": 3 * CHUNK + 17,
    "full first level": MAX_LINKS * CHUNK,
}


@needs_ipfs_cid
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_cids_match_ipfs_cid(tmp_path: Path, size: int):
    data = random_bytes(size, seed=size)
    path = tmp_path / "file"
    path.write_bytes(data)
    expected = ipfs_cid(path)
    root = import_bytes(data)
    assert str(root) == expected["CIDv0"]
    assert str(root.to_v1()) == expected["CIDv1"]
    if size <= CHUNK:  # one block: Kubo's --cid-version=1 --raw-leaves=false is the same DAG
        assert str(import_bytes(data, cid_version=1)) == expected["CIDv1"]


@needs_ipfs_cid
def test_second_dag_level_matches_ipfs_cid(two_level_file: Path):
    store = MemoryStore()
    root = import_bytes(two_level_file.read_bytes(), store, write_size=CHUNK // 3)
    assert str(root) == ipfs_cid(two_level_file)["CIDv0"]
    top = dagpb.decode(store[root])
    assert [len(dagpb.decode(store[link.cid]).links) for link in top.links] == [MAX_LINKS, 1]


@needs_ipfs_cid
@pytest.mark.parametrize("seed", range(12))
def test_random_sizes_match_ipfs_cid(tmp_path: Path, seed: int):
    size = random_bytes(4, seed=seed)[0] * 4099 + seed * CHUNK // 3
    data = random_bytes(size, seed=seed)
    path = tmp_path / "file"
    path.write_bytes(data)
    assert str(import_bytes(data, write_size=7919)) == ipfs_cid(path)["CIDv0"]


@pytest.mark.parametrize("options", [{}, {"raw_leaves": True, "cid_version": 1}])
def test_leaves_stored_on_threads_in_any_order_give_the_same_dag(options):
    """The add path cuts chunks and links leaves in order, but stores them on worker threads."""
    data = random_bytes(MAX_LINKS * CHUNK + 3 * CHUNK + 5, seed=7)
    sequential, threaded = MemoryStore(), MemoryStore()
    importer = FileImporter(threaded.add, **options)
    chunks = [
        chunk
        for start in range(0, len(data), 100_000)
        for chunk in importer.chunks(data[start : start + 100_000])
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        leaves = list(pool.map(importer.leaf, chunks[::-1]))[::-1]
    for leaf in leaves:
        importer.link(leaf)
    root = importer.finish().cid
    assert root == import_bytes(data, sequential, **options)
    assert threaded == sequential


def test_one_chunk_with_raw_leaves_is_a_raw_block():
    data = b"hello\n"
    assert import_bytes(data, raw_leaves=True) == CID.of(data, RAW)
    assert import_bytes(b"", raw_leaves=True) == CID.of(b"", RAW)


def leaf_depths(store: MemoryStore, cid: CID, depth: int = 0) -> list[int]:
    if cid.codec == RAW:
        return [depth]
    node = dagpb.decode(store[cid])
    assert len(node.links) <= MAX_LINKS
    if not node.links:
        return [depth]
    return [d for link in node.links for d in leaf_depths(store, link.cid, depth + 1)]


@pytest.mark.parametrize("options", [{}, {"raw_leaves": True}, {"cid_version": 1}])
def test_three_level_dag_is_balanced_and_reads_back(options):
    """Tiny chunks reach a third level quickly; every leaf sits at the same depth, and the
    links and sizes recorded in the DAG rebuild the input exactly, from any offset."""
    chunk = 16
    data = random_bytes(MAX_LINKS * MAX_LINKS * chunk + 5 * chunk + 3, seed=3)
    store = MemoryStore()
    root = import_bytes(data, store, chunk_size=chunk, **options)
    depths = leaf_depths(store, root)
    assert set(depths) == {3}
    assert len(depths) == -(-len(data) // chunk)
    assert b"".join(reader.iter_file(root, store.__getitem__)) == data
    assert b"".join(reader.iter_file(root, store.__getitem__, 12345, 6789)) == data[12345:19134]
    assert reader.file_size(root, store.__getitem__) == len(data)


def test_cid_version_1_links_are_v1_and_leaves_raw():
    store = MemoryStore()
    root = import_bytes(random_bytes(3 * CHUNK), store, cid_version=1, raw_leaves=True)
    assert (root.version, root.codec) == (1, DAG_PB)
    links = dagpb.decode(store[root]).links
    assert {(link.cid.version, link.cid.codec) for link in links} == {(1, RAW)}
    assert unixfs.decode(dagpb.decode(store[root]).data).blocksizes == [CHUNK] * 3


@pytest.mark.parametrize(
    "spec, size",
    [(None, CHUNK), ("default", CHUNK), ("size-1024", 1024), ("size-1048576", 1048576)],
)
def test_chunker_specs(spec, size):
    assert parse_chunker(spec) == size


@pytest.mark.parametrize("spec", ["rabin", "size-0", "size-1048577", "size-abc", "buzhash"])
def test_unsupported_chunkers_are_refused(spec):
    with pytest.raises(Unsupported):
        parse_chunker(spec)
