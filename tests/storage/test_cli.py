"""`zoo-compute ipfs serve` as an operator runs it."""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from marketplace.cli.ipfs import serve

from .support import AUTH

ZOO = str(Path(sys.executable).with_name("zoo-compute"))


def test_serve_publishes_its_address_and_stops_on_sigterm(tmp_path: Path):
    repo = tmp_path / "repo"
    process = subprocess.Popen(
        [ZOO, "ipfs", "serve", "--repo", str(repo), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (repo / "api").exists():
            assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
            time.sleep(0.05)
        port = (repo / "api").read_text().split("/")[4]
        assert requests.post(f"http://127.0.0.1:{port}/api/v0/version", headers=AUTH, timeout=30).ok
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert "listening on http://127.0.0.1:" in output
    assert "Traceback" not in output
    assert not (repo / "api").exists()


def test_a_busy_port_is_a_one_line_error(tmp_path: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [ZOO, "ipfs", "serve", "--repo", str(tmp_path / "repo"), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        (
            f"Error: cannot start the node on 127.0.0.1:{port} with repo {tmp_path / 'repo'}: "
            "Address already in use"
        )
    ]


def test_every_option_has_help():
    assert all(option.help for option in serve.params)
    result = subprocess.run(
        [ZOO, "ipfs", "serve", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0 and "--repo" in result.stdout
