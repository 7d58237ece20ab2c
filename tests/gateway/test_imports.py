"""The CLI, the gateway and the SDK start without torch: only training and reading weights load
it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("marketplace.cli", "marketplace.gateway.api.main", "marketplace.sdk", "marketplace.jobs")


def python(code: str) -> str:
    """What `code` prints in a fresh interpreter, where nothing was imported before it."""
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_apps_import_without_torch():
    assert python(f"import sys, {', '.join(APPS)}; print('torch' in sys.modules)") == "False"


def test_the_cli_shows_its_help_without_torch():
    code = "import sys; from marketplace.cli import main; main(['--help'], standalone_mode=False); "
    shown = python(code + "print('torch' in sys.modules)")
    assert "train" in shown and "devnet" in shown and "jobs" in shown
    assert shown.endswith("False")


def test_zoo_compute_help():
    script = Path(sys.executable).with_name("zoo-compute")
    shown = subprocess.run([script, "--help"], capture_output=True, text=True, check=True).stdout
    assert "Usage: zoo-compute" in shown
