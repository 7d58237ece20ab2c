#!/usr/bin/env bash
# Schemathesis over every gateway route with 200 examples each (the test suite runs 30), on a
# fresh Anvil ledger, an indexed job story and an IPFS node. Needs the venv `scripts/setup.sh`
# makes. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOO_FUZZ_EXAMPLES="${ZOO_FUZZ_EXAMPLES:-200}" exec .venv/bin/pytest -q tests/gateway/test_openapi.py "$@"
