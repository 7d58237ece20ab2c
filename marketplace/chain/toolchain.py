"""Where the project's pinned npm toolchain (solc-js front, Foundry binaries) lives."""

from __future__ import annotations

import platform
from pathlib import Path

from marketplace.errors import ZooError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = PROJECT_ROOT / "node_modules"
SOLC = PROJECT_ROOT / "scripts" / "solc"
CONTRACTS = PROJECT_ROOT / "contracts"


class ToolchainMissing(ZooError, FileNotFoundError):
    """The npm toolchain is not installed (run the README's set-up)."""


def foundry_binary(tool: str) -> Path:
    """Path of the native `anvil`, `forge` or `cast` shipped in @foundry-rs's platform package.

    The npm wrapper in node_modules/.bin is a node script that spawns the binary; calling the
    binary directly gives us its own pid to stop.
    """
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine(), "amd64"
    )
    system = platform.system().lower()
    path = NODE_MODULES / "@foundry-rs" / f"{tool}-{system}-{arch}" / "bin" / tool
    if not path.exists():
        raise ToolchainMissing(f"{tool} not found at {path}: run `npm ci` (see README)")
    return path
