#!/usr/bin/env bash
# The ledger's invariant campaign at depth: foundry.toml's `deep` profile (10,000 runs of 256
# calls each, against the suite's 256 × 128 in the test command). Takes about an hour on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FOUNDRY_PROFILE=deep exec node_modules/.bin/forge test --match-path 'tests/foundry/invariant/*' "$@"
