"""The node's HTTP/1.1 protocol fed what hypothesis makes up, read by read as the event loop hands
reads over: any bytes get answers or one 4xx and a closed connection, never anything else; a
body cut at any points arrives whole, and never more than it; a request sent behind another is
parsed from its first byte; a head, the requests sent ahead of their answers and a body nobody
reads yet are held only to their bounds.

The transport is a stand-in (a unit test of the protocol): it records what the node writes and
whether it reads, so the reads are exactly the pieces a test chooses. tests/storage/test_api.py
sends the same kinds of requests to a node process over real sockets."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.server import ServerState

from marketplace.ipfs.http_protocol import MAX_HEAD_BYTES, MAX_PIPELINED, NodeHttpProtocol

# The examples' sizes bound their time and memory; no deadline, which a loaded machine would trip.
FAST = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
READ = 64 * 1024  # the largest piece a test hands over in one read


class Transport(asyncio.Transport):
    """What the protocol writes, whether it reads, and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.reading = True
        self.closed = False

    def write(self, data) -> None:
        if not self.closed:
            self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 5001)}.get(
            name, default
        )


App = Callable[[dict, Callable, Callable], Awaitable[None]]


@dataclass
class Exchange:
    """One connection's story: the bodies the app received, what the node answered, what it
    read, and the most an unread body and the queue of requests held after any read."""

    bodies: list[bytes] = field(default_factory=list)
    written: bytes = b""
    closed: bool = False
    fed: int = 0  # bytes the node read before it stopped reading or closed
    most_body_held: int = 0
    most_queued: int = 0

    def responses(self) -> list[tuple[int, bytes]]:
        """(status, body) of every whole response written, in order; parsing fails the test
        on anything that is not one."""
        out, rest = [], self.written
        while rest:
            head, sep, rest = rest.partition(b"\r\n\r\n")
            assert sep, f"a cut-off response head: {head[:200]!r}"
            status = int(re.match(rb"HTTP/1\.1 (\d{3}) ", head)[1])
            if status == 100:  # an interim answer to `Expect: 100-continue`
                continue
            length = int(re.search(rb"(?i)\r\ncontent-length: (\d+)", head)[1])
            assert len(rest) >= length, "a cut-off response body"
            out.append((status, rest[:length]))
            rest = rest[length:]
        return out


def echo(bodies: list[bytes]) -> App:
    """An app that reads the whole body, keeps it, and answers with it."""

    async def app(scope, receive, send) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message["body"]
            if not message.get("more_body"):
                break
        bodies.append(bytes(body))
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": bytes(body)})

    return app


async def never_reads(scope, receive, send) -> None:
    """An app busy elsewhere: it neither reads the body nor answers while the test runs."""
    await asyncio.Event().wait()


async def _exchange(pieces: list[bytes], app: App | None) -> Exchange:
    loop = asyncio.get_running_loop()
    story = Exchange()
    config = uvicorn.Config(
        app or echo(story.bodies), ws="none", log_config=None, proxy_headers=False
    )
    config.load()
    state = ServerState()
    protocol = NodeHttpProtocol(config=config, server_state=state, app_state={}, _loop=loop)
    transport = Transport()
    protocol.connection_made(transport)
    http = protocol._http
    for piece in pieces:
        for _ in range(50):  # the app's turn: it reads, answers, and resumes reading
            if transport.reading or transport.closed:
                break
            await asyncio.sleep(0)
        if not transport.reading or transport.closed:
            break
        buffer = protocol.get_buffer(len(piece))
        buffer[: len(piece)] = piece
        protocol.buffer_updated(len(piece))
        story.fed += len(piece)
        if http.cycle is not None and not http.cycle.response_complete:
            story.most_body_held = max(story.most_body_held, len(http.cycle.body))
        story.most_queued = max(story.most_queued, len(http.pipeline))
        await asyncio.sleep(0)
    for _ in range(50):
        await asyncio.sleep(0)
    story.written, story.closed = bytes(transport.written), transport.closed
    protocol.connection_lost(None)
    for task in list(state.tasks):
        task.cancel()
    await asyncio.gather(*state.tasks, return_exceptions=True)
    return story


