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
# forge exits 0 when the compiler itself dies, having run nothing: the summary line is the proof.
forge_log=$(mktemp)
FOUNDRY_PROFILE=ci node_modules/.bin/forge test | tee "$forge_log"
grep -q "^Ran [0-9]* test suites" "$forge_log" || { echo "forge test ran no suite" >&2; exit 1; }
rm -f "$forge_log"
echo "== halmos"
bash scripts/halmos.sh
echo "== pytest"
# Two workers, a file's tests on one (its fixtures built once). The end-to-end tests run after,
# alone: they time real windows on a whole devnet, which a second worker's training would slow.
workers=(-n "${ZOO_TEST_WORKERS:-2}" --dist loadgroup)
if [ $# -eq 0 ]; then
  .venv/bin/pytest "${workers[@]}" --ignore=tests/e2e --durations=10
  echo "== pytest: end to end"
  .venv/bin/pytest tests/e2e --durations=10
else
  .venv/bin/pytest "${workers[@]}" "$@"  # the end-to-end tests among them share one worker
fi
