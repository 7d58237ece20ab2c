"""What a node keeps on disk: pins across restarts, GC of unpinned blocks only, safe concurrent
adds, corruption detected on read, one node per repo."""

import io
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import ipfshttpclient
import pytest
import requests

from marketplace.ipfs.blockstore import Blockstore
from marketplace.ipfs.cid import CID
from marketplace.ipfs.gclock import GcLock

from .support import AUTH, CHUNK, random_bytes


def block_path(node, cid: str):
    return Blockstore(node.repo / "blocks").path(CID.parse(cid))


def test_pins_and_blocks_survive_a_restart(node_factory):
    node = node_factory.start()
    data = random_bytes(3 * CHUNK, seed=21)
    with node.client() as client:
        cid = client.add_bytes(data)
        loose = client.block.put(io.BytesIO(b"direct"), opts={"pin": "true"})["Key"]
        peer_id = client.id()["ID"]
    node.stop()
    assert not (node.repo / "api").exists()
    again = node_factory.start(node.repo)
    with again.client() as client:
        assert client.pin.ls(type="recursive")["Keys"].keys() >= {cid, loose}
        assert client.cat(cid) == data
        assert client.id()["ID"] == peer_id
        client.repo.gc()
        assert client.cat(cid) == data


def test_gc_removes_only_unpinned_blocks(node):
    with node.client() as client:
        kept = client.add_bytes(random_bytes(2 * CHUNK + 3, seed=22))
        dropped = client.add_bytes(random_bytes(2 * CHUNK + 3, seed=23), opts={"pin": "false"})
        unpinned_later = client.add_bytes(b"unpinned later")
        client.pin.rm(unpinned_later)
        removed = {entry["Key"]["/"] for entry in client.repo.gc()}
        assert CID.parse(dropped).to_v1().multihash in {CID.parse(c).multihash for c in removed}
        assert len(removed) == 4 + 1  # dropped: root and three leaves; the unpinned block
        assert client.cat(kept) == random_bytes(2 * CHUNK + 3, seed=22)
        for cid in (dropped, unpinned_later):
            with pytest.raises(ipfshttpclient.exceptions.ErrorResponse, match="not found"):
                client.block.stat(cid)
        assert client.repo.gc() == []


def test_concurrent_adds_sharing_chunks_are_all_intact(node):
    """Eight clients add files that share most of their chunks, at the same time as GC runs;
    every file must read back whole and keep its pin."""
    shared = random_bytes(4 * CHUNK, seed=24)
    payloads = [shared + random_bytes(CHUNK // 2 + i, seed=100 + i) for i in range(8)]

    def add(data: bytes) -> str:
        with node.client() as client:
            return client.add_bytes(data)

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(add, data) for data in payloads]
        with node.client() as client:
            for _ in range(3):
                client.repo.gc()
        cids = [f.result() for f in futures]
    with node.client() as client:
        client.repo.gc()
        for cid, data in zip(cids, payloads, strict=True):
            assert client.cat(cid) == data
    assert not list((node.repo / "blocks").glob("*/.*.tmp"))


def test_a_corrupt_block_on_disk_is_detected_not_served(node):
    with node.client() as client:
        data = random_bytes(2 * CHUNK, seed=25)
        cid = client.add_bytes(data)
        leaf = str(next(iter(client.pin.ls(type="indirect")["Keys"])))
    path = block_path(node, leaf)
    damaged = bytearray(path.read_bytes())
    damaged[100] ^= 0xFF
    path.write_bytes(bytes(damaged))
    response = requests.post(
        f"{node.url}/api/v0/block/get", headers=AUTH, params={"arg": leaf}, timeout=30
    )
    assert response.status_code == 404
    assert "corrupt" in response.json()["Message"]
    gateway = requests.get(f"{node.url}/ipfs/{leaf}?format=raw", timeout=30)
    assert gateway.status_code == 404
    with (
        requests.post(
            f"{node.url}/api/v0/cat", headers=AUTH, params={"arg": cid}, stream=True, timeout=30
        ) as streamed,
        pytest.raises(requests.exceptions.ChunkedEncodingError),
    ):
        b"".join(streamed.iter_content(None))


def test_a_second_node_on_the_same_repo_is_refused(node):
    result = subprocess.run(
        [sys.executable, "-m", "marketplace.ipfs", "--repo", str(node.repo), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "in use by another node" in result.stderr
    assert requests.post(f"{node.url}/api/v0/version", headers=AUTH, timeout=30).ok


def test_gc_lock_waits_for_writers_and_turns_new_ones_away():
    lock = GcLock()
    lock.acquire_shared()
    collected = threading.Event()

    def collect() -> None:
        with lock.exclusive():
            collected.set()

    gc = threading.Thread(target=collect)
    gc.start()
    assert not collected.wait(0.1)
    assert not lock.try_acquire_shared()  # a waiting GC is not starved by new adds
    lock.release_shared()
    gc.join(timeout=5)
    assert collected.is_set()
    assert lock.try_acquire_shared()