def exchange(pieces: list[bytes], app: App | None = None) -> Exchange:
    return asyncio.run(_exchange(pieces, app))


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` in pieces ending at the given offsets (taken modulo its length), none over READ."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points) if b > a]
    return [p[i : i + READ] for p in pieces for i in range(0, len(p), READ)]


def sized(body: bytes, path: bytes = b"/a") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: n\r\nContent-Length: %d\r\n\r\n" % (path, len(body)) + body


def chunked(body: bytes, sizes: list[int]) -> bytes:
    """`body` chunk-encoded in chunks of the given sizes (cycled; one chunk if none given)."""
    out, at, i = [b"POST /c HTTP/1.1\r\nHost: n\r\nTransfer-Encoding: chunked\r\n\r\n"], 0, 0
    while at < len(body):
        size = min(sizes[i % len(sizes)] if sizes else len(body), len(body) - at)
        out.append(b"%x\r\n%s\r\n" % (size, body[at : at + size]))
        at, i = at + size, i + 1
    return b"".join(out) + b"0\r\n\r\n"


CUTS = st.lists(st.integers(0, 1 << 20), max_size=40)
STARTS = st.sampled_from(
    [
        b"",
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: n\r\n\r\n",
        b"POST /a HTTP/1.1\r\nContent-Length: 10\r\n",
        b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n",
    ]
)


@FAST
@given(STARTS, st.binary(max_size=2_000), CUTS)
def test_any_bytes_get_answers_or_one_4xx_and_a_close(start, noise, cuts):
    story = exchange(cut(start + noise, cuts))
    answers = story.responses()
    statuses = [status for status, _ in answers]
    assert all(status == 200 or 400 <= status < 500 for status in statuses), statuses
    refused = [i for i, status in enumerate(statuses) if status != 200]
    assert refused in ([], [len(statuses) - 1]), statuses
    if refused:
        assert story.closed
    # A request parsed before the refusal may be read by the app, its answer lost with the close.
    answered = [body for status, body in answers if status == 200]
    assert answered == story.bodies[: len(answered)]


@FAST
@given(
    st.binary(max_size=100_000),
    st.booleans(),
    st.lists(st.integers(1, 70_000), max_size=8),
    st.binary(max_size=300),
    CUTS,
)
def test_a_body_cut_anywhere_arrives_whole_and_the_next_request_intact(
    body, encode_chunked, sizes, second, cuts
):
    first = chunked(body, sizes) if encode_chunked else sized(body)
    story = exchange(cut(first + sized(second, b"/second"), cuts))
    assert story.bodies == [body, second]
    assert story.responses() == [(200, body), (200, second)]
    assert not story.closed


@FAST
@given(st.lists(st.binary(max_size=100), min_size=2, max_size=MAX_PIPELINED), CUTS)
def test_requests_sent_ahead_of_their_answers_are_each_answered_in_turn(bodies, cuts):
    story = exchange(cut(b"".join(sized(b) for b in bodies), cuts))
    assert story.bodies == bodies
    assert story.responses() == [(200, body) for body in bodies]


@SLOW
@given(st.sampled_from(["url", "header", "headers", "trailer"]), st.integers(1, READ), CUTS)
def test_a_head_past_its_bound_is_refused_431_before_much_more_is_read(where, spill, cuts):
    """httptools gathers a header as long as it comes, uvicorn the URL and every header: the
    node stops reading a head that goes on past MAX_HEAD_BYTES. A read that makes progress (a
    body byte) goes uncounted, so trailers run a read further before they are refused."""
    big = MAX_HEAD_BYTES + spill
    head = {
        "url": b"GET /" + b"u" * big,
        "header": b"GET / HTTP/1.1\r\nX-Long: " + b"v" * big,
        "headers": b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * (big // 8 + 1),
        "trailer": chunked(b"abc", [])[: -len(b"\r\n")] + b"X-T: " + b"t" * (big + READ),
    }[where]
    story = exchange(cut(head, cuts))
    refusal = f"request head or trailers over {MAX_HEAD_BYTES} bytes".encode()
    assert story.responses() == [(431, refusal)]
    assert story.closed
    assert story.fed <= MAX_HEAD_BYTES + 2 * READ


def test_a_head_just_under_its_bound_is_answered():
    headers = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(60))
    request = b"GET / HTTP/1.1\r\n" + headers + b"Content-Length: 2\r\n\r\nok"
    story = exchange([request[i : i + 100] for i in range(0, len(request), 100)])
    assert story.responses() == [(200, b"ok")]


REFUSED_429 = (429, f"more than {MAX_PIPELINED} requests sent ahead of answers".encode())


@SLOW
@given(st.integers(MAX_PIPELINED + 2, 500), CUTS)
def test_the_queue_of_requests_sent_ahead_stays_bounded(count, cuts):
    """A client that sends without reading the answers: every request in a read is parsed and
    queued, a read's worth for every answer it lets the node give, unless the queue is bounded.
    The node answers in turn what it queued and refuses the rest with one 429."""
    story = exchange(cut(b"GET / HTTP/1.1\r\nHost: n\r\n\r\n" * count, cuts))
    assert story.most_queued <= MAX_PIPELINED
    answers = story.responses()
    if answers[-1] == REFUSED_429:
        answers = answers[:-1]
        assert story.closed
    assert answers == [(200, b"")] * len(answers)
    assert len(answers) == count or story.closed


def test_a_read_of_many_requests_ahead_of_their_answers_is_refused_429():
    story = exchange([b"GET / HTTP/1.1\r\nHost: n\r\n\r\n" * 2_000], never_reads)
    assert story.most_queued == MAX_PIPELINED
    assert story.responses() == [REFUSED_429]
    assert story.closed


@SLOW
@given(st.integers(HIGH_WATER_LIMIT, 900_000), st.booleans(), CUTS)
def test_a_body_nobody_reads_yet_is_held_only_to_the_flow_control_bound(size, encode, cuts):
    body = bytes(size)
    request = chunked(body, [4_096]) if encode else sized(body)
    story = exchange(cut(request, cuts), never_reads)
    assert story.most_body_held <= HIGH_WATER_LIMIT + READ
    assert story.fed <= HIGH_WATER_LIMIT + 2 * READ
    assert not story.written and not story.closed
