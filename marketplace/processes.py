"""The child processes we start: a free loopback port to give one, and stopping them politely
first, then for sure."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (a child may still lose it to a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def terminate(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM, wait up to `timeout` seconds, then SIGKILL; always reaps the process."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
