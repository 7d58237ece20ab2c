"""The RPC API under attack from whoever can reach its port: a local process without the token,
or a web page the node's owner opens (a cross-site `fetch` carries the page's Origin). Neither
may pin, unpin, add or collect garbage; the read-only gateway stays open to all."""

import stat
from pathlib import Path

import pytest
import requests

from marketplace.devnet.network import Devnet, State
from marketplace.storage import Storage, StorageError

from .support import AUTH, TOKEN, Node, random_bytes

EVIL = "https://evil.example"


def rpc(node: Node, command: str, headers: dict[str, str], **params) -> requests.Response:
    return requests.post(f"{node.url}/api/v0/{command}", headers=headers, params=params, timeout=30)


def add(node: Node, data: bytes, headers: dict[str, str], **params) -> requests.Response:
    return requests.post(
        f"{node.url}/api/v0/add",
        headers=headers,
        params=params,
        files={"file": ("f", data)},
        timeout=30,
    )


@pytest.fixture
def pinned(node: Node) -> str:
    """A pinned file, which every refused request below must leave as it was."""
    response = add(node, random_bytes(1000, seed=90), AUTH)
    assert response.ok, response.text
    return response.json()["Hash"]


def assert_untouched(node: Node, cid: str) -> None:
    pins = rpc(node, "pin/ls", AUTH, type="recursive").json()["Keys"]
    assert cid in pins
    assert rpc(node, "cat", AUTH, arg=cid).content == random_bytes(1000, seed=90)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["no token", "wrong token", "not bearer"],
)
def test_rpc_without_the_token_cannot_unpin_collect_or_add(
    node: Node, pinned: str, headers: dict[str, str]
):
    for response in (
        rpc(node, "pin/rm", headers, arg=pinned),
        rpc(node, "repo/gc", headers),
        add(node, b"planted", headers),
    ):
        assert response.status_code == 401
        assert "Authorization: Bearer <token>" in response.json()["Message"]
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert_untouched(node, pinned)
    planted = add(node, b"planted", AUTH, **{"only-hash": "true"}).json()["Hash"]
    assert rpc(node, "block/stat", AUTH, arg=planted).status_code == 404


def test_a_web_page_cannot_use_the_rpc_api_even_with_the_token(node: Node, pinned: str):
    for headers in ({"Origin": EVIL}, AUTH | {"Origin": EVIL}):
        for response in (
            rpc(node, "pin/rm", headers, arg=pinned),
            rpc(node, "repo/gc", headers),
            add(node, b"planted", headers),
        ):
            assert response.status_code == 403
            assert EVIL in response.json()["Message"]
    assert_untouched(node, pinned)


def test_allowed_origins_may_call_the_rpc_api(node_factory):
    node = node_factory.start(env={"ZOO_IPFS_ALLOWED_ORIGINS": '["http://localhost:3000"]'})
    allowed = AUTH | {"Origin": "http://localhost:3000"}
    assert rpc(node, "version", allowed).ok
    assert rpc(node, "version", AUTH | {"Origin": EVIL}).status_code == 403
    assert rpc(node, "version", {"Origin": "http://localhost:3000"}).status_code == 401


def test_the_gateway_reads_without_a_token_from_any_origin(node: Node, pinned: str):
    for headers in ({}, {"Origin": EVIL}):
        response = requests.get(f"{node.url}/ipfs/{pinned}", headers=headers, timeout=30)
        assert response.status_code == 200
        assert response.content == random_bytes(1000, seed=90)


def test_without_a_configured_token_the_node_makes_one_only_its_owner_reads(node_factory):
    node = node_factory.start(env={"ZOO_IPFS_API_TOKEN": ""})
    token_file = node.repo / "api-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32 and token != TOKEN
    with Storage(node.multiaddr, [], api_token=token) as storage:
        assert storage.cat(storage.add_bytes(b"owner")) == b"owner"
    with (
        Storage(node.multiaddr, [], api_token=TOKEN) as storage,
        pytest.raises(StorageError, match="Bearer"),
    ):
        storage.add_bytes(b"intruder")


def test_storage_sends_the_configured_token_and_no_token_when_none_is_set(
    node: Node, tmp_path: Path
):
    path = tmp_path / "file"
    path.write_bytes(b"ours, from a file")
    with Storage(node.multiaddr, []) as storage:  # ZOO_IPFS_API_TOKEN, from the settings
        assert storage.cat(storage.add_bytes(b"ours")) == b"ours"
        assert storage.cat(storage.add_file(path)) == b"ours, from a file"
    with Storage(node.multiaddr, [], api_token="") as storage:
        with pytest.raises(StorageError, match="Bearer"):
            storage.add_bytes(b"anonymous")
        with pytest.raises(StorageError, match="Bearer"):
            storage.add_file(path)


def test_the_devnet_gives_its_nodes_and_every_process_one_token(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("ZOO_IPFS_API_TOKEN")  # unset, a devnet makes a token of its own
    devnet = Devnet(tmp_path)
    nodes = {"user": "/ip4/127.0.0.1/tcp/9/http", "provider-0": "/ip4/127.0.0.1/tcp/10/http"}
    state = State(root=tmp_path, redis_url="redis://127.0.0.1:9/0", ipfs=nodes)
    for name in ("user", "provider-0", "verifier-0"):
        token = devnet._settings(state, name).ipfs_api_token
        assert token is not None and token.get_secret_value() == state.ipfs_token
        assert devnet._variables(state, name)["ZOO_IPFS_API_TOKEN"] == state.ipfs_token
    state.save()
    assert State.load(tmp_path).ipfs_token == state.ipfs_token
    assert State(root=tmp_path).ipfs_token != state.ipfs_token  # each devnet makes its own
    monkeypatch.setenv("ZOO_IPFS_API_TOKEN", "shared")  # set, processes beside it can use it
    assert State(root=tmp_path).ipfs_token == "shared"
