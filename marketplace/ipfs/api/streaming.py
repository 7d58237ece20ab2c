"""Streamed responses: files that break the connection, not end cleanly, when a block fails, and
add events that stream while the request body is still coming in."""

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from marketplace.ipfs.errors import IpfsError

log = logging.getLogger(__name__)


class FileStream(StreamingResponse):
    """Blocks are read and verified as the body goes out, so a missing or corrupt block can
    only be found after the 200 is sent. Ending the body normally would hand the client a
    cut-short file as if it were whole; returning without the final message makes the server
    drop the connection, which every HTTP client reports as an error."""

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except IpfsError as exc:
            log.error("aborted a response mid-stream: %s", exc)


class EventStream(StreamingResponse):
    """JSON lines of events as they happen, while the request's body is still being read.

    Starlette's streaming response also reads the request's messages to notice a client that
    went away, which would take the body's pieces from the handler still reading them; this
    one only sends. An error raised by the events once the 200 is out ends the stream with
    Kubo's error object as its last line."""

    def __init__(self, events: AsyncIterator[dict[str, Any]]) -> None:
        super().__init__(
            self._lines(events), media_type="application/json", headers={"X-Chunked-Output": "1"}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)

    @staticmethod
    async def _lines(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
        try:
            async for event in events:
                yield json.dumps(event) + "\n"
        except IpfsError as exc:
            log.warning("add failed mid-stream: %s", exc)
            yield json.dumps({"Message": str(exc), "Code": 0, "Type": "error"}) + "\n"
