"""Helpers for the node tests: IPFS nodes and the daemon as real processes, waiting on the chain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from marketplace.chain.anvil import advance_time
from marketplace.chain.ledger import Ledger
from marketplace.protocol.terms import JobStatus
from marketplace.runtime.clock import chain_time

PASSWORD = "correct horse battery staple"
ZOO_COMPUTE = str(Path(sys.executable).with_name("zoo-compute"))
SPEC = Path(__file__).with_name("spec.yaml")


class IpfsNode:
    """`zoo-compute ipfs serve` on a free loopback port; ready once `<repo>/api` exists."""

    def __init__(self, repo: Path):
        repo.mkdir(parents=True)
        self.repo = repo
        with open(repo.with_suffix(".log"), "ab") as out:
            self.process = subprocess.Popen(
                [
                    ZOO_COMPUTE,
                    "ipfs",
                    "serve",
                    "--repo",
                    str(repo),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--log-level",
                    "warning",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def multiaddr(self) -> str:
        return (self.repo / "api").read_text().strip() + "/http"

    def wait_ready(self, timeout: float = 30) -> IpfsNode:
        wait_for(
            lambda: (self.repo / "api").exists() or self.process.poll() is not None,
            timeout,
            "IPFS node",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"IPFS node exited: {self.repo.with_suffix('.log').read_text()}")
        return self

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


class Daemon:
    """`zoo-compute node start` as a real process, its output in a file, stopped by pid."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.log_path = log_path
        with open(log_path, "ab") as out:
            self.process = subprocess.Popen(
                [ZOO_COMPUTE, "node", "start", "--cost-floor", "1"],
                env=os.environ | env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def output(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(
            lambda: "ready:" in self.output or self.process.poll() is not None,
            timeout,
            "daemon ready",
        )
        if self.process.poll() is not None:
            raise RuntimeError(f"daemon exited {self.process.returncode}:\n{self.output}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def terminate(self, timeout: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def stop(self) -> None:
        """Kill it if it still runs; its log's tail goes to stdout, which pytest shows for a
        failed test alone (CI keeps no files)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        print("the daemon's log, its last lines:", *self.output.splitlines()[-80:], sep="\n")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def skip_past(ledger: Ledger, deadline: int) -> None:
    """The chain's clock moved just past `deadline` now, instead of a wait in real time."""
    now = chain_time(ledger.w3)
    if now <= deadline:
        advance_time(ledger.w3, deadline + 1 - now)


def end_open_auctions(ledger: Ledger) -> None:
    """Move the chain's clock past every auction earlier tests left open on it: a daemon bids on
    any auction it sees, one at a time, so a leftover one could hold off the test's own bid."""
    market = ledger.market.functions
    jobs = (ledger.struct(ledger.market, "job", j) for j in range(1, market.jobCount().call() + 1))
    running = (JobStatus.OPEN, JobStatus.RUNNING)
    open_until = [job["revealDeadline"] for job in jobs if job["status"] in running]
    if open_until:
        skip_past(ledger, max(open_until))
