"""Streamed file responses that break the connection, not end cleanly, when a block fails."""

import logging

from starlette.responses import StreamingResponse
from starlette.types import Send

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
