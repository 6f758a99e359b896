#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, type-check and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Liveboard's JavaScript and CSS: Biome at the version package-lock.json pins, in a
# git-ignored node_modules. Only the tests need Node; Zodex itself does not.
if ! command -v npm >/dev/null && command -v apt-get >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq nodejs npm
fi
command -v npm >/dev/null || { echo "scripts/test.sh: npm is needed to lint Liveboard; install Node.js (18 or newer)" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error \
    || { echo "scripts/test.sh: npm ci could not install Biome from package-lock.json (is the npm registry reachable?)" >&2; exit 1; }
node_modules/.bin/biome ci --error-on-warnings zodex_gateway/viewers/liveboard/static
.venv/bin/pytest -q "$@"
