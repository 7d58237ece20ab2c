"""Clients that hold a connection by keeping still (a slowloris): one that never sends a request,
one that sends its head a byte at a time, one that stops sending a body it declared. Each is
closed (408 where a request was begun) once its silence passes the node's bounds, while a slow
client that keeps sending is served however long it takes; and one address may hold only so
many connections. The protocol runs on an event loop whose clock the test moves, with the
stand-in transport of test_http_protocol, so minutes of a client's silence take no time."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import pytest
import requests
import uvicorn
from uvicorn.server import ServerState

from marketplace.ipfs.http_protocol import Admission, NodeHttpProtocol
from marketplace.ipfs.limits import ConnectionBounds

from .support import AUTH, random_bytes
from .test_api import MIB, _add_request, _connect, _responses
from .test_http_protocol import Exchange, Transport, chunked, echo, never_reads, sized

BOUNDS = ConnectionBounds(idle_s=5, head_s=20, body_silence_s=30, per_client=2, total=3)
KEEP_ALIVE_S = 40


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves forward; the timers it holds fire as it does."""

    offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


class Connection:
    """One client's connection to the protocol, fed read by read."""

    def __init__(self, app, admission: Admission, peer: str = "127.0.0.1") -> None:
        loop = asyncio.get_running_loop()
        self.bodies: list[bytes] = []
        config = uvicorn.Config(
            app or echo(self.bodies),
            ws="none",
            log_config=None,
            proxy_headers=False,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        config.load()
        self.state = ServerState()
        self.protocol = NodeHttpProtocol(
            BOUNDS, admission, config=config, server_state=self.state, app_state={}, _loop=loop
        )
        self.transport = Transport()
        self.transport.get_extra_info = lambda name, default=None: {  # type: ignore[method-assign]
            "peername": (peer, 40000),
            "sockname": ("127.0.0.1", 5001),
        }.get(name, default)
        self.protocol.connection_made(self.transport)

    def send(self, data: bytes) -> None:
        assert self.transport.reading and not self.transport.closed
        buffer = self.protocol.get_buffer(len(data))
        buffer[: len(data)] = data
        self.protocol.buffer_updated(len(data))

    @property
    def closed(self) -> bool:
        return self.transport.closed

    def responses(self) -> list[tuple[int, bytes]]:
        return Exchange(written=bytes(self.transport.written)).responses()

    async def end(self) -> None:
        self.protocol.connection_lost(None)
        for task in list(self.state.tasks):
            task.cancel()
        await asyncio.gather(*self.state.tasks, return_exceptions=True)


async def wait(seconds: float) -> None:
    """Let `seconds` pass on the loop's clock, and the loop run what came due."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, ClockLoop)
    for _ in range(10):
        await asyncio.sleep(0)
    loop.offset += seconds
    for _ in range(10):
        await asyncio.sleep(0)


@pytest.fixture
def run() -> Iterator:
    with asyncio.Runner(loop_factory=ClockLoop) as runner:
        yield runner.run


def test_a_connection_that_never_sends_a_request_is_closed_quietly(run):
    async def story():
        conn = Connection(None, Admission(BOUNDS))
        await wait(BOUNDS.idle_s - 0.5)
        assert not conn.closed
        await wait(1)
        assert conn.closed and not conn.transport.written
        await conn.end()

    run(story())


def test_a_head_sent_a_byte_at_a_time_is_refused_408_once_its_bound_runs_out(run):
    async def story():
        conn = Connection(None, Admission(BOUNDS))
        head = b"GET / HTTP/1.1\r\nX-Slow: " + b"s" * 1_000
        waited = 0.0
        for byte in head:  # every byte well inside every silence bound
            if conn.closed:
                break
            conn.send(bytes([byte]))
            await wait(1)
            waited += 1
        assert waited == BOUNDS.head_s  # it went on until the head's time was spent
        assert conn.responses() == [(408, b"request head not whole in 20 s")]
        await conn.end()

    run(story())


@pytest.mark.parametrize("encode", [sized, lambda body: chunked(body, [1000])])
def test_a_body_that_stops_coming_is_refused_408_and_the_app_told(run, encode):
    async def story():
        conn = Connection(None, Admission(BOUNDS))
        request = encode(bytes(10_000))
        conn.send(request[:3_000])
        await wait(BOUNDS.body_silence_s - 1)
        assert not conn.closed
        await wait(2)
        assert conn.responses() == [(408, b"no request body bytes for 30 s")]
        assert conn.closed and conn.bodies == []  # the app saw the client leave
        await conn.end()

    run(story())


@pytest.mark.parametrize("encode", [sized, lambda body: chunked(body, [1000])])
def test_a_slow_body_that_keeps_coming_is_served_however_long_it_takes(run, encode):
    async def story():
        conn = Connection(None, Admission(BOUNDS))
        body = bytes(range(256)) * 40
        request = encode(body)
        for at in range(0, len(request), 100):  # 100 bytes every 25 s: over 17 minutes
            conn.send(request[at : at + 100])
            await wait(BOUNDS.body_silence_s - 5)
        assert conn.responses() == [(200, body)]
        assert not conn.closed
        await wait(KEEP_ALIVE_S + 1)  # then idle: uvicorn's keep-alive bound closes it
        assert conn.closed
        await conn.end()

    run(story())


def test_silence_while_the_node_holds_the_request_is_not_counted(run):
    """An app that does not read the body yet (reading paused) or takes its time to answer:
    the client waits on the node, and is not cut off for it."""

    async def story():
        unread = Connection(never_reads, Admission(BOUNDS))
        unread.send(sized(bytes(200_000))[:150_000])  # past the flow control's bound: paused
        unanswered = Connection(never_reads, Admission(BOUNDS))
        unanswered.send(b"GET / HTTP/1.1\r\nHost: n\r\n\r\n")
        await wait(10 * BOUNDS.body_silence_s)
        assert not unread.transport.reading
        assert not unread.closed and not unanswered.closed
        for conn in (unread, unanswered):
            await conn.end()

    run(story())


def late_reader(delay: float, bodies: list[bytes]):
    """An app that reads nothing for `delay` seconds, then reads the body and echoes it."""

    async def app(scope, receive, send) -> None:
        await asyncio.sleep(delay)
        await echo(bodies)(scope, receive, send)

    return app


@pytest.mark.parametrize("expect", [False, True])
def test_a_client_waiting_on_the_node_has_its_whole_bound_once_the_node_reads(run, expect):
    """A body paused by the flow control, or held back until the node answers `Expect:
    100-continue`: its silence counts from when the node reads again."""

    async def story():
        bodies: list[bytes] = []
        conn = Connection(late_reader(10 * BOUNDS.body_silence_s, bodies), Admission(BOUNDS))
        body = bytes(range(256)) * 800
        request = sized(body)
        if expect:
            head, _, body_part = request.partition(b"\r\n\r\n")
            conn.send(head + b"\r\nExpect: 100-continue\r\n\r\n")
            sent = b""
        else:
            sent = request[:150_000]  # past the flow control's bound: reading pauses
            conn.send(sent)
            assert not conn.transport.reading
        await wait(10 * BOUNDS.body_silence_s)  # the app reads now
        assert conn.transport.reading and not conn.closed
        await wait(BOUNDS.body_silence_s - 1)
        conn.send(request[len(sent) :] if not expect else body_part)
        await wait(0)
        assert conn.responses() == [(200, body)]
        assert bodies == [body]
        await conn.end()

    run(story())


def test_one_address_may_hold_only_so_many_connections(run):
    async def story():
        admission = Admission(BOUNDS)
        first, second = (Connection(None, admission) for _ in range(2))
        third = Connection(None, admission)
        refusal = (503, b"more than 2 connections from 127.0.0.1")
        assert third.responses() == [refusal] and third.closed
        await third.end()
        other = Connection(None, admission, peer="10.0.0.9")
        assert not other.closed  # another address is served
        full = Connection(None, admission, peer="10.0.0.10")
        assert full.responses() == [(503, b"the node holds its most connections (3)")]
        await full.end()
        await first.end()  # one closes: room for another
        again = Connection(None, admission)
        assert not again.closed
        again.send(sized(b"ok"))
        await wait(0)
        assert again.responses() == [(200, b"ok")]
        for conn in (second, other, again):
            await conn.end()

    run(story())


def test_a_node_closes_silent_clients_and_serves_slow_steady_ones(node_factory):
    """Over real sockets, with bounds of a second or two: a connection that sends nothing is
    closed within its bound, a head or a body that stops is answered 408, while an add whose
    body trickles in for longer than every bound (read past the parser, which wakes only per
    2 MiB) completes, and other clients are answered meanwhile."""
    node = node_factory.start(
        env={
            "ZOO_IPFS_IDLE_TIMEOUT_S": "1",
            "ZOO_IPFS_HEAD_TIMEOUT_S": "2",
            "ZOO_IPFS_BODY_SILENCE_TIMEOUT_S": "1",
        }
    )
    data = random_bytes(3 * MIB, seed=9)
    upload = _add_request(data, close=True)
    answers: list[tuple[int, bytes]] = []

    def trickle() -> None:
        with _connect(node) as sock:
            for at in range(0, len(upload), 400_000):  # 400 kB every 0.4 s: 3.2 s in all
                sock.sendall(upload[at : at + 400_000])
                time.sleep(0.4)
            answers.extend(_responses(sock, 1))

    uploader = threading.Thread(target=trickle)
    uploader.start()
    started = time.monotonic()
    silent, slow_head, slow_body = _connect(node), _connect(node), _connect(node)
    slow_head.sendall(b"POST /api/v0/add HTTP/1.1\r\nHost: x\r\n")
    slow_body.sendall(_add_request(b"x" * 10_000)[:-5_000])
    assert silent.recv(1) == b""  # closed by the node
    assert 0.9 < time.monotonic() - started < 2.5
    assert _responses(slow_body, 1) == [(408, b"no request body bytes for 1 s")]
    assert _responses(slow_head, 1) == [(408, b"request head not whole in 2 s")]
    while uploader.is_alive():  # others are served while the upload trickles in
        version = requests.post(f"{node.url}/api/v0/version", headers=AUTH, timeout=5)
        assert version.status_code == 200
        time.sleep(0.3)
    uploader.join()
    [(status, answer)] = answers
    assert status == 200
    assert time.monotonic() - started > 3
    whole = requests.post(
        f"{node.url}/api/v0/add", headers=AUTH, files={"file": data}, timeout=30
    ).json()
    assert json.loads(answer)["Hash"] == whole["Hash"]
    for sock in (silent, slow_head, slow_body):
        sock.close()
