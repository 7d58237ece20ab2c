"""The Storage client against real node processes: verified reads, replication, fallback."""

import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from marketplace.storage import (
    CidMismatch,
    ContentNotFound,
    ContentTooLarge,
    InvalidCid,
    NodeUnavailable,
    ReplicationError,
    Storage,
    StorageError,
    _FileUpload,
    api_multiaddr,
)

from .support import CHUNK, lying_node, random_bytes


@pytest.fixture
def three_nodes(node_factory):
    return node_factory.start_many(3)


def corrupt_every_block(node) -> None:
    for path in (node.repo / "blocks").glob("*/*.data"):
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))


def test_add_bytes_and_cat(shared_node):
    with Storage(shared_node.multiaddr) as storage:
        cid = storage.add_bytes(b"job spec")
        assert storage.cat(cid) == b"job spec"


def test_cat_refuses_content_past_the_readers_bound(shared_node):
    """A CID named by someone else may hold gigabytes: a bounded read stops within a block of the
    bound."""
    data = random_bytes(3 * CHUNK)
    with Storage(shared_node.multiaddr) as storage:
        cid = storage.add_bytes(data)
        assert storage.cat(cid, max_bytes=len(data)) == data
        with pytest.raises(ContentTooLarge, match=f"more than {CHUNK} bytes"):
            storage.cat(cid, max_bytes=CHUNK)


def test_add_file_and_read_to_stream_a_two_level_file(shared_node, two_level_file, tmp_path):
    with Storage(shared_node.multiaddr) as storage:
        cid = storage.add_file(two_level_file)
        out = tmp_path / "restored.bin"
        storage.read_to(cid, out)
    assert out.read_bytes() == two_level_file.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["restored.bin"]


@pytest.mark.parametrize(
    "name, size", [("empty.bin", 0), ('naïve 100% "quoted".bin', 3 * CHUNK + 5)]
)
def test_add_file_names_the_same_content_as_add_bytes(shared_node, tmp_path, name, size):
    path = tmp_path / name
    path.write_bytes(random_bytes(size, seed=size))
    with Storage(shared_node.multiaddr) as storage:
        assert storage.add_file(path) == storage.add_bytes(path.read_bytes())


def test_configuration_comes_from_the_environment(shared_node, monkeypatch):
    monkeypatch.setenv("ZOO_IPFS_API", shared_node.url)
    monkeypatch.setenv("ZOO_IPFS_REPLICAS", json.dumps([shared_node.multiaddr]))
    with Storage() as storage:
        assert storage.nodes == [shared_node.url, shared_node.multiaddr]
        assert storage.cat(storage.add_bytes(b"from env")) == b"from env"


@pytest.mark.parametrize(
    "url, multiaddr",
    [
        ("http://127.0.0.1:5001", "/ip4/127.0.0.1/tcp/5001/http"),
        ("https://ipfs.example:443", "/dns/ipfs.example/tcp/443/https"),
        ("/ip4/10.0.0.2/tcp/5001/http", "/ip4/10.0.0.2/tcp/5001/http"),
    ],
)
def test_api_addresses_as_url_or_multiaddr(url, multiaddr):
    assert api_multiaddr(url) == multiaddr


@pytest.mark.parametrize("addr", ["localhost:5001", "/ip4/127.0.0.1/udp/5001"])
def test_bad_address_is_a_storage_error(addr):
    with pytest.raises(StorageError, match=addr):
        Storage(addr)


def test_invalid_and_unknown_cids(shared_node):
    with Storage(shared_node.multiaddr) as storage:
        with pytest.raises(InvalidCid):
            storage.cat("not-a-cid")
        with pytest.raises(ContentNotFound):
            storage.cat("QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEM")


def test_pin_copies_to_replicas_and_each_holds_a_full_copy(three_nodes):
    a, b, c = three_nodes
    data = random_bytes(5 * CHUNK + 9, seed=31)
    with Storage(a.multiaddr, replicas=[b.multiaddr, c.multiaddr]) as storage:
        cid = storage.add_bytes(data)
        assert storage.pin(cid, replicas=3) == [a.multiaddr, b.multiaddr, c.multiaddr]
        assert storage.pin(cid, replicas=3) == [a.multiaddr, b.multiaddr, c.multiaddr]
    for node in (b, c):
        with node.client() as client:
            assert cid in client.pin.ls(type="recursive")["Keys"]
            client.repo.gc()
        with Storage(node.multiaddr) as alone:
            assert alone.cat(cid) == data


