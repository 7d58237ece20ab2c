"""The daemons' tick loop: a transient failure is retried at the next tick, a bug ends the loop, and
a set stop ends it between ticks."""

from __future__ import annotations

import logging
import threading

import pytest
import requests

from marketplace.chain.errors import ChainError
from marketplace.runtime.loop import run_ticks
from marketplace.storage import StorageError


def test_transient_failures_are_retried_until_stop(caplog):
    stop = threading.Event()
    failures = [
        ConnectionError("rpc down"),
        ChainError("nonce too low"),
        StorageError("ipfs down"),
        requests.ConnectionError("refused"),
        TimeoutError("slow"),
    ]
    ticks = []

    def tick():
        ticks.append(len(ticks))
        if failures:
            raise failures.pop(0)
        stop.set()

    with caplog.at_level(logging.WARNING, logger="marketplace.runtime.loop"):
        run_ticks(tick, stop, interval=0)

    assert len(ticks) == 6
    assert [r.getMessage() for r in caplog.records] == [
        "tick failed, retrying: rpc down",
        "tick failed, retrying: nonce too low",
        "tick failed, retrying: ipfs down",
        "tick failed, retrying: refused",
        "tick failed, retrying: slow",
    ]


def test_a_bug_ends_the_loop():
    def tick():
        raise KeyError("jobId")

    with pytest.raises(KeyError):
        run_ticks(tick, threading.Event(), interval=0)


def test_a_stop_set_meanwhile_ends_the_loop_after_the_tick():
    stop = threading.Event()
    ticks = []

    def tick():
        ticks.append(1)
        threading.Timer(0.05, stop.set).start()

    run_ticks(tick, stop, interval=30)  # the wait for the next tick ends when stop is set

    assert ticks == [1]
