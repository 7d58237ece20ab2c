"""The loop every daemon runs: tick until told to stop, and ride out what the network may mend."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx
import requests
from web3.exceptions import ProviderConnectionError, TimeExhausted, Web3RPCError

from marketplace.errors import ZooError

log = logging.getLogger(__name__)

# What a failed tick may raise without stopping the daemon, the next tick retrying: the project's
# own errors (a chain refusal, an unreachable IPFS node), a dropped or timed-out connection to the
# RPC node or IPFS, and an RPC node's error answer or a receipt that did not come in time.
TRANSIENT = (
    ZooError,
    requests.RequestException,
    httpx.TransportError,
    TimeoutError,
    ConnectionError,
    ProviderConnectionError,
    TimeExhausted,
    Web3RPCError,
)


def run_ticks(
    tick: Callable[[], object], stop: threading.Event, interval: float, name: str = "tick"
) -> None:
    """Call `tick` every `interval` seconds until `stop` is set. A TRANSIENT failure is logged and
    the next tick retries; anything else is a bug and ends the loop."""
    while not stop.is_set():
        try:
            tick()
        except TRANSIENT as exc:
            log.warning("%s failed, retrying: %s", name, exc)
        stop.wait(interval)
