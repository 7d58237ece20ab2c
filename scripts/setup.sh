#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh machine, and nothing twice: Debian
# packages, the pinned npm toolchain (solc-js, Foundry, OpenZeppelin, viem, esbuild, Swagger UI), the
# web pages' build, and the Python venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

APT_PACKAGES=(ipfs-cid redis-server chromium chromium-driver)
SOLC_VERSION=0.8.28

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# `npm ci` installs exactly the committed lock and never rewrites it: a lock out of step with
# package.json is an error here, not a silent edit of a tracked file. The lock lists every
# platform's optional package (@foundry-rs, esbuild), as `npm install` writes it on any machine;
# only this platform's are downloaded.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: npm ci (package-lock.json)"
  npm ci --no-audit --no-fund --loglevel=error
fi

# The gateway's pages: bundle their scripts (viem) with esbuild and copy Swagger UI for /docs
# when a source is newer than the build. The build is not committed (marketplace/gateway/web/dist/
# is ignored).
web=marketplace/gateway/web
if [ ! -f $web/dist/explorer.js ] || [ ! -f $web/dist/stake.js ] || [ ! -f $web/dist/swagger-ui/swagger-ui-bundle.js ] ||
   [ -n "$(find $web/src $web/build.mjs marketplace/chain/revert_messages.json package.json package-lock.json \
        -newer $web/dist/stake.js -print -quit)" ]; then
  echo "setup: npm run build (the gateway's pages)"
  npm run build --silent
fi

# py-solc-x and ape find compilers by version in SOLCX_BINARY_PATH: point them at the solc-js front.
mkdir -p .solcx
ln -sf ../scripts/solc ".solcx/solc-v$SOLC_VERSION"

[ -x .venv/bin/python ] || python3 -m venv .venv
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$want" ]; then
  echo "setup: pip install (constraints.txt)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -c constraints.txt -e ".[test]"
  echo "$want" > .venv/.installed
fi
