"""The loop every daemon runs: tick until told to stop, and ride out what the network may mend."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx
import requests
from web3.exceptions import ProviderConnectionError, TimeExhausted, Web3RPCError

from marketplace.errors import ZooError

from .heads import HeadFeed

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
    tick: Callable[[], object],
    stop: threading.Event,
    interval: float,
    name: str = "tick",
    *,
    heads: HeadFeed | None = None,
    waiting: Callable[[], bool] = lambda: False,
) -> None:
    """Call `tick` until `stop` is set. A TRANSIENT failure is logged and the next tick retries
    `interval` seconds later; anything else is a bug and ends the loop.

    Without `heads` a tick comes every `interval` seconds. With a live feed of new heads it comes
    when a block is pushed, every `interval` while `waiting()` says the daemon awaits something
    the chain will not announce (a re-run's verdict, a slot's next unit), or on stop: a daemon
    with nothing to do sleeps. While the feed is down, ticks come every `interval` again.
    """
    if heads is not None:

        def wake_on_stop(feed: HeadFeed) -> None:
            stop.wait()
            feed.interrupt()

        threading.Thread(
            target=wake_on_stop, args=(heads,), name=f"{name}-stop", daemon=True
        ).start()
    while not stop.is_set():
        seen = heads.sequence if heads is not None else 0  # a head pushed mid-tick: tick again
        failed = False
        try:
            tick()
        except TRANSIENT as exc:
            log.warning("%s failed, retrying: %s", name, exc)
            failed = True
        if heads is None:
            stop.wait(interval)
        else:
            pushed_only = heads.live and not failed and not waiting()
            heads.wait(seen, None if pushed_only else interval, stop)