def test_pin_of_raw_leaf_cidv1_content(three_nodes):
    a, b, _ = three_nodes
    data = random_bytes(3 * CHUNK, seed=32)
    with a.client() as client:
        cid = client.add_bytes(data, opts={"cid-version": 1})
    with Storage(a.multiaddr, replicas=[b.multiaddr]) as storage:
        assert storage.pin(cid, replicas=2) == [a.multiaddr, b.multiaddr]
    with Storage(b.multiaddr) as alone:
        assert alone.cat(cid) == data


def test_reads_fall_back_when_the_primary_is_down(three_nodes):
    a, b, c = three_nodes
    data = random_bytes(2 * CHUNK + 1, seed=33)
    with Storage(a.multiaddr, replicas=[b.multiaddr, c.multiaddr]) as storage:
        cid = storage.add_bytes(data)
        storage.pin(cid, replicas=2)
        a.stop()
        assert storage.cat(cid) == data
        with pytest.raises(ReplicationError) as failed:
            storage.pin(cid, replicas=3)
        assert failed.value.holders == [b.multiaddr, c.multiaddr]


def test_reads_fall_back_past_a_node_with_corrupt_blocks(three_nodes):
    a, b, _ = three_nodes
    data = random_bytes(2 * CHUNK + 1, seed=34)
    with Storage(a.multiaddr, replicas=[b.multiaddr]) as storage:
        cid = storage.add_bytes(data)
        storage.pin(cid, replicas=2)
        corrupt_every_block(a)
        assert storage.cat(cid) == data
        corrupt_every_block(b)
        with pytest.raises(ContentNotFound, match="corrupt"):
            storage.cat(cid)


def test_a_node_serving_wrong_bytes_is_caught_and_skipped(shared_node, tmp_path: Path):
    with Storage(shared_node.multiaddr) as storage:
        cid = storage.add_bytes(b"checkpoint bytes")
    with lying_node() as liar:
        with Storage(liar, replicas=[shared_node.multiaddr]) as storage:
            assert storage.cat(cid) == b"checkpoint bytes"
        with Storage(liar) as storage:
            with pytest.raises(CidMismatch, match="do not hash to"):
                storage.cat(cid)
            out = tmp_path / "never.bin"
            with pytest.raises(CidMismatch):
                storage.read_to(cid, out)
            assert list(tmp_path.iterdir()) == []


def test_a_replica_that_stores_other_bytes_is_refused(shared_node):
    with lying_node() as liar, Storage(shared_node.multiaddr, replicas=[liar]) as storage:
        cid = storage.add_bytes(b"replicate me")
        with pytest.raises(ReplicationError) as failed:
            storage.pin(cid, replicas=2)
        assert failed.value.holders == [shared_node.multiaddr]


def test_asking_for_more_replicas_than_known_nodes(shared_node):
    with Storage(shared_node.multiaddr, replicas=[]) as storage:
        cid = storage.add_bytes(b"lonely")
        with pytest.raises(ReplicationError, match="1 nodes are known"):
            storage.pin(cid, replicas=3)
        assert storage.pin(cid, replicas=1) == [shared_node.multiaddr]


def test_unreachable_nodes(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with Storage("/ip4/127.0.0.1/tcp/9/http") as storage:
        with pytest.raises(NodeUnavailable):
            storage.cat("QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN")
        with pytest.raises(NodeUnavailable):
            storage.add_bytes(b"x")
        with pytest.raises(NodeUnavailable):
            storage.add_file(tmp_path / "f")


def test_a_file_that_shrinks_while_it_is_sent_is_an_error_not_a_short_body(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(random_bytes(3 * CHUNK))
    upload = _FileUpload(path)
    path.write_bytes(random_bytes(CHUNK))
    ours, theirs = socket.socketpair()
    with ours, theirs, ThreadPoolExecutor(1) as reader:
        drained = reader.submit(lambda: sum(iter(lambda: len(theirs.recv(1 << 20)), 0)))
        with pytest.raises(StorageError, match="shrank"):
            upload.send(ours)
        ours.shutdown(socket.SHUT_WR)
        assert drained.result() < len(upload)
