"""Helpers for running the gateway's processes in tests: their environment, readiness."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

# Every test client shares one address, as the devnet's processes do: the devnet's lifted limits,
# except in the test of the limits.
from marketplace.devnet.network import UNLIMITED_RATE as UNLIMITED


def gateway_env(ledger, root: Path, ipfs_api: str | None = None) -> dict[str, str]:
    """The environment `zoo-compute gateway serve|index` run in: this ledger, this IPFS node, a
    database under `root`."""
    return (
        os.environ
        | {
            "ZOO_RPC_URL": ledger.w3.provider.endpoint_uri,
            "ZOO_MANIFEST": str(ledger.deployment.write(root / "manifest.json")),
            "ZOO_HOME": str(root / "home"),
            "ZOO_DATABASE_URL": f"sqlite:///{root / 'gateway.sqlite3'}",
            "ZOO_GATEWAY_READ_LIMIT": UNLIMITED,
            "ZOO_GATEWAY_WRITE_LIMIT": UNLIMITED,
        }
        | ({"ZOO_IPFS_API": ipfs_api, "ZOO_IPFS_REPLICAS": "[]"} if ipfs_api else {})
    )


def wait_for_http(
    url: str, process: subprocess.Popen, timeout: float = 30, log: Path | None = None
) -> None:
    """Wait until `url` answers; fail with the end of the process's `log` when it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url).raise_for_status()
            return
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                said = log.read_text()[-4000:] if log else ""
                pytest.fail(f"nothing answers at {url} (exit code {process.poll()})\n{said}")
            time.sleep(0.2)


def wait_until_caught_up(
    url: str, head: int, indexer: subprocess.Popen, timeout: float = 60
) -> None:
    """Wait until the gateway at `url` says it has indexed block `head`: a test that reads a job
    the fixtures made must not race the indexer's first pass (a 404 on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while (httpx.get(f"{url}/health").json()["indexed_block"] or -1) < head:
        if time.monotonic() > deadline or indexer.poll() is not None:
            pytest.fail(f"the gateway at {url} did not index block {head} in {timeout}s")
        time.sleep(0.2)
