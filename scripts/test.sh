#!/usr/bin/env bash
# Every test: the ledger's Foundry suite, then pytest (Anvil, IPFS node, training engine, Ape).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export SOLCX_BINARY_PATH="$PWD/.solcx"

echo "== ruff check"
.venv/bin/ruff check .
# The modules held to the type checker so far; the rest of [tool.mypy]'s files (pyproject.toml)
# join when they pass, and then plain `mypy` runs here.
TYPED=(
  marketplace/errors.py marketplace/config.py marketplace/wallet.py marketplace/processes.py
  marketplace/storage.py marketplace/ipfs
  marketplace/chain/__init__.py marketplace/chain/anvil.py marketplace/chain/compile.py
  marketplace/chain/deploy.py marketplace/chain/errors.py marketplace/chain/permit.py
  marketplace/chain/toolchain.py marketplace/chain/tx.py marketplace/chain/zen.py
)
echo "== mypy"
.venv/bin/mypy --follow-imports=silent "${TYPED[@]}"

echo "== forge test"
node_modules/.bin/forge test
echo "== pytest"
.venv/bin/pytest "$@"
