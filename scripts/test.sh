#!/usr/bin/env bash
# Every test: ruff, mypy and pytest (Anvil, IPFS node, training engine, Ape) with the ledger's
# Foundry suites and halmos proofs beside them, then pytest's end-to-end tests alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
export SOLCX_BINARY_PATH="$PWD/.solcx"

# The ledger's suites are deterministic, whatever their pace: they run beside lint, types and pytest's
# first step at the lowest priority (nice 19), on the CPU those leave idle; their output follows.
# pytest's end-to-end tests then run alone, since they time real windows on a whole devnet.
ledger_log=$(mktemp)
nice -n 19 bash scripts/test_ledger.sh > "$ledger_log" 2>&1 &
ledger=$!
echo "== forge test and halmos: started beside what follows; their output comes after pytest"
trap 'kill "$ledger" 2>/dev/null || true; rm -f "$ledger_log"' EXIT

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"  # [tool.mypy]'s files (pyproject.toml): the foundation and the roles
.venv/bin/mypy

echo "== pytest (the ledger's suites beside it)"
# Two workers, a file's tests on one (its fixtures built once).
workers=(-n "${ZOO_TEST_WORKERS:-2}" --dist loadgroup)
status=0
if [ $# -eq 0 ]; then
  .venv/bin/pytest "${workers[@]}" --ignore=tests/e2e --durations=10 || status=$?
else
  .venv/bin/pytest "${workers[@]}" "$@" || status=$?  # the end-to-end tests among them share one worker
fi
ledger_status=0
wait "$ledger" || ledger_status=$?
cat "$ledger_log"
[ "$ledger_status" -eq 0 ] || { echo "the ledger's suites failed" >&2; exit "$ledger_status"; }
[ "$status" -eq 0 ] || exit "$status"
if [ $# -eq 0 ]; then
  echo "== pytest: end to end"
  .venv/bin/pytest tests/e2e --durations=10
fi
