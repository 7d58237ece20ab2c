#!/usr/bin/env bash
# The ledger's own suites: Forge (unit, fuzz, invariant) on foundry.toml's ci profile (fuzz 512
# runs, invariants 256 runs x 128 calls), then halmos's proofs on the same build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== forge test"
# forge exits 0 when the compiler itself dies, having run nothing: the summary line is the proof.
forge_log=$(mktemp)
FOUNDRY_PROFILE=ci node_modules/.bin/forge test | tee "$forge_log"
grep -q "^Ran [0-9]* test suites" "$forge_log" || { echo "forge test ran no suite" >&2; exit 1; }
rm -f "$forge_log"
echo "== halmos"
bash scripts/halmos.sh
