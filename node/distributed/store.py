"""The group's key-value store, which rank 0's process hosts: gloo's rendezvous and the round
board (quorum.py) go through it.

Only the slots' holders may use it. A connection logs in as a rank by signing the host's fresh
nonce with the key of that rank's holder (`store_login_digest`) within `LOGIN_S`, or is closed;
a holder's connections are closed once its slot changes hands. What a rank writes counts
against its budget (the bytes of its keys and values): past it, the rank's oldest keys go, so a
member holds no more of the host's memory than its share and pushes out only its own posts.
Who may write a key is the caller's rule (the board's: `quorum.board_rule`), and only the host
takes keys off. torch's TCPStore, which this replaces, let anyone who reached the port write
keys of up to 8 MiB without end, for the job's life, and any member overwrite another's post.

On the wire, a frame is a 4-byte length and a body. A request's body is an operation's letter
and its fields, each length-prefixed; a reply's is a status byte and its answer.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import secrets
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, NamedTuple, Self

import torch.distributed as dist

from marketplace.errors import ZooError
from marketplace.protocol.round_signatures import (
    SIGNATURE_BYTES,
    digest_signer,
    sign_digest,
    store_login_digest,
)

from .signing import RoundSigning

logger = logging.getLogger(__name__)

NONCE_BYTES = 32
LOGIN_S = 5.0  # for a connection to log in, or be closed
MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 8 * 2**20  # what TCPStore took, and the board's parts fit (quorum.PART_BYTES)
KEY_COST = 64  # bytes a key costs its writer beyond its name and value: the host's bookkeeping
CONTROL_BYTES = 2**20  # a rank's room for what is not a round's post: rendezvous, counts
MAX_PENDING = 256  # connections not logged in yet; past it the oldest is closed
SESSIONS_PER_RANK = 4  # a rank's process and its daemon, and a restart's before the old one ends
HOLDERS_EVERY_S = 2.0  # between looks at who holds the slots
_POLL_S = 0.01  # between looks for a key a get or wait is waiting for
_RETRY_S = 0.2  # between tries to log in: the host may not listen yet, or not know the holder
_LENGTH = struct.Struct(">I")
_OK, _MISSING, _REFUSED = b"\x00", b"\x01", b"\x02"
_COUNT = re.compile(rb"-?[0-9]{1,19}")  # what add counts in, as an int64 writes it
_MAX_FRAME = MAX_VALUE_BYTES + 2 * MAX_KEY_BYTES + 64  # a request: a key and a value, and room


class KeyRule(NamedTuple):
    """Who may write a key: only `owner` (None: any rank), and with `once` only while it is
    not there. Only rank 0, the host, takes keys off."""

    owner: int | None = None
    once: bool = False


ANY_RANK = KeyRule()


class StoreRefused(ZooError, RuntimeError):
    """The group's store refused a login or a write."""


class _Malformed(Exception):
    """A request no client of ours sends: its connection is closed."""


