#!/usr/bin/env bash
# The ledger's invariant campaign at depth: foundry.toml's `deep` profile (10,000 runs of 256
# calls each, against the suite's 256 × 128 in the test command). About 19,600 CPU-seconds: at
# least 2.7 hours on 2 idle cores (the attack suite is one campaign, about 74 minutes on one core).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FOUNDRY_PROFILE=deep exec node_modules/.bin/forge test --match-path 'tests/foundry/invariant/*' "$@"
