"""The embedded node over HTTP: the Kubo RPC subset through ipfshttpclient, and the gateway."""

import asyncio
import io
import itertools
import json
import socket
import time
from pathlib import Path

import ipfshttpclient
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marketplace.ipfs import car, dagpb, reader, unixfs
from marketplace.ipfs.api import files
from marketplace.ipfs.cid import CID, RAW
from marketplace.ipfs.importer import only_hash

from .support import AUTH, CHUNK, TOKEN, Node, ipfs_cid, needs_ipfs_cid, random_bytes, read_car

HELLO_V0 = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"
UNKNOWN = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEM"  # valid CID, content nobody added
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def client(shared_node: Node):
    with ipfshttpclient.Client(shared_node.multiaddr, headers=AUTH) as client:
        yield client


def rpc(node: Node, command: str, **params) -> requests.Response:
    return requests.post(f"{node.url}/api/v0/{command}", headers=AUTH, params=params, timeout=30)


def test_version_is_kubo_shaped(client):
    info = client.version()
    assert set(info) >= {"Version", "Commit", "Repo", "System"}
    assert tuple(map(int, info["Version"].split("-")[0].split("."))) >= (0, 8)


def test_id_looks_like_a_libp2p_ed25519_peer_id_and_is_stable(client):
    peer_id = client.id()["ID"]
    assert peer_id.startswith("12D3KooW")
    assert client.id()["ID"] == peer_id


def test_add_and_cat_hello(client):
    assert client.add_bytes(b"hello\n") == HELLO_V0
    assert client.cat(HELLO_V0) == b"hello\n"
    assert client.cat(f"/ipfs/{HELLO_V0}", offset=1, length=3) == b"ell"


def test_add_reports_name_hash_and_cumulative_size(client, tmp_path: Path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello\n")
    assert client.add(str(path)) == {"Name": "notes.txt", "Hash": HELLO_V0, "Size": "14"}


@needs_ipfs_cid
def test_add_over_http_matches_ipfs_cid_at_the_two_level_boundary(client, two_level_file):
    expected = ipfs_cid(two_level_file)
    assert client.add(str(two_level_file))["Hash"] == expected["CIDv0"]
    assert client.cat(expected["CIDv0"], offset=174 * CHUNK - 2) == two_level_file.read_bytes()[-3:]


@needs_ipfs_cid
@pytest.mark.parametrize("size", [0, 1, CHUNK, CHUNK + 1])
def test_add_over_http_matches_ipfs_cid_at_chunk_edges(client, tmp_path: Path, size: int):
    path = tmp_path / "edge.bin"
    path.write_bytes(random_bytes(size, seed=size + 1))
    expected = ipfs_cid(path)
    assert client.add(str(path))["Hash"] == expected["CIDv0"]
    if size <= CHUNK:  # one block: the tool's CIDv1 is Kubo's --cid-version=1 --raw-leaves=false
        assert client.add(str(path), cid_version=1, raw_leaves=False)["Hash"] == expected["CIDv1"]


def _add_request(data: bytes, query: bytes = b"", close: bool = False) -> bytes:
    """A raw `add` request with a Content-Length body holding `data` as one file part."""
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'
        + data
        + b"\r\n--b--\r\n"
    )
    return (
        b"POST /api/v0/add%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s"
        b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n"
        % (query, TOKEN.encode(), b"Connection: close\r\n" if close else b"", len(body))
    ) + body


