"""Quotas under attack: one client sending more than an add may bring, or filling the repo, is
refused with a clear error (413 and 507, as HTTP names them), and the node keeps serving."""

import itertools

import pytest
import requests

from marketplace.storage import Storage, StorageError

from .support import AUTH, Node, random_bytes

MIB = 1024 * 1024
LIMITS = {"ZOO_IPFS_MAX_ADD_BYTES": str(MIB), "ZOO_IPFS_MAX_REPO_BYTES": str(3 * MIB)}


@pytest.fixture
def small(node_factory) -> Node:
    """A node allowing 1 MiB per add and 3 MiB in all."""
    return node_factory.start(env=LIMITS)


def post(node: Node, command: str, headers: dict[str, str] | None = None, **kwargs):
    return requests.post(
        f"{node.url}/api/v0/{command}", headers=AUTH | (headers or {}), timeout=60, **kwargs
    )


def stored_bytes(node: Node) -> int:
    return sum(f.stat().st_size for f in (node.repo / "blocks").glob("*/*.data"))


def test_an_add_over_the_quota_is_refused_before_its_body_is_read(small: Node):
    response = post(small, "add", files={"file": ("big", random_bytes(2 * MIB))})
    assert response.status_code == 413
    assert f"limit of {MIB} bytes per add" in response.json()["Message"]
    assert stored_bytes(small) == 0
    assert post(small, "pin/ls").json()["Keys"] == {}


def test_a_file_over_the_quota_is_refused_with_the_nodes_reason(small: Node, tmp_path):
    path = tmp_path / "big"
    path.write_bytes(random_bytes(8 * MIB))
    with (
        Storage(small.multiaddr, []) as storage,
        pytest.raises(StorageError, match=f"limit of {MIB} bytes per add"),
    ):
        storage.add_file(path)
    assert stored_bytes(small) == 0


def test_a_chunked_add_is_cut_off_at_the_quota(small: Node):
    head = b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\n'
    body = itertools.chain([head], itertools.repeat(b"x" * 65536, 64))  # 4 MiB, chunked
    response = post(
        small, "add", data=body, headers={"Content-Type": "multipart/form-data; boundary=b"}
    )
    assert response.status_code == 413
    assert post(small, "pin/ls").json()["Keys"] == {}


def test_block_put_requests_share_the_per_add_quota(small: Node):
    parts = [("file", (f"b{i}", random_bytes(600 * 1024, seed=i))) for i in range(2)]
    response = post(small, "block/put", files=parts)
    assert response.status_code == 413


def test_a_full_repo_refuses_new_blocks_until_gc_frees_room(small: Node):
    with Storage(small.multiaddr, []) as storage:
        kept = [storage.add_bytes(random_bytes(900 * 1024, seed=i)) for i in range(3)]
        with pytest.raises(StorageError, match="no room for a block"):
            storage.add_bytes(random_bytes(900 * 1024, seed=3))
        response = post(small, "add", files={"file": ("f", random_bytes(900 * 1024, seed=3))})
        assert response.status_code == 507
        assert stored_bytes(small) <= 3 * MIB
        post(small, "pin/rm", params={"arg": kept[0]}).raise_for_status()
        post(small, "repo/gc").raise_for_status()
        assert storage.cat(storage.add_bytes(random_bytes(900 * 1024, seed=3)))[:4]


def test_the_repo_quota_counts_what_is_stored_across_restarts(node_factory, small: Node):
    with Storage(small.multiaddr, []) as storage:
        for i in range(3):
            storage.add_bytes(random_bytes(900 * 1024, seed=i))
    small.stop()
    restarted = node_factory.start(small.repo, env=LIMITS)
    data = random_bytes(900 * 1024, seed=4)
    assert post(restarted, "add", files={"file": ("f", data)}).status_code == 507
