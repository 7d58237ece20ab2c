#!/usr/bin/env bash
# The demo: set up, start the devnet (Anvil, the ledger, IPFS, Redis, a verifier and three
# provider nodes), train the tiny GPT as a marketplace job, print the settlement, stop the devnet.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
zoo=.venv/bin/zoo-compute

$zoo devnet up
trap '$zoo devnet down' EXIT
$zoo train --config node/specs/tiny.yaml --max-budget 5000 --output weights/demo.pt
