"""The node's HTTP/1.1 protocol: uvicorn's httptools one, with fewer copies of request bodies."""

import asyncio
import collections
import fcntl
import functools
import socket
import struct
import termios
import threading
from collections.abc import Callable
from typing import cast

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from marketplace.ipfs.limits import DEFAULT_CONNECTION_BOUNDS, ConnectionBounds

_READ_SIZE = 1024 * 1024
# Bytes read while the parser makes no progress (no head ends, no body byte comes): a request's
# line and headers, or a chunked body's trailers, held whole by httptools and uvicorn, which
# bound neither. Four times what uvicorn's h11 protocol allows a head.
MAX_HEAD_BYTES = 64 * 1024
# Requests parsed ahead of the one being answered. A client that keeps sending without reading
# the answers would otherwise have a read's worth of requests (thousands of small ones) queued
# for every answer it gets.
MAX_PIPELINED = 16
# A body with at least this much still to come after a read is read past the parser, up to
# _BODY_READ_SIZE at a time: as much as the add pipeline hands a worker at once, so a read
# is one batch and one pass through the app's loop.
_DIRECT_BODY_MIN = _READ_SIZE
_BODY_READ_SIZE = 2 * 1024 * 1024
_read_buffers = threading.local()
# Where a connection is, for the bound on its silence: before a request's first byte, inside a
# head, or owing body bytes.
_IDLE, _HEAD, _BODY = "idle", "head", "body"


def _read_buffer() -> memoryview:
    buffer = getattr(_read_buffers, "buffer", None)
    if buffer is None:
        buffer = _read_buffers.buffer = memoryview(bytearray(_READ_SIZE))
    return buffer


