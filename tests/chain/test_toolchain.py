"""The offline toolchain: Ape compiles and deploys through the solc-js front, Slither is clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marketplace.chain.toolchain import NODE_MODULES, PROJECT_ROOT, foundry_binary

VENV_BIN = Path(sys.executable).parent


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(
        [
            str(foundry_binary("anvil").parent),
            str(NODE_MODULES / ".bin"),
            str(VENV_BIN),
            os.environ["PATH"],
        ]
    )
    environment = (
        os.environ | {"PATH": path, "SOLCX_BINARY_PATH": str(PROJECT_ROOT / ".solcx")} | env
    )
    return subprocess.run(
        cmd,
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_ape_deploys_the_ledger_on_anvil(tmp_path):
    manifest = tmp_path / "manifest.json"
    result = run(
        [
            str(VENV_BIN / "ape"),
            "run",
            "deploy",
            "--network",
            "ethereum:local:foundry",
            "--manifest",
            str(manifest),
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(manifest.read_text())
    assert data["chainId"] == 31337
    assert set(data["contracts"]) == {
        "ZenToken",
        "Treasury",
        "Staking",
        "JobMarket",
        "Verification",
        "Registry",
        "Timelock",
    }
    assert all(c["abi"] and c["address"].startswith("0x") for c in data["contracts"].values())


@pytest.mark.slow
def test_slither_reports_no_unjustified_high_or_medium_finding(tmp_path):
    # Its own forge output folders, so it never cleans the ones `forge test` uses.
    result = run(
        [
            str(VENV_BIN / "slither"),
            ".",
            "--exclude-dependencies",
            "--exclude-informational",
            "--exclude-low",
            "--exclude-optimization",
            "--filter-paths",
            "node_modules|tests",
            "--fail-medium",
        ],
        FOUNDRY_OUT=str(tmp_path / "out"),
        FOUNDRY_CACHE_PATH=str(tmp_path / "cache"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 result(s) found" in result.stderr
