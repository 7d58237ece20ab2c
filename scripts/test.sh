#!/usr/bin/env bash
# Every test: the ledger's Foundry suite, then pytest (Anvil, IPFS node, training engine, Ape).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export SOLCX_BINARY_PATH="$PWD/.solcx"

echo "== ruff check"
.venv/bin/ruff check .
# [tool.mypy]'s files (pyproject.toml): the foundation and the roles. The SDK, which
# `from marketplace import Client` loads, is followed silently until it passes too; then plain
# `mypy` runs here.
echo "== mypy"
.venv/bin/mypy --follow-imports=silent

echo "== forge test"
node_modules/.bin/forge test
echo "== pytest"
.venv/bin/pytest "$@"