def _connect(node: Node) -> socket.socket:
    host, port = node.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """(status, body) of the next `count` responses on a connection, all sized ones."""
    answers, stream = [], sock.makefile("rb")
    for _ in range(count):
        status = int(stream.readline().split()[1])
        headers = {}
        while (line := stream.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        answers.append((status, stream.read(int(headers["content-length"]))))
    return answers


def test_a_sized_body_arriving_in_uneven_pieces_adds_intact(shared_node: Node, client):
    """A Content-Length body (as Storage.add_file sends) written in pieces of uneven sizes, so
    its pieces reach the app as the reads cut them. Chunk-encoded bodies, whose small chunks
    the server joins, are what ipfshttpclient sends in the other add tests."""
    data = random_bytes(3 * CHUNK + 11, seed=5)
    request = _add_request(data, close=True)
    with _connect(shared_node) as sock:
        offset, sizes = 0, [1, 70_000, 3, 200_000, 17, 65_537]
        while offset < len(request):
            piece = sizes[offset % len(sizes)]
            sock.sendall(request[offset : offset + piece])
            offset += piece
        [(status, answer)] = _responses(sock, 1)
    assert status == 200
    assert json.loads(answer)["Hash"] == client.add_bytes(data)


def test_a_large_body_read_past_the_parser_ends_where_the_next_request_begins(
    shared_node: Node, client
):
    """A body with megabytes still to come is read without the HTTP parser; the request
    pipelined right behind it must still be parsed from its first byte."""
    large, small = random_bytes(3 * MIB + 5, seed=6), random_bytes(1000, seed=7)
    with _connect(shared_node) as sock:
        sock.sendall(_add_request(large) + _add_request(small, close=True))
        answers = _responses(sock, 2)
    assert [status for status, _ in answers] == [200, 200]
    assert [json.loads(body)["Hash"] for _, body in answers] == [
        client.add_bytes(large),
        client.add_bytes(small),
    ]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    size=st.integers(MIB, 3 * MIB),
    cuts=st.lists(st.integers(0, 4 * MIB), max_size=8),
    second=st.binary(max_size=2_000),
)
def test_a_large_body_sent_in_any_pieces_ends_where_the_next_request_begins(
    shared_node: Node, size, cuts, second
):
    """The body reader past the parser, over a real socket, with the request cut where
    hypothesis says (each piece its own send, so reads tend to end there): it reads exactly
    the body's bytes, whatever the cuts, and the next request parses from its first byte."""
    data = random_bytes(size, seed=size)
    request = _add_request(data, b"?only-hash=true") + _add_request(
        second, b"?only-hash=true", close=True
    )
    points = sorted({0, len(request), *(c % len(request) for c in cuts)})
    with _connect(shared_node) as sock:
        for start, end in itertools.pairwise(points):
            sock.sendall(request[start:end])
        answers = _responses(sock, 2)
    assert [(status, json.loads(body)["Hash"]) for status, body in answers] == [
        (200, str(only_hash(data))),
        (200, str(only_hash(second))),
    ]


def test_a_large_body_refused_before_it_is_read_is_still_drained(shared_node: Node, client):
    """An add refused on its options answers before reading its body; the connection goes on
    to the next request once the rest of the body has been read off it."""
    small = random_bytes(1000, seed=8)
    with _connect(shared_node) as sock:
        sock.sendall(
            _add_request(random_bytes(3 * MIB, seed=9), b"?trickle=true")
            + _add_request(small, close=True)
        )
        (refused, message), (status, answer) = _responses(sock, 2)
    assert refused == 400 and b"trickle" in message
    assert status == 200 and json.loads(answer)["Hash"] == client.add_bytes(small)


def test_a_client_gone_mid_body_leaves_the_node_serving(shared_node: Node, client):
    """The body reader's duplicate of the socket is closed with the connection."""
    fds = Path(f"/proc/{shared_node.process.pid}/fd")
    before = len(list(fds.iterdir()))
    request = _add_request(random_bytes(8 * MIB, seed=10))
    with _connect(shared_node) as sock:
        sock.sendall(request[: 3 * MIB])
    for _ in range(100):
        if len(list(fds.iterdir())) <= before:
            break
        time.sleep(0.05)
    assert len(list(fds.iterdir())) <= before
    assert client.add_bytes(b"still serving") == str(only_hash(b"still serving"))


