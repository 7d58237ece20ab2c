"""Helpers for storage tests: running node processes, test data, the ipfs_cid reference tool."""

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import ipfshttpclient
import pytest
import requests

from marketplace.ipfs import dagpb, unixfs, varint
from marketplace.ipfs.cid import CID, DAG_PB, RAW
from marketplace.processes import terminate

CHUNK = 256 * 1024
MAX_LINKS = 174
IPFS_CID = shutil.which("ipfs_cid")
# The RPC token every node a test starts and every client shares (set in tests/conftest.py).
TOKEN = os.environ["ZOO_IPFS_API_TOKEN"]
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EMPTY_RAW_CID = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"  # sha2-256 of b""

needs_ipfs_cid = pytest.mark.skipif(
    IPFS_CID is None, reason="ipfs_cid not found: install the Debian package ipfs-cid"
)


def ipfs_cid(path: Path) -> dict[str, str]:
    """CIDv0 and CIDv1 of a file as the independent Debian tool computes them. Its CIDv1 is
    the CIDv0 DAG's root written as CIDv1, not Kubo's `--cid-version=1` (which changes links
    and leaves), so only single-block files compare against our CIDv1 imports directly."""
    out = subprocess.run([IPFS_CID, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def read_car(car: bytes) -> tuple[bytes, list[tuple[CID, bytes]]]:
    """A CARv1's length-prefixed header (undecoded) and its (CID, block) sections in order."""
    length, pos = varint.decode(car)
    head, pos = car[pos : pos + length], pos + length
    sections = []
    while pos < len(car):
        length, pos = varint.decode(car, pos)
        section, pos = car[pos : pos + length], pos + length
        if section[:2] == b"\x12\x20":  # a CIDv0: the bare sha2-256 multihash
            cid_length = 34
        else:
            _, end = varint.decode(section)  # version
            _, end = varint.decode(section, end)  # codec
            _, end = varint.decode(section, end)  # hash function
            digest_length, end = varint.decode(section, end)
            cid_length = end + digest_length
        sections.append((CID.decode(section[:cid_length]), section[cid_length:]))
    return head, sections


def random_bytes(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


@dataclass
class Node:
    """A running node process and how to reach it."""

    repo: Path
    process: subprocess.Popen
    multiaddr: str  # /ip4/127.0.0.1/tcp/N/http

    @property
    def url(self) -> str:
        parts = self.multiaddr.split("/")
        return f"http://{parts[2]}:{parts[4]}"

    def client(self) -> ipfshttpclient.Client:
        return ipfshttpclient.Client(self.multiaddr, headers=AUTH)

    def stop(self) -> None:
        terminate(self.process)


def launch_node(repo: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `python -m marketplace.ipfs` on port 0, logging beside the repo; `env` is added
    to this process's environment (the node's ZOO_IPFS_* settings)."""
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "api").unlink(missing_ok=True)
    with open(repo.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "marketplace.ipfs",
                "--repo",
                str(repo),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else os.environ | env,
        )


def wait_ready(repo: Path, process: subprocess.Popen, timeout: float = 30) -> Node:
    """A node is ready once it has published `<repo>/api` (written after it listens)."""
    deadline = time.monotonic() + timeout
    while not (repo / "api").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"IPFS node did not start: {repo.with_suffix('.log').read_text()}")
        time.sleep(0.05)
    return Node(repo, process, (repo / "api").read_text().strip() + "/http")


def start_nodes(repos: list[Path], env: dict[str, str] | None = None) -> list[Node]:
    """Launch all, then wait for each, so several nodes start in the time of one."""
    processes = [launch_node(repo, env) for repo in repos]
    return [wait_ready(repo, process) for repo, process in zip(repos, processes, strict=True)]


class _LyingHandler(BaseHTTPRequestHandler):
    """Answers block/get with bytes that belong to no CID asked for, and block/put with a
    name that is not the block's; everything else is 'not found'."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/api/v0/block/get"):
            self._reply(200, b"tampered bytes", "application/octet-stream")
        elif self.path.startswith("/api/v0/block/put"):
            self._reply(200, json.dumps({"Key": EMPTY_RAW_CID, "Size": 0}).encode())
        else:
            self._reply(404, b'{"Message": "not found", "Code": 0, "Type": "error"}')

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def lying_node() -> Iterator[str]:
    """A misbehaving node, for the client's own checks: the one stand-in in these tests, since
    the real node verifies what it serves and cannot be made to lie."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LyingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"/ip4/127.0.0.1/tcp/{server.server_address[1]}/http"
    finally:
        server.shutdown()
        server.server_close()


def file_node(children: list[tuple[CID, int, int]]) -> bytes:
    """A UnixFS file node linking (CID, file bytes, cumulative block bytes) children, whose
    sizes it declares as given: honest or not."""
    links = [dagpb.Link(cid, "", tsize) for cid, _, tsize in children]
    sizes = [size for _, size, _ in children]
    meta = unixfs.encode_parts(unixfs.FILE, [], sum(sizes), sizes)
    return b"".join(bytes(part) for part in dagpb.encode(links, meta))


def dag_bomb(
    levels: int = 5, leaf: bytes = bytes(1024), leaf_size: int | None = None
) -> tuple[CID, dict[CID, bytes]]:
    """A file DAG of `levels` nodes above one raw leaf, each linking 174 times to the level
    below: a few KB of blocks describing 174**levels leaves. `leaf_size`, when given, is what
    every link says the leaf holds (a lie unless it is len(leaf))."""
    cid = CID.of(leaf, RAW)
    size, tsize = len(leaf) if leaf_size is None else leaf_size, len(leaf)
    blocks = {cid: leaf}
    for _ in range(levels):
        block = file_node([(cid, size, tsize)] * MAX_LINKS)
        cid = CID.of(block, DAG_PB)
        size, tsize = size * MAX_LINKS, tsize * MAX_LINKS + len(block)
        blocks[cid] = block
    return cid, blocks


def put_blocks(url: str, blocks: dict[CID, bytes]) -> None:
    """block/put to the node at `url`, as an attacker would, one request per codec, checking
    each block came back under its own name."""
    for codec, name in ((RAW, "raw"), (DAG_PB, "dag-pb")):
        ours = [(cid, data) for cid, data in blocks.items() if cid.codec == codec]
        response = requests.post(
            f"{url}/api/v0/block/put",
            headers=AUTH,
            params={"cid-codec": name},
            files=[("file", (str(cid), data)) for cid, data in ours],
            timeout=30,
        )
        response.raise_for_status()
        keys = [line for line in response.text.splitlines() if line]
        assert len(keys) == len(ours)
