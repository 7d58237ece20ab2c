"""`zoo-compute jobs` finds the gateway of the devnet running on this machine when none is given."""

from __future__ import annotations

import importlib
import os

from click.testing import CliRunner

from marketplace.cli import main
from marketplace.devnet.network import State
from marketplace.devnet.process import Service

NOWHERE = "http://127.0.0.1:9"  # a port nothing listens on
jobs_cli = importlib.import_module("marketplace.cli.jobs")  # the package's `jobs` is the command


def devnet_state(root, pid: int) -> None:
    state = State(root=root, gateway_url=NOWHERE)
    state.services = [Service("gateway", ["gateway"], str(root / "gateway.log"), pid=pid)]
    state.save()


def test_jobs_uses_the_running_devnets_gateway(tmp_path, monkeypatch):
    devnet_state(tmp_path, os.getpid())
    monkeypatch.setattr(jobs_cli, "STATE_DIR", tmp_path)
    result = CliRunner().invoke(main, ["jobs", "list"], env={"ZOO_GATEWAY_URL": ""})
    assert result.exit_code == 1 and f"no gateway answers at {NOWHERE}" in result.output


def test_without_a_gateway_or_a_running_devnet_jobs_says_how_to_get_one(tmp_path, monkeypatch):
    devnet_state(tmp_path, 2**22 + 1)  # above the kernel's pid range: a devnet that stopped
    monkeypatch.setattr(jobs_cli, "STATE_DIR", tmp_path)
    result = CliRunner().invoke(main, ["jobs", "list"], env={"ZOO_GATEWAY_URL": ""})
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: no gateway: set ZOO_GATEWAY_URL, pass `zoo-compute jobs --gateway URL ...` "
        "or start the devnet"
    )
