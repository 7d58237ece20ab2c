"""The one way project code reaches IPFS: adds, CID-verified reads, replicated pins (Kubo RPC)."""

import http.client
import io
import json
import logging
import os
import secrets
import socket
import ssl
import tempfile
import threading
import urllib.parse
import warnings
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Self

import ipfshttpclient
from ipfshttpclient import exceptions as rpc_errors
from ipfshttpclient.http_common import multiaddr_to_url_data

from marketplace.config import Settings
from marketplace.errors import ZooError
from marketplace.ipfs import errors as ipfs_errors
from marketplace.ipfs import multihash, reader
from marketplace.ipfs.cid import CID, CODEC_NAMES
from marketplace.ipfs.limits import DEFAULT_WALK_LIMITS, WalkLimits

log = logging.getLogger(__name__)

# ipfshttpclient 0.7.0 passes urllib3 2.x an argument it no longer needs; the warning says
# nothing a user of this module can act on.
warnings.filterwarnings(
    "ignore", message="The 'strict' parameter is no longer needed", category=FutureWarning
)


# Block requests a read keeps in flight.
_READ_AHEAD = 4
# Bytes per write on the upload socket; ipfshttpclient's 8 KiB default costs a Python
# round trip per 8 KiB of a multi-GiB checkpoint.
_UPLOAD_CHUNK = 1024 * 1024
# An add's answer is one JSON line per file; a node sending more is not a node to trust.
_MAX_ANSWER_BYTES = 64 * 1024
# How long an upload's socket may wait for the node, to send to it or for its answer: the RPC
# client's default.
_UPLOAD_TIMEOUT_S = 120
# The longest multipart boundary RFC 2046 allows; see _FileUpload.
_BOUNDARY_CHARS = 70


class StorageError(ZooError):
    """Base class for every storage failure."""


class InvalidCid(StorageError, ValueError):
    """A string that is not a CID."""


class CidMismatch(StorageError, ValueError):
    """Bytes a node returned (or stored) that do not hash to the CID asked for."""


class ContentNotFound(StorageError, LookupError):
    """No known node holds the content."""


class NodeUnavailable(StorageError, ConnectionError):
    """No known node could be reached."""


class ContentTooLarge(StorageError, ValueError):
    """Content larger than the reader's bound, or a DAG past the bounds of one walk."""


class ReplicationError(StorageError):
    """Fewer nodes than asked for hold a pin; `holders` says which do."""

    def __init__(self, message: str, holders: list[str]) -> None:
        super().__init__(message)
        self.holders = holders


def api_multiaddr(addr: str) -> str:
    """Accept a Kubo-style multiaddr or an http(s) URL; ipfshttpclient wants the multiaddr."""
    if addr.startswith("/"):
        return addr
    url = urllib.parse.urlsplit(addr)
    if url.scheme not in ("http", "https") or not url.hostname or not url.port:
        raise StorageError(
            f"IPFS API address {addr!r} is neither a multiaddr nor http(s)://host:port"
        )
    host = url.hostname
    proto = "ip6" if ":" in host else "ip4" if host.replace(".", "").isdigit() else "dns"
    return f"/{proto}/{host}/tcp/{url.port}/{url.scheme}"


