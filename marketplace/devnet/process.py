"""Detached service processes, known by pid, logging to files, stopped by pid."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from marketplace.errors import ZooError


class ServiceFailed(ZooError, RuntimeError):
    """A service exited or never became ready."""


@dataclass
class Service:
    """One process of the devnet, as recorded in its state file."""

    name: str
    argv: list[str]
    log: str
    pid: int | None = None

    def start(self, env: dict[str, str], cwd: Path) -> Service:
        """Start in a session of its own, so it outlives the command that started it."""
        Path(self.log).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            process = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid = process.pid
        return self

    def alive(self) -> bool:
        return self.pid is not None and _alive(self.pid)

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM); `stop_all` waits."""
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)

    def kill_tree(self, timeout: float = 10.0) -> None:
        """SIGKILL it and every process it started (a group job's ranks): a machine that
        vanishes. Returns once it is gone (a signal is delivered later than `kill` returns), so
        whatever follows, a restart on its port say, finds it dead."""
        if self.pid is None:
            return
        tree = [*descendants(self.pid), self.pid]
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended meanwhile
                pass
        deadline = time.monotonic() + timeout
        while any(_alive(pid) for pid in tree):
            if time.monotonic() > deadline:
                raise ServiceFailed(
                    f"{self.name} (pid {self.pid}) outlived SIGKILL by {timeout:.0f}s"
                )
            time.sleep(0.02)

    def wait_for_log(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait until the service's log matches `pattern` (how services announce readiness)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = Path(self.log).read_text(errors="replace") if Path(self.log).exists() else ""
            if match := regex.search(text):
                return match
            if not self.alive():
                raise ServiceFailed(f"{self.name} exited: see {self.log}\n{text[-800:]}")
            time.sleep(0.1)
        raise ServiceFailed(f"{self.name} not ready after {timeout:.0f}s: see {self.log}")

    def to_json(self) -> dict:
        return asdict(self)


def stop_all(services: list[Service], timeout: float = 15.0) -> None:
    """SIGTERM every service, the latest started first, wait for them together, and SIGKILL
    whatever still runs after `timeout` seconds."""
    for service in reversed(services):
        service.terminate()
    if _wait_gone(services, timeout):
        return
    for service in services:
        service.kill()
    _wait_gone(services, 5.0)


def _wait_gone(services: list[Service], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(s.alive() for s in services):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of ours that exited stays a zombie until reaped: reap it to tell.
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        return reaped == 0
    except ChildProcessError:  # someone else's child: a zombie until its parent reaps it
        return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found
