#!/usr/bin/env bash
# Every test: the ledger's Foundry suite, then pytest (Anvil, IPFS node, training engine, Ape).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export SOLCX_BINARY_PATH="$PWD/.solcx"

echo "== forge test"
node_modules/.bin/forge test
echo "== pytest"
.venv/bin/pytest "$@"