def test_a_head_without_end_is_refused_431_and_the_connection_closed(shared_node: Node, client):
    """httptools holds a header whole however long it grows; the node stops at its bound.
    tests/storage/test_http_protocol.py feeds the protocol heads, bodies and pipelines of every
    shape."""
    with _connect(shared_node) as sock:
        sock.sendall(b"GET /api/v0/version HTTP/1.1\r\nHost: x\r\nX-Long: " + b"v" * 70_000)
        [(status, message)] = _responses(sock, 1)
        assert sock.recv(1) == b""  # closed
    assert status == 431 and b"over 65536 bytes" in message
    assert client.add_bytes(b"still serving") == str(only_hash(b"still serving"))


def test_cid_version_1_implies_raw_leaves_like_kubo(client):
    cid = client.add_bytes(b"hello\n", opts={"cid-version": 1})
    assert cid == str(CID.of(b"hello\n", RAW))
    assert client.add_bytes(b"hello\n", opts={"cid-version": 1, "raw-leaves": "false"}) == str(
        CID.parse(HELLO_V0).to_v1()
    )


def test_only_hash_stores_nothing(client):
    data = random_bytes(1000, seed=11)
    cid = client.add_bytes(data, opts={"only-hash": "true"})
    with pytest.raises(ipfshttpclient.exceptions.ErrorResponse, match="not found"):
        client.block.stat(cid)
    assert client.add_bytes(data) == cid


def test_small_chunker_builds_a_multi_block_file(client):
    data = random_bytes(10_000, seed=12)
    cid = client.add_bytes(data, opts={"chunker": "size-1000", "raw-leaves": "true"})
    root = client.block.get(cid)
    assert client.cat(cid) == data
    assert root.count(b"\x01\x55\x12\x20") == 10  # ten raw-leaf links


def test_get_returns_a_tar_named_by_cid(client, tmp_path: Path):
    data = random_bytes(CHUNK + 7, seed=13)
    cid = client.add_bytes(data)
    client.get(cid, target=str(tmp_path))
    assert (tmp_path / cid).read_bytes() == data


def test_block_put_get_stat(client):
    put = client.block.put(io.BytesIO(b"raw block"))
    assert put == {"Key": str(CID.of(b"raw block", RAW)), "Size": 9}
    assert client.block.get(put["Key"]) == b"raw block"
    assert client.block.stat(put["Key"]) == put


def test_block_put_legacy_v0_format_names_a_dag_pb_block(client):
    client.add_bytes(b"hello\n")
    block = client.block.get(HELLO_V0)
    assert client.block.put(io.BytesIO(block), opts={"format": "v0"})["Key"] == HELLO_V0


