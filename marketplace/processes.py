"""Stopping the child processes we start: politely first, then for sure."""

from __future__ import annotations

import subprocess


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
