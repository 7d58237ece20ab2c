"""The node's HTTP/1.1 protocol: uvicorn's httptools one, with fewer copies of request bodies."""

import asyncio
import threading

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_READ_SIZE = 1024 * 1024
_read_buffers = threading.local()


def _read_buffer() -> memoryview:
    buffer = getattr(_read_buffers, "buffer", None)
    if buffer is None:
        buffer = _read_buffers.buffer = memoryview(bytearray(_READ_SIZE))
    return buffer


class _BodyPassingProtocol(HttpToolsProtocol):
    """Upstream appends every body piece the parser delivers to a bytearray, which the app's
    `receive()` then copies out again with `bytes(...)`: two copies of every uploaded byte.
    Here a piece that arrives while nothing is waiting is handed over as the parser's own
    bytes object, which `bytes(...)` returns as it is. Pieces arriving behind an unread one
    (small chunks of a chunk-encoded body, parsed from one read) are joined in a bytearray as
    upstream does, so what the app receives, and the flow control, are unchanged."""

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle.body or cycle.response_complete or self.parser.should_upgrade():
            if isinstance(cycle.body, bytes):
                cycle.body = bytearray(cycle.body)
            super().on_body(body)
            return
        cycle.body = body
        if len(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()


class NodeHttpProtocol(asyncio.BufferedProtocol):
    """uvicorn's protocol (above) behind asyncio's buffered-read interface, which uvloop only
    uses for protocols that are not `asyncio.Protocol`s, hence the wrapping. The event loop
    then reads straight into one buffer, up to 1 MiB at a time, instead of 250 kB at a time
    each copied into a fresh bytes object: one copy of every uploaded byte less, and a
    quarter of the read callbacks. The buffer is shared by the thread's connections, as
    uvloop shares its own: the parser copies out everything it passes on (URL, headers, body
    pieces) before the next read can land in it. Not for WebSocket upgrades (ws="none")."""

    def __init__(self, **uvicorn_args) -> None:
        self._http = _BodyPassingProtocol(**uvicorn_args)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._http.connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self._http.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self._http.eof_received()

    def pause_writing(self) -> None:
        self._http.pause_writing()

    def resume_writing(self) -> None:
        self._http.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return _read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._http.data_received(_read_buffer()[:nbytes])  # type: ignore[arg-type]