def test_block_put_refuses_a_dag_pb_block_that_does_not_decode(shared_node: Node):
    files = {"file": ("block", b"\xff\xff not protobuf")}
    response = requests.post(
        f"{shared_node.url}/api/v0/block/put",
        headers=AUTH,
        params={"cid-codec": "dag-pb"},
        files=files,
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["Type"] == "error"


def test_block_put_refuses_blocks_over_one_mib(shared_node: Node):
    files = {"file": ("block", bytes(1024 * 1024 + 1))}
    response = requests.post(
        f"{shared_node.url}/api/v0/block/put", headers=AUTH, files=files, timeout=30
    )
    assert response.status_code == 400
    assert "1048576" in response.json()["Message"]


def test_pin_add_ls_rm(client):
    cid = client.block.put(io.BytesIO(b"pin me"))["Key"]
    assert cid not in client.pin.ls(type="recursive")["Keys"]
    assert client.pin.add(cid) == {"Pins": [cid]}
    assert client.pin.ls(cid)["Keys"] == {cid: {"Type": "recursive"}}
    assert client.pin.rm(cid) == {"Pins": [cid]}
    with pytest.raises(ipfshttpclient.exceptions.ErrorResponse, match="not pinned"):
        client.pin.ls(cid)


def test_pin_ls_lists_children_of_recursive_pins_as_indirect(client):
    cid = client.add_bytes(random_bytes(2 * CHUNK + 1, seed=14))
    children = {str(link.cid) for link in dagpb.decode(client.block.get(cid)).links}
    assert len(children) == 3
    assert children <= set(client.pin.ls(type="indirect")["Keys"])


def test_pin_add_of_content_the_node_lacks_is_404(shared_node: Node):
    response = rpc(shared_node, "pin/add", arg=UNKNOWN)
    assert response.status_code == 404
    assert response.json() == {"Message": response.json()["Message"], "Code": 0, "Type": "error"}
    assert UNKNOWN in response.json()["Message"]


@pytest.mark.parametrize("command", ["cat", "block/get", "block/stat", "get", "pin/add"])
def test_invalid_cid_is_400_with_a_message(shared_node: Node, command: str):
    response = rpc(shared_node, command, arg="not-a-cid")
    assert response.status_code == 400
    assert "invalid CID 'not-a-cid'" in response.json()["Message"]


@pytest.mark.parametrize("command", ["cat", "block/get", "block/stat", "get"])
def test_unknown_cid_is_404_in_kubos_error_shape(shared_node: Node, command: str):
    response = rpc(shared_node, command, arg=UNKNOWN)
    assert response.status_code == 404
    body = response.json()
    assert body["Type"] == "error" and "could not find" in body["Message"]


def test_missing_argument_is_400(shared_node: Node):
    response = rpc(shared_node, "cat")
    assert response.status_code == 400
    assert "required" in response.json()["Message"]


def test_add_with_progress_streams_the_bytes_imported_then_the_result(shared_node: Node):
    data = random_bytes(6 * 1024 * 1024 + 5, seed=21)
    plain = requests.post(
        f"{shared_node.url}/api/v0/add",
        headers=AUTH,
        files={"file": ("data.bin", data)},
        timeout=60,
    )
    response = requests.post(
        f"{shared_node.url}/api/v0/add",
        headers=AUTH,
        params={"progress": "true"},
        files={"file": ("data.bin", data)},
        timeout=60,
    )
    assert response.status_code == 200
    *progress, result = [json.loads(line) for line in response.text.splitlines()]
    assert result == plain.json()
    counts = [event["Bytes"] for event in progress]
    assert len(counts) >= 3 and counts == sorted(set(counts)) and counts[-1] == len(data)
    assert all(
        event.keys() == {"Name", "Bytes"} and event["Name"] == "data.bin" for event in progress
    )


def test_progress_rises_at_every_line_however_the_body_arrives():
    """The last piece of a body may complete no chunk: no progress line repeats the one before."""

    class Part:  # what an add reads of a multipart part
        async def chunks(self):
            for piece in [bytes(MIB)] * 6 + [b"tail!"]:
                yield piece

    async def events():
        return [event async for event in files._import(Part(), files.AddOptions(), None)]

    *counts, imported = asyncio.run(events())
    assert counts == sorted(set(counts)) and counts[-1] == imported.filesize == 6 * MIB + 5


def test_add_with_progress_ends_with_kubos_error_object_when_the_body_breaks_off(shared_node: Node):
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'
        + random_bytes(32 * MIB, seed=22)
    )  # no closing boundary
    response = requests.post(
        f"{shared_node.url}/api/v0/add",
        params={"progress": "true"},
        data=body,
        headers=AUTH | {"Content-Type": "multipart/form-data; boundary=b"},
        timeout=60,
    )
    assert response.status_code == 200  # sent before the body was read
    *progress, error = [json.loads(line) for line in response.text.splitlines()]
    assert progress and all("Hash" not in event for event in progress)
    assert error["Type"] == "error" and "ended inside a part" in error["Message"]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"chunker": "rabin"}, "chunker"),
        ({"cid-version": "2"}, "cid-version"),
        ({"trickle": "true"}, "trickle"),
        ({"hash": "blake3"}, "blake3"),
        ({"pin": "maybe"}, "pin"),
    ],
)
def test_add_refuses_options_it_cannot_honour(shared_node: Node, params, message):
    response = requests.post(
        f"{shared_node.url}/api/v0/add",
        headers=AUTH,
        params=params,
        files={"file": ("f", b"x")},
        timeout=30,
    )
    assert response.status_code == 400
    assert message in response.json()["Message"]


