"""DAG bombs: a few KB of blocks, each node linking 174 times to the same child, five levels
deep, describe 174**5 leaves (petabytes). Put on a node with block/put as an attacker would,
they must be refused at once by pin, cat, get and the gateway, must not hold GC's exclusive lock
for long even when pinned, and must be refused by the client's own reader, which the gateway
and daemons use on CIDs anyone can name."""

import threading
import time
from pathlib import Path

import pytest
import requests

from marketplace.ipfs import reader
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.ipfs.errors import DagTooLarge, InvalidBlock
from marketplace.ipfs.limits import WalkLimits
from marketplace.ipfs.pinstore import RECURSIVE
from marketplace.ipfs.repo import Repo
from marketplace.storage import ContentTooLarge, ReplicationError, Storage, StorageError

from .support import AUTH, CHUNK, MAX_LINKS, Node, dag_bomb, file_node, put_blocks

FAST_S = 5.0  # what "at once" means here, on a loaded machine; an unbounded walk takes years


def rpc(node: Node, command: str, **params) -> requests.Response:
    return requests.post(f"{node.url}/api/v0/{command}", headers=AUTH, params=params, timeout=60)


def timed(action, *args, **kwargs):
    """What `action` returned, and the seconds it took."""
    started = time.monotonic()
    result = action(*args, **kwargs)
    return result, time.monotonic() - started


@pytest.fixture
def bomb(node: Node) -> CID:
    root, blocks = dag_bomb()
    assert sum(map(len, blocks.values())) < 64 * 1024  # a few KB describing 174**5 KiB
    put_blocks(node.url, blocks)
    return root


def test_pin_refuses_a_dag_bomb_at_once(node: Node, bomb: CID):
    response, elapsed = timed(rpc, node, "pin/add", arg=str(bomb))
    assert response.status_code == 400
    assert f"declares {MAX_LINKS**5 * 1024} bytes, more than" in response.json()["Message"]
    assert elapsed < FAST_S
    assert str(bomb) not in rpc(node, "pin/ls").json()["Keys"]


@pytest.mark.parametrize("command", ["cat", "get"])
def test_cat_and_get_refuse_a_dag_bomb_before_sending_anything(node: Node, bomb: CID, command: str):
    response, elapsed = timed(rpc, node, command, arg=str(bomb))
    assert response.status_code == 400 and "more than" in response.json()["Message"]
    assert elapsed < FAST_S


def test_the_gateway_refuses_a_dag_bomb_and_sends_its_car_with_each_block_once(
    node: Node, bomb: CID
):
    response, elapsed = timed(requests.get, f"{node.url}/ipfs/{bomb}", timeout=60)
    assert response.status_code == 400 and "more than" in response.text
    assert elapsed < FAST_S
    car = requests.get(f"{node.url}/ipfs/{bomb}?format=car", stream=True, timeout=60)
    started = time.monotonic()
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        b"".join(car.iter_content(None))  # cut off at the root: it declares too much
    assert time.monotonic() - started < FAST_S


def test_the_client_reader_refuses_a_dag_bomb_at_once(node: Node, bomb: CID, tmp_path: Path):
    with Storage(node.multiaddr, []) as storage:
        for read in (
            lambda: storage.cat(str(bomb)),
            lambda: storage.read_to(str(bomb), tmp_path / "out"),
        ):
            started = time.monotonic()
            with pytest.raises(ContentTooLarge, match="more than"):
                read()
            assert time.monotonic() - started < FAST_S
        with pytest.raises(ReplicationError, match="pinned on 0 of 1"):
            storage.pin(str(bomb), replicas=1)
    assert not (tmp_path / "out").exists()


def test_sizes_that_do_not_add_up_are_refused(node: Node):
    """A bomb whose root lies small about its children, to pass the bound on declared bytes."""
    inner, blocks = dag_bomb(levels=4)
    root_block = file_node([(inner, 1, 1)] * MAX_LINKS)
    root = CID.of(root_block, DAG_PB)
    put_blocks(node.url, blocks | {root: root_block})
    response, elapsed = timed(rpc, node, "pin/add", arg=str(root))
    assert response.status_code == 400
    assert "its parent's link says 1" in response.json()["Message"]
    assert elapsed < FAST_S
    started = time.monotonic()
    with Storage(node.multiaddr, []) as storage, pytest.raises(StorageError, match="says 1"):
        storage.cat(str(root))
    assert time.monotonic() - started < FAST_S


