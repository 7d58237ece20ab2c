"""The node's HTTP/1.1 protocol: uvicorn's httptools one, passing request bodies on uncopied."""

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class BodyPassingProtocol(HttpToolsProtocol):
    """Upstream appends every body piece the parser delivers to a bytearray, which the app's
    `receive()` then copies out again with `bytes(...)`: two copies of every uploaded byte, the
    largest part of the event loop's work during a big add. Here a piece that arrives while
    nothing is waiting is handed over as the parser's own bytes object, which `bytes(...)`
    returns as it is. Pieces arriving behind an unread one (small chunks of a chunk-encoded
    body, parsed from one read) are joined in a bytearray as upstream does, so what the app
    receives, and the flow control, are unchanged."""

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