@pytest.mark.parametrize(
    "body, content_type",
    [
        (b"plain body", "text/plain"),
        (
            b'--b\r\nContent-Disposition: form-data; name="file"\r\n\r\ntruncated',
            "multipart/form-data; boundary=b",
        ),
        (b"--b--\r\n", "multipart/form-data; boundary=b"),
    ],
)
def test_add_refuses_malformed_bodies(shared_node: Node, body: bytes, content_type: str):
    response = requests.post(
        f"{shared_node.url}/api/v0/add",
        data=body,
        headers=AUTH | {"Content-Type": content_type},
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["Message"]


def test_gateway_serves_files_and_raw_blocks(shared_node: Node, client):
    data = random_bytes(3 * CHUNK + 5, seed=15)
    cid = client.add_bytes(data)
    response = requests.get(f"{shared_node.url}/ipfs/{cid}", timeout=30)
    assert response.status_code == 200 and response.content == data
    assert response.headers["Etag"] == f'"{cid}"'
    raw = requests.get(f"{shared_node.url}/ipfs/{cid}?format=raw", timeout=30)
    assert raw.headers["Content-Type"] == "application/vnd.ipld.raw"
    CID.parse(cid).verify(raw.content)
    accept = requests.get(
        f"{shared_node.url}/ipfs/{cid}", headers={"Accept": "application/vnd.ipld.raw"}, timeout=30
    )
    assert accept.content == raw.content
    head = requests.head(f"{shared_node.url}/ipfs/{cid}", timeout=30)
    assert head.status_code == 200 and head.headers["Content-Length"] == str(len(data))


@pytest.mark.parametrize("options", [{"cid-version": 0}, {"cid-version": 1}])
def test_gateway_sends_a_dag_as_a_car_each_block_once_depth_first(
    shared_node: Node, client, options
):
    chunk = random_bytes(CHUNK, seed=31)
    data = chunk + random_bytes(CHUNK, seed=32) + chunk + b"tail"  # one leaf twice in the DAG
    root = CID.parse(client.add_bytes(data, opts=options))
    response = requests.get(f"{shared_node.url}/ipfs/{root}?format=car", timeout=30)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == car.CONTENT_TYPE
    assert response.content.startswith(car.header([root]))
    _, sections = read_car(response.content)
    blocks = dict(sections)
    for cid, block in sections:
        cid.verify(block)
    walk = [cid for cid, _ in reader.iter_blocks(root, blocks.__getitem__)]
    assert [cid for cid, _ in sections] == walk and len(walk) == 4  # the repeated leaf once
    assert b"".join(reader.iter_file(root, blocks.__getitem__)) == data
    by_accept = requests.get(
        f"{shared_node.url}/ipfs/{root}", timeout=30, headers={"Accept": car.MEDIA_TYPE}
    )
    assert by_accept.content == response.content


@pytest.mark.parametrize(
    "path, status",
    [
        ("not-a-cid", 400),
        (UNKNOWN, 404),
        (f"{HELLO_V0}/sub/path", 400),
        (f"{HELLO_V0}?format=tar", 400),
        (f"{UNKNOWN}?format=car", 404),
    ],
)
def test_gateway_errors_are_plain_4xx(shared_node: Node, client, path: str, status: int):
    client.add_bytes(b"hello\n")
    response = requests.get(f"{shared_node.url}/ipfs/{path}", timeout=30)
    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("text/plain") and response.text


def test_unknown_command_and_wrong_method_are_4xx(shared_node: Node):
    assert rpc(shared_node, "swarm/peers").status_code == 404
    assert requests.get(f"{shared_node.url}/api/v0/version", timeout=30).status_code == 405


def test_cat_of_a_directory_is_400(shared_node: Node, client):
    directory = b"".join(dagpb.encode([], unixfs.encode_parts(unixfs.DIRECTORY, [], 0, [])))
    cid = client.block.put(io.BytesIO(directory), opts={"format": "v0"})["Key"]
    response = rpc(shared_node, "cat", arg=cid)
    assert response.status_code == 400
    assert "directory" in response.json()["Message"]
