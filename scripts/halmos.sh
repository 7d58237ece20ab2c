#!/usr/bin/env bash
# Symbolic proofs of the ledger's settlement arithmetic (tests/foundry/halmos), for every input.
# halmos lives in its own venv: it pins rich and z3 versions the project's venv does not use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

want=$(sha256sum constraints-halmos.txt | cut -d' ' -f1)
if [ "$(cat .venv-halmos/.installed 2>/dev/null)" != "$want" ]; then
  echo "halmos: pip install (constraints-halmos.txt)"
  [ -x .venv-halmos/bin/python ] || python3 -m venv .venv-halmos
  .venv-halmos/bin/pip install -q -c constraints-halmos.txt halmos
  echo "$want" > .venv-halmos/.installed
fi

# halmos calls a bare `forge build`; the ci profile's build (out-ci/, the one scripts/test.sh's
# Forge tests made) holds the AST and storage layouts it reads, so it compiles nothing again.
export PATH="$PWD/node_modules/.bin:$PATH" FOUNDRY_PROFILE=ci
exec .venv-halmos/bin/halmos --forge-build-out out-ci --match-contract 'Proofs$' "$@"