class StoreHost:
    """The store, served from a thread of its own while the host is open (`with`).

    `signing` says who holds each rank's slot (read again every `HOLDERS_EVERY_S`) and the
    job logins are for; `budget` is each rank's, in bytes; `rules` says who may write a key."""

    def __init__(
        self,
        host: str,
        port: int,
        signing: RoundSigning,
        budget: int,
        *,
        rules: Callable[[str], KeyRule] = lambda key: ANY_RANK,
        login_s: float = LOGIN_S,
    ):
        self.address = (host, port)
        self.signing = signing
        self.budget = budget
        self.rules = rules
        self.login_s = login_s
        self._values: dict[str, bytes] = {}
        self._writer: dict[str, int] = {}  # key -> the rank that wrote it last
        ranks = range(len(signing.addresses))
        self._written: list[OrderedDict[str, int]] = [OrderedDict() for _ in ranks]  # oldest first
        self._used = [0 for _ in ranks]
        self._pending: OrderedDict[asyncio.StreamWriter, None] = OrderedDict()
        self._sessions: dict[asyncio.StreamWriter, tuple[int, str]] = {}  # -> rank, its signer
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="group-store", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        self._started.wait()
        if self._failed is not None:
            raise dist.DistNetworkError(
                f"the group's store cannot listen on {self.address}: {self._failed}"
            )
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def used(self, rank: int) -> int:
        """Bytes of the store `rank`'s writes hold now."""
        return self._used[rank]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, listening_host(self.address[0]), self.address[1])
            )
        except OSError as exc:
            self._failed = exc
            self._started.set()
            return
        watch = self._loop.create_task(self._watch_holders())
        self._started.set()
        self._loop.run_forever()
        watch.cancel()
        server.close()
        for writer in [*self._pending, *self._sessions]:
            writer.close()  # each connection's task then ends on its own, not cancelled
        if tasks := asyncio.all_tasks(self._loop):
            self._loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._pending[writer] = None
        if len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)[0].close()
        try:
            signer = await asyncio.wait_for(self._login(reader, writer), self.login_s)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, _Malformed):
            signer = None
        finally:
            self._pending.pop(writer, None)
        if signer is None:
            writer.close()
            return
        rank = signer[0]
        own = [w for w, (r, _) in self._sessions.items() if r == rank]
        for old in own[: max(0, len(own) + 1 - SESSIONS_PER_RANK)]:
            old.close()
            del self._sessions[old]
        self._sessions[writer] = signer
        try:
            while not writer.is_closing():
                reply = self._handle(rank, await _read_frame(reader, _MAX_FRAME))
                writer.write(_LENGTH.pack(len(reply)) + reply)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, _Malformed):
            pass
        finally:
            self._sessions.pop(writer, None)
            writer.close()

    async def _login(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, str] | None:
        """The rank and signer a connection logs in as, or None for one that is not the rank's
        holder (told so before it is closed)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        writer.write(nonce)
        await writer.drain()
        body = await _read_frame(reader, 2 + SIGNATURE_BYTES)
        rank, signature = int.from_bytes(body[:2], "big"), body[2:]
        holders = self.signing.refreshed().addresses
        signer = digest_signer(store_login_digest(self.signing.job_id, rank, nonce), signature)
        if rank >= len(holders) or signer is None or signer.lower() != holders[rank].lower():
            answer = _REFUSED + b"not the holder of rank %d's slot" % rank
            writer.write(_LENGTH.pack(len(answer)) + answer)
            await writer.drain()
            return None
        writer.write(_LENGTH.pack(1) + _OK)
        await writer.drain()
        return rank, signer

    async def _watch_holders(self) -> None:
        """Close the connections of a slot's former holder."""
        while True:
            await asyncio.sleep(HOLDERS_EVERY_S)
            holders = self.signing.refreshed().addresses
            for writer, (rank, signer) in list(self._sessions.items()):
                if signer.lower() != holders[rank].lower():
                    logger.info("rank %d's slot changed hands: its old session ends", rank)
                    del self._sessions[writer]
                    writer.close()

    def _handle(self, rank: int, body: bytes) -> bytes:
        """The reply to one request of `rank`'s."""
        op, fields = body[:1], list(_fields(body[1:]))
        if op == b"N" and not fields:
            return _OK + b"%d" % len(self._values)
        if op == b"K":
            return _OK + (b"1" if all(_key(k) in self._values for k in fields) else b"0")
        if not fields:
            raise _Malformed
        key, *values = _key(fields[0]), *fields[1:]
        if op == b"G" and not values:
            return _OK + self._values[key] if key in self._values else _MISSING
        if op == b"D" and not values:
            if rank != 0:
                return _REFUSED + b"only the host takes keys off"
            return _OK + (b"1" if self._drop(key) else b"0")
        rule = self.rules(key)
        if rule.owner is not None and rule.owner != rank:
            return _REFUSED + b"%s is rank %d's to write" % (key.encode(), rule.owner)
        if rule.once and key in self._values:
            if op == b"C":  # as a compare-set that finds another value: it answers that value
                return _OK + self._values[key]
            return _REFUSED + b"%s is written once" % key.encode()
        match op, values:
            case b"S", [value]:
                return self._put(rank, key, value)
            case b"A", [amount] if _COUNT.fullmatch(amount):
                count = self._values.get(key, b"0")
                if not _COUNT.fullmatch(count):
                    return _REFUSED + b"%s is not a count" % key.encode()
                total = b"%d" % (int(count) + int(amount))
                return self._put(rank, key, total, answer=total)
            case b"C", [expected, desired]:
                current = self._values.get(key)
                if current is None and expected != b"":
                    return _OK + expected
                if current is not None and current != expected:
                    return _OK + current
                return self._put(rank, key, desired, answer=desired)
        raise _Malformed

    def _put(self, rank: int, key: str, value: bytes, answer: bytes = b"") -> bytes:
        """Write `key` on `rank`'s budget, letting its oldest keys go past it."""
        cost = len(key) + len(value) + KEY_COST
        if cost > self.budget:
            return _REFUSED + b"%d bytes are over rank %d's budget" % (cost, rank)
        self._drop(key)
        self._values[key] = value
        self._writer[key] = rank
        self._written[rank][key] = cost
        self._used[rank] += cost
        while self._used[rank] > self.budget:
            self._drop(next(iter(self._written[rank])))
        return _OK + answer

    def _drop(self, key: str) -> bool:
        if key not in self._values:
            return False
        del self._values[key]
        rank = self._writer.pop(key)
        self._used[rank] -= self._written[rank].pop(key)
        return True


