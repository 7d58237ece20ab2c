#!/usr/bin/env bash
# Every test: lint and types, the ledger's Foundry suite, then pytest (Anvil, IPFS node, training engine, Ape).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export SOLCX_BINARY_PATH="$PWD/.solcx"

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"  # [tool.mypy]'s files (pyproject.toml): the foundation and the roles
.venv/bin/mypy

echo "== forge test"  # foundry.toml's ci profile: fuzz 512 runs, invariants 256 runs x 128 calls
FOUNDRY_PROFILE=ci node_modules/.bin/forge test
echo "== halmos"
bash scripts/halmos.sh
echo "== pytest"
.venv/bin/pytest "$@"