class _BodyPassingProtocol(HttpToolsProtocol):
    """Upstream appends every body piece the parser delivers to a bytearray, which the app's
    `receive()` then copies out again with `bytes(...)`: two copies of every uploaded byte.
    Here a piece that arrives while nothing is waiting is handed over as the bytes object it
    came in, which `bytes(...)` returns as it is. Pieces arriving behind an unread one
    (small chunks of a chunk-encoded body, parsed from one read) are joined in a bytearray as
    upstream does, so what the app receives, and the flow control, are unchanged.

    `body_left` counts down what a Content-Length body still owes (None for other bodies),
    so the rest of a large one can be read without the parser. `progressed` says whether the
    parser passed a head's end or a body byte since it was last cleared, which is how the node
    bounds what a head may hold."""

    body_left: int | None = None
    progressed = False
    refusal: tuple[int, str] | None = None  # why the parser was stopped, for its answer
    phase = _IDLE  # where the parser is: between requests, in a head, or in a body
    since = 0.0  # the loop's time when the phase began, or (in a body) its last byte came
    served = False  # whether a request's head has come whole on this connection

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.since = self.loop.time()

    def on_message_begin(self) -> None:
        self.enter(_HEAD)
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        answering = self.cycle is not None and not self.cycle.response_complete
        if answering and len(self.pipeline) >= MAX_PIPELINED:
            # Raised in a callback, this stops the parser; upstream answers its error.
            message = f"more than {MAX_PIPELINED} requests sent ahead of answers"
            self.refusal = (429, message)
            raise OverflowError(message)
        self.progressed = True
        self.served = True
        self.enter(_BODY)
        super().on_headers_complete()
        headers = dict(self.headers)
        sized = b"content-length" in headers and b"transfer-encoding" not in headers
        self.body_left = int(headers[b"content-length"]) if sized else None

    def on_body(self, body: bytes) -> None:
        self.progressed = True
        self.since = self.loop.time()
        if self.body_left is not None:
            self.body_left -= len(body)
        cycle = self.cycle
        if cycle.body or cycle.response_complete or self.parser.should_upgrade():
            if isinstance(cycle.body, bytes):
                cycle.body = bytearray(cycle.body)
            super().on_body(body)
            return
        # Upstream's cycle types its body as a bytearray; receive() copies out either alike.
        cycle.body = body  # type: ignore[assignment]
        if len(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        self.enter(_IDLE)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self.phase == _IDLE:
            self.enter(_IDLE)  # idle from now, not from when the request ended
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """Upstream's answer to a request the parser refused, with the status of our own
        refusals."""
        status, message = self.refusal or (400, msg)
        self.refuse(status, message)

    def refuse(self, status: int, message: str) -> None:
        """Answer `status` with `message` and close the connection, as upstream answers what
        it cannot parse."""
        body = message.encode("ascii")
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def end_body_read_past_parser(self) -> None:
        """The body's last bytes were read without the parser, which still waits for them: end
        the request as the parser would have, and parse the next one with a fresh parser
        (set up as upstream sets up its own)."""
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.on_message_complete()


class Admission:
    """The connections a server holds open, by client address: each is a socket, a task and
    buffers, so one client (or all) may hold only so many at once."""

    def __init__(self, bounds: ConnectionBounds) -> None:
        self._bounds = bounds
        self._by_client: collections.Counter[str] = collections.Counter()
        self._total = 0

    def admit(self, client: str) -> str | None:
        """Count a connection in, or say why it is refused."""
        if self._total >= self._bounds.total:
            return f"the node holds its most connections ({self._bounds.total})"
        if self._by_client[client] >= self._bounds.per_client:
            return f"more than {self._bounds.per_client} connections from {client}"
        self._by_client[client] += 1
        self._total += 1
        return None

    def release(self, client: str) -> None:
        self._total -= 1
        self._by_client[client] -= 1
        if not self._by_client[client]:
            del self._by_client[client]


def node_protocol(bounds: ConnectionBounds) -> Callable[..., "NodeHttpProtocol"]:
    """The protocol class as uvicorn builds one per connection: all of them with `bounds` and
    one count of the connections open."""
    return functools.partial(NodeHttpProtocol, bounds=bounds, admission=Admission(bounds))


class _ReadSwitch:
    """The transport as uvicorn's protocol sees it: its flow control's pause_reading and
    resume_reading go to whichever reader has the socket, the transport or the body reader,
    and what it writes tells the node's bound on a body's silence that the node spoke."""

    def __init__(self, owner: "NodeHttpProtocol", transport: asyncio.Transport) -> None:
        self._owner = owner
        self._transport = transport

    def pause_reading(self) -> None:
        self._owner.set_reading(False)

    def resume_reading(self) -> None:
        self._owner.set_reading(True)

    def write(self, data: bytes) -> None:
        self._owner.node_spoke()
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class NodeHttpProtocol(asyncio.BufferedProtocol):
    """uvicorn's protocol (above) behind asyncio's buffered-read interface, which uvloop only
    uses for protocols that are not `asyncio.Protocol`s, hence the wrapping. The event loop
    then reads straight into one buffer, up to 1 MiB at a time, instead of 250 kB at a time
    each copied into a fresh bytes object: one copy of every uploaded byte less, and a
    quarter of the read callbacks. The buffer is shared by the thread's connections, as
    uvloop shares its own: the parser copies out everything it passes on (URL, headers, body
    pieces) before the next read can land in it. Not for WebSocket upgrades (ws="none").

    The parser's copy of a body piece is the last copy left. Once a read leaves a large
    Content-Length body with at least _DIRECT_BODY_MIN bytes to come, the rest is read
    without the parser, each read straight into the bytes object the app receives: the
    transport stops reading and a duplicate of its socket, watched by the event loop, reads
    exactly the bytes the body still owes (never into the next request), then hands the
    socket back to the transport and the next request to a fresh parser. uvicorn's flow
    control pauses and resumes that reader as it would the transport. Meanwhile the socket's
    receive low-water mark is the piece the reader wants (up to _BODY_READ_SIZE, never more
    than the body owes), so the loop wakes it once per full piece, not for every part of one
    that arrives; it is back at one byte before the transport reads again.

    What httptools and uvicorn hold for a client is bounded here too: a head (or a chunked
    body's trailers) over MAX_HEAD_BYTES is answered 431, more than MAX_PIPELINED requests ahead
    of their answers 429, and the connection closed; a body the app has not read yet is held up
    to uvicorn's HIGH_WATER_LIMIT and one read, then reading pauses.

    So is what a client holds by keeping still (a slowloris, `ConnectionBounds`): a connection
    silent for `idle_s` before a request (or uvicorn's keep-alive timeout between requests) is
    closed, a head not whole `head_s` after its first byte is answered 408, as is a body silent
    for `body_silence_s` while the node is ready to read it; while the app holds the request
    (reading paused, or the answer not yet given) the client's silence is not its fault and is
    not counted. One timer a connection, re-armed when it fires, keeps this off the read path.
    A connection past `Admission`'s bounds is answered 503 and closed before anything is read."""

    _transport: asyncio.Transport  # set by connection_made, before any other call

    def __init__(
        self,
        bounds: ConnectionBounds = DEFAULT_CONNECTION_BOUNDS,
        admission: Admission | None = None,
        **uvicorn_args,
    ) -> None:
        self._http = _BodyPassingProtocol(**uvicorn_args)
        self._reading = True  # what the flow control last asked for
        self._stalled = 0  # bytes read since the parser last made progress
        self._body_socket: socket.socket | None = None  # while reading a body past the parser
        self._body_waiting = 0  # bytes the body reader's socket held when last looked at
        self._bounds = bounds
        self._admission = admission or Admission(bounds)
        self._client: str | None = None  # the address admitted, released when the connection goes
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a stream's, typed as the base
        switch = _ReadSwitch(self, self._transport)
        http = self._http
        http.connection_made(switch)  # type: ignore[arg-type]  # stands in for the transport
        client = http.client[0] if http.client else ""
        refusal = self._admission.admit(client)
        if refusal is not None:
            http.refuse(503, refusal)
            return
        self._client = client
        http.enter(_IDLE)
        self._arm(http.since + self._bounds.idle_s)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._client is not None:
            self._admission.release(self._client)
            self._client = None
        self._close_body_reader()
        self._http.connection_lost(exc)

    def _arm(self, when: float) -> None:
        self._timer = self._http.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        """Close the connection if the client has kept still past its bound, else look again
        when the bound would next run out."""
        self._timer = None
        http = self._http
        if self._transport.is_closing():
            return
        now = http.loop.time()
        cycle = http.cycle
        in_flight = cycle is not None and not cycle.response_complete
        if http.phase == _HEAD:
            bound, refusal = (
                self._bounds.head_s,
                f"request head not whole in {self._bounds.head_s:g} s",
            )
            answer = not in_flight  # else the answer to the request before is still to come
        elif http.phase == _BODY and self._reading and not cycle.waiting_for_100_continue:
            if self._body_socket is not None:
                self._note_body_bytes_waiting(now)
            bound = self._bounds.body_silence_s
            refusal = f"no request body bytes for {self._bounds.body_silence_s:g} s"
            answer = not cycle.response_started  # else the app's answer is, or was, under way
        elif http.phase == _IDLE and not in_flight and not http.pipeline:
            bound = http.timeout_keep_alive if http.served else self._bounds.idle_s
            refusal, answer = None, False  # nothing asked, nothing to answer: closed quietly
        else:  # the app holds the request, or paused reading: look again later
            self._arm(now + self._bounds.idle_s)
            return
        if now < http.since + bound:
            self._arm(http.since + bound)
        elif refusal is not None and answer:
            http.refuse(408, refusal)
        else:
            self._transport.close()

    def _note_body_bytes_waiting(self, now: float) -> None:
        """The body reader wakes once a whole piece has come (the socket's low-water mark), so
        a slow body arrives unseen by it: bytes waiting in the socket that were not there when
        last looked at count as the client's progress."""
        assert self._body_socket is not None
        raw = fcntl.ioctl(self._body_socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
        waiting = struct.unpack("i", raw)[0]
        if waiting > self._body_waiting:
            self._http.since = now
        self._body_waiting = waiting

    def eof_received(self) -> None:
        self._http.eof_received()

    def pause_writing(self) -> None:
        self._http.pause_writing()

    def resume_writing(self) -> None:
        self._http.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return _read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        http = self._http
        http.progressed = False
        # httptools parses any buffer; uvicorn's signature says bytes.
        http.data_received(_read_buffer()[:nbytes])  # type: ignore[arg-type]
        # A read without progress went whole into a head (or trailers), so a head holds at most
        # MAX_HEAD_BYTES and what it began with in the read that ended the message before it.
        self._stalled = 0 if http.progressed else self._stalled + nbytes
        if self._stalled > MAX_HEAD_BYTES and not self._transport.is_closing():
            http.refuse(431, f"request head or trailers over {MAX_HEAD_BYTES} bytes")
            return
        if (
            http.body_left is not None
            and http.body_left >= _DIRECT_BODY_MIN
            and not self._transport.is_closing()
            and http.parser is not None
            and not http.parser.should_upgrade()
        ):
            self._open_body_reader()

    def set_reading(self, reading: bool) -> None:
        self._reading = reading
        if reading:
            self.node_spoke()
        if self._body_socket is None:
            if reading:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()
        elif reading:
            asyncio.get_running_loop().add_reader(self._body_socket, self._read_body)
        else:
            asyncio.get_running_loop().remove_reader(self._body_socket)

    def node_spoke(self) -> None:
        """The node resumed reading or wrote (a `100 Continue`, an early answer): a body's
        silence counts from now, the client having waited on the node until then."""
        http = self._http
        if http.phase == _BODY:
            http.since = http.loop.time()

    def _open_body_reader(self) -> None:
        if self._reading:
            self._transport.pause_reading()
        shared = self._transport.get_extra_info("socket")
        self._body_socket = socket.fromfd(shared.fileno(), shared.family, shared.type)
        self._body_socket.setblocking(False)
        self._wake_for_next_piece()
        self.set_reading(self._reading)

    def _wake_for_next_piece(self) -> None:
        assert self._body_socket is not None and self._http.body_left is not None
        piece = min(self._http.body_left, _BODY_READ_SIZE)
        self._body_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, piece)

    def _close_body_reader(self) -> None:
        if self._body_socket is not None:
            asyncio.get_running_loop().remove_reader(self._body_socket)
            try:
                self._body_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            except OSError:
                pass  # the connection is gone, and the low-water mark with it
            self._body_socket.close()
            self._body_socket = None

    def _read_body(self) -> None:
        http = self._http
        assert self._body_socket is not None and http.body_left is not None
        try:
            piece = self._body_socket.recv(min(http.body_left, _BODY_READ_SIZE))
        except BlockingIOError:
            return
        except OSError:
            piece = b""
        if not piece:  # the client closed or failed: the transport finds out and reports it
            self._hand_back()
            return
        self._body_waiting = 0
        http.on_body(piece)
        if http.body_left:
            self._wake_for_next_piece()
            return
        self._hand_back()
        http.end_body_read_past_parser()

    def _hand_back(self) -> None:
        self._close_body_reader()
        if self._reading:
            self._transport.resume_reading()
