"""A redis-server on a unix socket in a folder of its own, for tests and devnets; stopped by pid."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import redis

from marketplace.errors import ZooError
from marketplace.processes import terminate

log = logging.getLogger(__name__)


class RedisUnavailable(ZooError, RuntimeError):
    """redis-server is not installed, or did not start."""


@dataclass
class RedisServer:
    """A redis-server listening only on `<folder>/redis.sock` (no TCP port), persisting nothing
    unless `persist`: then every write goes to an append-only file in the folder (flushed each
    second), so a server killed and started again keeps its queues, as a devnet's does.

    A socket in a folder of our own cannot collide with another server the way a port can, and
    nothing off the machine can reach it. Use as a context manager, or `start()` and `stop()`.
    """

    folder: Path
    persist: bool = False
    process: subprocess.Popen | None = field(default=None, init=False)

    @property
    def socket(self) -> Path:
        return self.folder / "redis.sock"

    @property
    def url(self) -> str:
        """The URL Celery (broker and result backend) and redis-py both accept."""
        return f"redis+socket://{self.socket}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def argv(self) -> list[str]:
        """The command line, logging to stdout: a supervisor that captures output (the devnet)
        can spawn it itself and wait for redis's "Ready to accept connections" line."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable("redis-server not found: apt-get install -y redis-server")
        return [
            binary,
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "yes" if self.persist else "no",
            "--appendfsync",
            "everysec",
            "--dir",
            str(self.folder),
            # Its background tasks (expiry, client timeouts) once a second instead of ten times:
            # what a devnet's queues need, at a tenth of an idle server's wake-ups.
            "--hz",
            "1",
        ]

    def ping(self) -> None:
        """Return once the server answers on its socket; RedisUnavailable if it does not."""
        client = redis.Redis(unix_socket_path=str(self.socket))
        try:
            client.ping()
        except redis.ConnectionError as exc:
            raise RedisUnavailable(f"redis-server on {self.socket}: {exc}") from None
        finally:
            client.close()

    def start(self, timeout: float = 15.0) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        with open(self.folder / "redis.log", "ab") as log_file:
            self.process = subprocess.Popen(self.argv(), stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                self.ping()
                log.info("redis-server pid %d on %s", self.process.pid, self.socket)
                return self
            except RedisUnavailable:
                time.sleep(0.05)
        self.stop()
        raise RedisUnavailable(f"redis-server did not start: see {self.folder / 'redis.log'}")

    def stop(self) -> None:
        if self.process:
            terminate(self.process)
        self.process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