def test_a_leaf_holding_other_than_its_declared_size_ends_the_read(node: Node):
    root, blocks = dag_bomb(levels=2, leaf=b"x" * 10, leaf_size=1)
    put_blocks(node.url, blocks)
    with Storage(node.multiaddr, []) as storage, pytest.raises(StorageError, match="says 1"):
        storage.cat(str(root))


def test_a_walk_stops_at_its_bound_on_blocks_visited(node_factory):
    """One-byte leaves keep the declared size (174**5 bytes) under the bound on bytes: the
    bound on blocks one walk visits stops the read."""
    node = node_factory.start(env={"ZOO_IPFS_MAX_DAG_BLOCKS": "10000"})
    root, blocks = dag_bomb(leaf=b"x")
    put_blocks(node.url, blocks)
    started = time.monotonic()
    with requests.post(
        f"{node.url}/api/v0/cat", headers=AUTH, params={"arg": str(root)}, stream=True, timeout=60
    ) as response:
        assert response.status_code == 200
        received = bytearray()
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for piece in response.iter_content(None):
                received += piece
    assert len(received) < 10000
    assert time.monotonic() - started < FAST_S


def test_gc_with_a_pinned_bomb_marks_each_block_once_and_lets_writers_in(
    node_factory, tmp_path: Path
):
    """A bomb pinned before these checks existed (or by a node with looser bounds): GC's mark
    still visits its six blocks once each, holding the exclusive lock only briefly."""
    root, blocks = dag_bomb()
    repo_path = tmp_path / "repo"
    repo = Repo(repo_path)
    for cid, data in blocks.items():
        repo.blocks.add([data], cid.codec)
    repo.pins.add(root, RECURSIVE)
    repo.close()
    node = node_factory.start(repo_path)
    writer_done: list[float] = []

    def write_during_gc() -> None:
        started = time.monotonic()
        with Storage(node.multiaddr, []) as storage:
            storage.add_bytes(b"written while gc runs")
        writer_done.append(time.monotonic() - started)

    writer = threading.Thread(target=write_during_gc)
    writer.start()
    response, elapsed = timed(rpc, node, "repo/gc")
    writer.join(timeout=30)
    assert response.ok and response.text == ""  # every bomb block is pinned
    assert elapsed < FAST_S and writer_done and writer_done[0] < FAST_S
    rpc(node, "pin/rm", arg=str(root)).raise_for_status()
    removed = rpc(node, "repo/gc").text.splitlines()
    assert len(removed) == len(blocks)


def test_every_walk_visits_a_bombs_blocks_once_within_its_bounds():
    root, blocks = dag_bomb()
    fetched: list[CID] = []

    def get(cid: CID) -> bytes:
        fetched.append(cid)
        return blocks[cid]

    assert len(list(reader.iter_blocks(root, get, None))) == len(blocks)
    assert len(fetched) == len(blocks) - 1  # the raw leaf has no links to read
    with pytest.raises(DagTooLarge, match="more than 3 levels"):
        list(reader.iter_blocks(root, get, WalkLimits(max_bytes=1 << 60, max_depth=3)))
    with pytest.raises(DagTooLarge, match="more than 4 blocks"):
        list(reader.iter_blocks(root, get, WalkLimits(max_blocks=4, max_bytes=1 << 60)))
    tiny, tiny_blocks = dag_bomb(leaf=b"x")
    with pytest.raises(DagTooLarge, match="visits more than 10000 blocks"):
        b"".join(reader.iter_file(tiny, tiny_blocks.__getitem__, limits=WalkLimits(10000)))


def test_a_link_declaring_an_empty_subtree_is_refused():
    leaf = CID.of(b"", RAW)
    root_block = file_node([(leaf, 0, 0)] * MAX_LINKS)
    with pytest.raises(InvalidBlock, match="empty subtree"):
        reader.decode_file_node(CID.of(root_block, DAG_PB), root_block)


def test_honest_repeated_content_reads_and_pins_whole(node: Node):
    data = bytes(MAX_LINKS * CHUNK + 1)  # one zero leaf linked 174 times, over two levels
    with Storage(node.multiaddr, []) as storage:
        cid = storage.add_bytes(data)
        assert storage.cat(cid) == data
        assert storage.pin(cid, replicas=1) == [node.multiaddr]
    assert requests.get(f"{node.url}/ipfs/{cid}", timeout=60).content == data