class GroupStore(dist.Store):
    """A rank's connection to its group's store, opened and logged in on first use: a rank that
    goes through only rounds its group settled needs no store, and its host may be gone.

    A login the host refuses is tried again until `timeout`, for the host may not have read
    yet that this rank's provider took its slot over."""

    def __init__(self, host: str, port: int, rank: int, signing: RoundSigning, timeout: timedelta):
        super().__init__()
        self.address = (host, port)
        self.rank = rank
        self.signing = signing
        self.wait_s = timeout.total_seconds()
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()  # gloo may call from threads of its own

    @property
    def connected(self) -> bool:
        return self._socket is not None

    def set(self, key: str, value: Any) -> None:
        self._call(b"S", key, value)

    def get(self, key: str) -> bytes:
        self.wait([key])
        status, answer = self._call(b"G", key)
        if status != _OK:  # taken off again since
            raise dist.DistStoreError(f"{key!r} is not in the group's store")
        return answer

    def add(self, key: str, amount: int) -> int:
        return int(self._call(b"A", key, str(amount))[1])

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self._call(b"C", key, expected, desired)[1]

    def check(self, keys: list[str]) -> bool:
        return self._call(b"K", *keys)[1] == b"1"

    def delete_key(self, key: str) -> bool:
        return self._call(b"D", key)[1] == b"1"

    def num_keys(self) -> int:
        return int(self._call(b"N")[1])

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        wait_s = self.wait_s if timeout is None else timeout.total_seconds()
        deadline = time.monotonic() + wait_s
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise dist.DistStoreError(f"{keys!r} not in the group's store after {wait_s:.0f} s")
            time.sleep(_POLL_S)

    def _call(self, op: bytes, *fields: str | bytes) -> tuple[bytes, bytes]:
        request = op + b"".join(_LENGTH.pack(len(f)) + f for f in map(_bytes, fields))
        with self._lock:
            if self._socket is None:
                self._socket = self._connect()
            try:
                self._socket.sendall(_LENGTH.pack(len(request)) + request)
                reply = _receive_frame(self._socket)
            except OSError as exc:
                raise dist.DistNetworkError(
                    f"the group's store at {self.address} is gone: {exc}"
                ) from None
        if reply[:1] == _REFUSED:
            raise StoreRefused(f"the group's store: {reply[1:].decode(errors='replace')}")
        return reply[:1], reply[1:]

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                return self._login()
            except (OSError, StoreRefused) as exc:
                if time.monotonic() > deadline:
                    raise dist.DistNetworkError(
                        f"rank {self.rank} cannot join the group's store at {self.address}: {exc}"
                    ) from None
                time.sleep(_RETRY_S)

    def _login(self) -> socket.socket:
        connection = socket.create_connection(self.address, timeout=self.wait_s)
        try:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            nonce = _receive(connection, NONCE_BYTES)
            digest = store_login_digest(self.signing.job_id, self.rank, nonce)
            proof = self.rank.to_bytes(2, "big") + sign_digest(self.signing.keys[self.rank], digest)
            connection.sendall(_LENGTH.pack(len(proof)) + proof)
            reply = _receive_frame(connection)
        except BaseException:
            connection.close()
            raise
        if reply != _OK:
            connection.close()
            raise StoreRefused(reply[1:].decode(errors="replace"))
        return connection


def listening_host(host: str) -> str | None:
    """Where a store for an endpoint on `host` listens: on loopback alone for a loopback endpoint
    (a devnet, tests), else on every interface (None), as TCPStore did: a provider's registered
    address may be its router's rather than its machine's."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name
        loopback = host == "localhost"
    return host if loopback else None


async def _read_frame(reader: asyncio.StreamReader, most: int) -> bytes:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > most:
        raise _Malformed
    return await reader.readexactly(length)


def _fields(body: bytes) -> Iterator[bytes]:
    at = 0
    while at < len(body):
        if at + _LENGTH.size > len(body):
            raise _Malformed
        (length,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        if at + length > len(body):
            raise _Malformed
        yield body[at : at + length]
        at += length


def _key(field: bytes) -> str:
    if len(field) > MAX_KEY_BYTES:
        raise _Malformed
    try:
        return field.decode()
    except UnicodeDecodeError:
        raise _Malformed from None


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _receive(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the group's store closed the connection")
        data += chunk
    return bytes(data)


def _receive_frame(connection: socket.socket) -> bytes:
    (length,) = _LENGTH.unpack(_receive(connection, _LENGTH.size))
    if length > _MAX_FRAME:
        raise ConnectionError(f"the group's store sent a frame of {length} bytes")
    return _receive(connection, length)