def _client(node: str, token: str) -> ipfshttpclient.Client:
    """A client keeping its connection open: a read is one block/get per 256 KiB. With a
    token, every request carries it as Kubo's API.Authorizations expects."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return ipfshttpclient.Client(
            api_multiaddr(node), chunk_size=_UPLOAD_CHUNK, session=True, headers=headers
        )
    except rpc_errors.AddressError as exc:
        raise StorageError(f"IPFS API address {node!r} is not usable: {exc}") from None


class _FileUpload:
    """One file as a multipart/form-data body whose length is known before it is sent, so it
    goes out with a Content-Length rather than chunk-encoded. Over plain HTTP the file's bytes
    go from the page cache to the socket by sendfile(2), never through this process: reading
    them into a buffer and writing that to the socket copied every byte twice, a third of the
    client's CPU time on a large add. Over TLS, which sendfile cannot encrypt, the file is
    read into one reused buffer, so a multi-GiB checkpoint allocates nothing per piece.

    The boundary is as long as RFC 2046 allows (70 characters): the node finds the end of
    the file by searching every byte for the delimiter, and the search skips ahead by up to
    the delimiter's length, so a longer one makes that scan cheaper (half the time of a
    32-character boundary on a 256 MiB add)."""

    def __init__(self, path: Path, chunk_size: int = _UPLOAD_CHUNK) -> None:
        self._path = path
        self._size = path.stat().st_size
        self._chunk_size = chunk_size
        boundary = secrets.token_hex(_BOUNDARY_CHARS // 2)
        name = urllib.parse.quote(path.name, safe="")
        self._head = (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        self._tail = f"\r\n--{boundary}--\r\n".encode()
        self.headers = {
            "Content-Type": f'multipart/form-data; boundary="{boundary}"',
            "Content-Length": str(len(self)),
        }

    def __len__(self) -> int:
        return len(self._head) + self._size + len(self._tail)

    def send(self, sock: socket.socket) -> None:
        sock.sendall(self._head)
        if self._size:  # sendfile takes no empty count
            with open(self._path, "rb", buffering=0) as file:
                if isinstance(sock, ssl.SSLSocket):
                    self._send_read(file, sock)
                elif sock.sendfile(file, 0, self._size) < self._size:
                    self._shrank()
        sock.sendall(self._tail)

    def _send_read(self, file: io.RawIOBase, sock: socket.socket) -> None:
        buffer = memoryview(bytearray(min(self._chunk_size, self._size)))
        left = self._size
        while left:
            read = file.readinto(buffer[:left])
            if not read:
                self._shrank()
            left -= read
            sock.sendall(buffer[:read])

    def _shrank(self) -> None:
        raise StorageError(f"{self._path} shrank while it was being added")


def _post_upload(node: str, path: str, upload: _FileUpload, token: str) -> dict:
    """POST `upload` to `path` of the node's RPC API and return its one-line JSON answer. Its
    own HTTP/1.1 connection, since the sendfile needs the socket; errors are reported as
    _translate reports the RPC client's. A node may answer before it has read the body (a
    refused token, an add over its quota) and close: that answer is read and reported."""
    try:
        base_url = multiaddr_to_url_data(api_multiaddr(node), "api/v0")[0]
    except rpc_errors.AddressError as exc:
        raise StorageError(f"IPFS API address {node!r} is not usable: {exc}") from None
    url = urllib.parse.urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise StorageError(f"IPFS API address {node!r}: adding a file needs HTTP over TCP")
    connection_class = (
        http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(url.hostname, url.port, timeout=_UPLOAD_TIMEOUT_S)
    headers = upload.headers | ({"Authorization": f"Bearer {token}"} if token else {})
    try:
        connection.request("POST", url.path + path, headers=headers)  # headers only
        assert connection.sock is not None  # connected by request()
        try:
            upload.send(connection.sock)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node stopped reading: its answer says why
        response = connection.getresponse()
        answer = response.read(_MAX_ANSWER_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise NodeUnavailable(f"IPFS node {node} unreachable: {exc}") from None
    finally:
        connection.close()
    if len(answer) > _MAX_ANSWER_BYTES:
        raise StorageError(f"{node}: an answer over {_MAX_ANSWER_BYTES} bytes to {path}")
    try:
        decoded = json.loads(answer.splitlines()[-1] if answer else b"")
    except ValueError:
        decoded = None
    if response.status == 200 and isinstance(decoded, dict):
        return decoded
    message = decoded.get("Message") if isinstance(decoded, dict) else None
    message = message or f"{response.status} {response.reason}"
    if response.status == 404:
        raise ContentNotFound(f"{node}: {message}")
    raise StorageError(f"{node}: {message}")


def is_cid(text: str) -> bool:
    """Whether `text` is a CID, by which content can be asked for at all."""
    try:
        _parse(text)
    except InvalidCid:
        return False
    return True


def _parse(cid: str) -> CID:
    try:
        return CID.parse(cid)
    except ipfs_errors.InvalidCid as exc:
        raise InvalidCid(str(exc)) from None


def _translate(exc: rpc_errors.Error, node: str) -> StorageError:
    """Map a client error to ours: 404 (or Kubo's not-found text) is missing content."""
    if isinstance(
        exc, (rpc_errors.ConnectionError, rpc_errors.TimeoutError, rpc_errors.ProtocolError)
    ):
        return NodeUnavailable(f"IPFS node {node} unreachable: {exc}")
    response = getattr(getattr(exc, "original", None), "response", None)
    status = getattr(response, "status_code", None)
    if status == 404 or "not found" in str(exc):
        return ContentNotFound(f"{node}: {exc}")
    return StorageError(f"{node}: {exc}")


def _walk_limits(max_bytes: int | None) -> WalkLimits:
    if max_bytes is None:
        return DEFAULT_WALK_LIMITS
    return replace(DEFAULT_WALK_LIMITS, max_bytes=min(max_bytes, DEFAULT_WALK_LIMITS.max_bytes))


class Storage:
    """A primary node (where adds go) and replica nodes (where pins are copied and reads fall
    back). Reads fetch blocks with block/get and check each against its CID, so a wrong byte
    from any node, ours or a real Kubo, is caught; nothing is trusted on the node's word.
    Reads keep a few blocks in flight on worker threads, each with its own connections.

    What is not given comes from the settings; `api_token` is sent to every node, and an
    empty one sends none (a Kubo without API.Authorizations)."""

    def __init__(
        self,
        api_addr: str | None = None,
        replicas: list[str] | None = None,
        api_token: str | None = None,
    ) -> None:
        if api_addr is None or replicas is None or api_token is None:
            settings = Settings()
            api_addr = api_addr or settings.ipfs_api
            replicas = settings.ipfs_replicas if replicas is None else replicas
            if api_token is None:
                api_token = _api_token(settings)
        self._token = api_token
        primary = api_addr
        self.nodes = list(dict.fromkeys([primary, *replicas]))
        self._lock = threading.Lock()  # guards the two below
        self._read_order = list(self.nodes)
        self._all_clients: list[ipfshttpclient.Client] = []
        self._local = threading.local()
        self._thread_clients()  # fails early on a bad address
        self._pool = ThreadPoolExecutor(_READ_AHEAD, thread_name_prefix="ipfs-read")

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """A client of the nodes `settings` names, with its API token (settings read from
        another file than the environment's, a devnet's user.env say)."""
        return cls(settings.ipfs_api, settings.ipfs_replicas, _api_token(settings))

    @property
    def api_addr(self) -> str:
        return self.nodes[0]

    def _thread_clients(self) -> dict[str, ipfshttpclient.Client]:
        """This thread's clients: requests sessions are not meant to be shared by threads."""
        clients = getattr(self._local, "clients", None)
        if clients is None:
            clients = self._local.clients = {
                node: _client(node, self._token) for node in self.nodes
            }
            with self._lock:
                self._all_clients += clients.values()
        return clients

    def close(self) -> None:
        self._pool.shutdown()
        with self._lock:
            for client in self._all_clients:
                client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _call(self, node: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except rpc_errors.Error as exc:
            raise _translate(exc, node) from exc

    def add_bytes(self, data: bytes) -> str:
        """Add and pin on the primary node; returns the CID (Kubo's defaults: CIDv0)."""
        client = self._thread_clients()[self.api_addr]
        return self._call(self.api_addr, client.add_bytes, data)

    def add_file(self, path: str | os.PathLike) -> str:
        """Add and pin a file by streaming it from disk (never read whole into memory), sized
        so it needs no chunked encoding; see _FileUpload."""
        path = Path(path)
        if not path.is_file():
            raise StorageError(f"{path} is not a regular file")
        answer = _post_upload(self.api_addr, "add", _FileUpload(path), self._token)
        if not isinstance(answer.get("Hash"), str):
            raise StorageError(f"{self.api_addr}: an add answered without a CID: {answer}")
        return answer["Hash"]

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes:
        """The whole content, verified block by block; for large content use read_to. Built in
        a BytesIO, whose getvalue() hands over its buffer: the content is held once, not as
        a list of blocks and their join. Content past `max_bytes` is refused by the size its
        root declares, before the rest is read (the read checks every level against it)."""
        out = io.BytesIO()
        for chunk in self._verified_bytes(_parse(cid), _walk_limits(max_bytes)):
            out.write(chunk)
        return out.getvalue()

    def read_to(self, cid: str, path: str | os.PathLike, max_bytes: int | None = None) -> None:
        """Stream the content to `path`. It is written beside it under a temporary name and
        renamed only once every block checked out, so `path` never holds unverified bytes;
        content past `max_bytes` is refused as `cat` refuses it."""
        root = _parse(cid)
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in self._verified_bytes(root, _walk_limits(max_bytes)):
                    out.write(chunk)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def _verified_bytes(self, root: CID, limits: WalkLimits) -> Iterator[bytes]:
        """The content's bytes, read within `limits`: the CID may be anyone's, and a few KB
        of blocks can describe petabytes."""
        try:
            yield from reader.iter_file(
                root, self.get_block, fetch_many=self._fetch_ahead, limits=limits
            )
        except ipfs_errors.DagTooLarge as exc:
            raise ContentTooLarge(f"{root}: {exc}") from exc
        except ipfs_errors.IpfsError as exc:  # a block that verified but is not a file
            raise StorageError(f"{root}: {exc}") from exc

    def _fetch_ahead(self, cids: list[CID]) -> Iterator[bytes]:
        """Blocks in order, with up to _READ_AHEAD requests in flight: per-request latency,
        not bandwidth, is what bounds a block-by-block read."""
        pending = iter(cids)
        window = deque(
            self._pool.submit(self.get_block, cid) for cid in islice(pending, _READ_AHEAD)
        )
        while window:
            block = window.popleft().result()
            for cid in islice(pending, 1):
                window.append(self._pool.submit(self.get_block, cid))
            yield block

    def get_block(self, cid: CID) -> bytes:
        """One block, verified, from the first node that has a good copy. A node that fails
        moves to the back of the order, so a dead primary costs one attempt, not one per block."""
        failures: list[StorageError] = []
        clients = self._thread_clients()
        with self._lock:
            order = list(self._read_order)
        for node in order:
            try:
                data = self._call(node, clients[node].block.get, str(cid))
                cid.verify(data)
                return data
            except StorageError as exc:
                failures.append(exc)
            except ipfs_errors.HashMismatch:
                log.warning("node %s returned bytes that do not match %s", node, cid)
                failures.append(CidMismatch(f"{node} returned bytes that do not hash to {cid}"))
            with self._lock:
                self._read_order.remove(node)
                self._read_order.append(node)
        for kind in (CidMismatch, ContentNotFound):
            if any(isinstance(f, kind) for f in failures):
                raise kind(
                    f"no node has a valid copy of block {cid}: " + "; ".join(map(str, failures))
                )
        raise NodeUnavailable("; ".join(map(str, failures)))

    def pin(self, cid: str, replicas: int = 3) -> list[str]:
        """Make sure `replicas` known nodes (primary first) pin the content, copying verified
        blocks to nodes that lack them; returns the nodes that hold it. Raises
        ReplicationError, carrying those holders, when fewer nodes could take it."""
        root = _parse(cid)
        if not 1 <= replicas <= len(self.nodes):
            raise ReplicationError(
                f"asked for {replicas} replicas of {cid} but {len(self.nodes)} nodes are known", []
            )
        holders: list[str] = []
        for node in self.nodes:
            if len(holders) == replicas:
                break
            try:
                self._pin_on(node, root)
                holders.append(node)
            except StorageError as exc:
                log.warning("could not pin %s on %s: %s", cid, node, exc)
        if len(holders) < replicas:
            raise ReplicationError(
                f"{cid} is pinned on {len(holders)} of {replicas} nodes", holders
            )
        return holders

    def _pin_on(self, node: str, root: CID) -> None:
        """Pin without letting a real Kubo search the network (offline), and if the node lacks
        blocks, copy them in and pin again."""
        client = self._thread_clients()[node]
        try:
            self._call(node, client.pin.add, str(root), offline=True)
            return
        except ContentNotFound:
            log.info("copying %s to %s", root, node)
        try:
            for cid, block in reader.iter_blocks(root, self.get_block):
                self._put_block(node, cid, block if block is not None else self.get_block(cid))
        except ipfs_errors.IpfsError as exc:
            raise StorageError(f"{root} cannot be copied: {exc}") from exc
        self._call(node, client.pin.add, str(root), offline=True)

    def _put_block(self, node: str, cid: CID, data: bytes) -> None:
        """block/put names a block by hashing what it received; a name other than the one we
        sent it under means the node stored something else, and is refused."""
        code, _ = multihash.split(cid.multihash)
        opts = {"mhtype": multihash.name_for(code)}
        if cid.version == 0:
            opts["format"] = "v0"
        else:
            opts["cid-codec"] = CODEC_NAMES[cid.codec]
        client = self._thread_clients()[node]
        answer = self._call(node, client.block.put, io.BytesIO(data), opts=opts)
        stored = _parse(answer["Key"])
        if (stored.codec, stored.multihash) != (cid.codec, cid.multihash):
            raise CidMismatch(f"{node} stored block {cid} as {stored}")


def _api_token(settings: Settings) -> str:
    """The token `settings` holds for the nodes' RPC API; empty (send none) when it holds none."""
    secret = settings.ipfs_api_token
    return secret.get_secret_value() if secret else ""
