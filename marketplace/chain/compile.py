"""Compile the ledger with the pinned solc-js compiler, through py-solc-x and the native front."""

from __future__ import annotations

import hashlib
import json
import logging
import tomllib
from dataclasses import dataclass
from functools import cache

import solcx

from marketplace.chain.toolchain import CONTRACTS, PROJECT_ROOT, SOLC

log = logging.getLogger(__name__)

CACHE_DIR = PROJECT_ROOT / "build"
LEDGER = ("ZenToken", "Treasury", "Staking", "JobMarket", "Verification", "Registry")
DEPLOYABLE = (*LEDGER, "Timelock")  # the ledger and its governor


def _settings() -> dict:
    """Compiler settings read from foundry.toml, so forge's gas figures describe what Python
    deploys."""
    profile = tomllib.loads((PROJECT_ROOT / "foundry.toml").read_text())["profile"]["default"]
    return {
        "optimizer": {"enabled": profile["optimizer"], "runs": profile["optimizer_runs"]},
        "evmVersion": profile["evm_version"],
        "remappings": [r for r in profile["remappings"] if r.startswith("@openzeppelin/")],
        "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object"]}},
    }


@dataclass(frozen=True)
class Artifact:
    name: str
    abi: list[dict]
    bytecode: str


def _sources() -> dict[str, dict[str, str]]:
    files = sorted(CONTRACTS.rglob("*.sol"))
    return {str(f.relative_to(PROJECT_ROOT)): {"content": f.read_text()} for f in files}


@cache
def compile_contracts() -> dict[str, Artifact]:
    """ABI and creation bytecode of every deployable contract, cached by source hash."""
    sources = _sources()
    settings = _settings()
    key = hashlib.sha256(json.dumps([sources, settings], sort_keys=True).encode()).hexdigest()[:16]
    cached = CACHE_DIR / f"contracts-{key}.json"
    if cached.exists():
        data = json.loads(cached.read_text())
    else:
        log.info("compiling %d Solidity sources", len(sources))
        output = solcx.compile_standard(
            {"language": "Solidity", "sources": sources, "settings": settings},
            solc_binary=SOLC,
            base_path=str(PROJECT_ROOT),
            allow_paths=[str(PROJECT_ROOT)],
        )
        data = {
            name: {"abi": out["abi"], "bytecode": out["evm"]["bytecode"]["object"]}
            for path, contracts in output["contracts"].items()
            for name, out in contracts.items()
            if path.startswith("contracts/") and name in DEPLOYABLE
        }
        CACHE_DIR.mkdir(exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(cached)
    return {name: Artifact(name, d["abi"], d["bytecode"]) for name, d in data.items()}


def all_abis() -> dict[str, list[dict]]:
    """Every ledger contract's ABI, by contract name (the timelock is OpenZeppelin's own)."""
    return {name: art.abi for name, art in compile_contracts().items() if name in LEDGER}
