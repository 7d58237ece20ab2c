"""New blocks as the RPC node pushes them (`eth_subscribe` `newHeads` over its websocket), so a
daemon wakes when the chain moves instead of asking, and skips blocks its contracts did not log in.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Self
from urllib.parse import urlsplit, urlunsplit

from eth_utils import keccak
from web3 import Web3
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from marketplace.chain.events import BlockMark

log = logging.getLogger(__name__)

KEEP = 64  # heads kept: a cursor this many blocks behind reads the range (one get_logs) instead
RECONNECT = (1.0, 60.0)  # seconds before the first reconnection, and the most between two


@dataclass(frozen=True)
class Head:
    """A block header as pushed: enough to move a cursor past the block without asking for it."""

    number: int
    hash: str  # 0x-prefixed hex, as BlockMark keeps it
    parent_hash: str
    timestamp: int
    bloom: bytes  # logsBloom: 2048 bits, set by every address and topic that logged in the block

    @classmethod
    def of(cls, header: dict) -> Head:
        return cls(
            int(header["number"], 16),
            header["hash"].lower(),
            header["parentHash"].lower(),
            int(header["timestamp"], 16),
            bytes.fromhex(header["logsBloom"].removeprefix("0x")),
        )

    @property
    def mark(self) -> BlockMark:
        return BlockMark(self.number, self.hash)

    def may_log(self, address: str) -> bool:
        """False when no contract at `address` logged in this block; True when one may have (a
        bloom filter has false positives, never false negatives)."""
        digest = keccak(bytes.fromhex(address.removeprefix("0x")))
        for i in (0, 2, 4):
            bit = int.from_bytes(digest[i : i + 2], "big") & 2047
            if not self.bloom[255 - bit // 8] & (1 << (bit % 8)):
                return False
        return True


def websocket_url(rpc_url: str) -> str | None:
    """The websocket the node at `rpc_url` would serve on the same host and port (as Anvil and
    geth's shared port do); None for a URL that is not http(s) or ws(s)."""
    parts = urlsplit(rpc_url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    return urlunsplit(parts._replace(scheme=scheme)) if scheme else None


class HeadFeed:
    """The node's latest heads, kept by a thread of their own while the subscription lives.

    `live` says whether pushed heads can be trusted to be all there is: while it is False (no
    websocket at the URL, or the subscription dropped and is being made again, with back-off)
    readers poll as they would without a feed. Use it as a context manager: it subscribes on
    entry and unsubscribes on exit.
    """

    def __init__(self, url: str | None):
        self.url = url
        self.live = False
        self.sequence = 0  # heads pushed so far: a waiter compares it with the one it last saw
        self._heads: list[Head] = []  # the newest KEEP, oldest first, numbers consecutive
        self._changed = threading.Condition()
        self._closed = threading.Event()
        self._ws: Connection | None = None
        self._thread = threading.Thread(target=self._run, name="head-feed", daemon=True)

    @classmethod
    def of(cls, w3: Web3) -> HeadFeed:
        """The feed of the node behind `w3`'s HTTP provider, not yet started."""
        url = getattr(w3.provider, "endpoint_uri", None)
        return cls(websocket_url(str(url)) if url else None)

    def __enter__(self) -> Self:
        if self.url is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        ws = self._ws
        if ws is not None:
            ws.close()
        if self._thread.is_alive():
            self._thread.join(5)
        self.interrupt()

    # --- what readers ask ------------------------------------------------------------------

    def newest(self) -> Head | None:
        with self._changed:
            return self._heads[-1] if self.live and self._heads else None

    def after(self, number: int) -> list[Head] | None:
        """The pushed heads above block `number`, oldest first; None when the feed cannot say
        (not live, or block `number` is older than the heads it keeps)."""
        with self._changed:
            if not self.live or not self._heads or self._heads[0].number > number + 1:
                return None
            return [head for head in self._heads if head.number > number]

    def wait(self, seen: int, timeout: float | None, stop: threading.Event) -> None:
        """Return once a head after the `seen`-th came, `timeout` seconds passed, or `stop` is set
        (`interrupt` tells a waiter to look at it)."""
        with self._changed:
            self._changed.wait_for(lambda: self.sequence != seen or stop.is_set(), timeout)

    def interrupt(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # --- the subscription's thread ---------------------------------------------------------

    def _run(self) -> None:
        assert self.url is not None
        delay, failing = RECONNECT[0], False
        while not self._closed.is_set():
            try:
                with connect(self.url, open_timeout=10, max_size=2**20) as ws:
                    self._ws = ws
                    self._subscribe(ws)
                    if failing:
                        log.info("subscribed to new heads at %s again", self.url)
                    delay, failing = RECONNECT[0], False
                    for message in ws:
                        self._push(Head.of(json.loads(message)["params"]["result"]))
            except (OSError, WebSocketException, ValueError, KeyError, TypeError) as exc:
                if not failing and not self._closed.is_set():
                    log.warning(
                        "no new heads from %s (%s): polling every interval, reconnecting with "
                        "back-off",
                        self.url,
                        exc or type(exc).__name__,
                    )
                failing = True
            finally:
                self._ws = None
                with self._changed:
                    self.live = False
                    self._heads.clear()
                    self.sequence += 1  # waiters fall back to polling now
                    self._changed.notify_all()
            self._closed.wait(delay)
            delay = min(delay * 2, RECONNECT[1])

    def _subscribe(self, ws: Connection) -> None:
        request = {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["newHeads"]}
        ws.send(json.dumps(request))
        reply = json.loads(ws.recv(timeout=10))
        if "result" not in reply:
            raise ValueError(f"eth_subscribe refused: {reply.get('error')}")
        with self._changed:
            self.live = True

    def _push(self, head: Head) -> None:
        with self._changed:
            heads = self._heads
            # A head at or below the newest replaces that branch (a reorg); a gap starts afresh.
            if heads and not heads[0].number <= head.number <= heads[-1].number + 1:
                heads.clear()
            del heads[head.number - heads[0].number if heads else 0 :]
            heads.append(head)
            del heads[:-KEEP]
            self.sequence += 1
            self._changed.notify_all()
