#!/usr/bin/env bash
# The demo: set up, then run a job through the whole ledger on a local Anvil chain.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py
