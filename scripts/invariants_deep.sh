#!/usr/bin/env bash
# The ledger's invariant campaign at depth: foundry.toml's `deep` profile (10,000 runs of 256
# calls each, against the suite's 256 × 128 in the test command). Each suite is one campaign on one
# core; about 8,800 CPU-seconds in all, about 2 hours on 2 cores (the registry's suite is the
# longest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FOUNDRY_PROFILE=deep exec node_modules/.bin/forge test --match-path 'tests/foundry/invariant/*' "$@"
