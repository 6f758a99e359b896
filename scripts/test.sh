#!/usr/bin/env bash
# Set up for the tests (scripts/setup.sh --test), then lint, type-check and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Liveboard's JavaScript and CSS: Biome at the version package-lock.json pins, in a
# git-ignored node_modules. Only the tests need Node (setup.sh --test installs it).
command -v npm >/dev/null || { echo "scripts/test.sh: npm is needed to lint Liveboard; install Node.js (18 or newer)" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error \
    || { echo "scripts/test.sh: npm ci could not install Biome from package-lock.json (is the npm registry reachable?)" >&2; exit 1; }
node_modules/.bin/biome ci --error-on-warnings zodex_gateway/viewers/liveboard/static
# MCP clients nobody here wrote (Inspector on Node 22, Claude Code), run by tests/outside_clients:
# pinned by its package-lock.json, installed once into the git-ignored .cache/outside-clients/.
# Status 3 is "npm unreachable": those tests then skip and say so; any other failure stops here.
./scripts/outside_clients.sh || [ $? -eq 3 ]
# The unit tier first (a few minutes), stopping there on a failure; then the end-to-end tier.
# With arguments, just those.
if [ $# -gt 0 ]; then
    exec .venv/bin/pytest -q "$@"
fi
.venv/bin/pytest -q -m "not e2e"
# The end-to-end tier in two streams side by side, of about equal length: tests/integration,
# outside_clients and deploy; and the rest (local, sprite, fleet). Its tests mostly wait on
# processes they started (one stream keeps two cores about half busy), every test makes its
# own directories, accounts and namespaces, and each must pass on a loaded machine anyway.
# The second stream's output follows the first's.
first=(tests/integration tests/outside_clients tests/deploy)
rest_log=$(mktemp)
.venv/bin/pytest -q -m e2e "${first[@]/#/--ignore=}" >"$rest_log" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null || true; rm -f "$rest_log"' EXIT
status=0
.venv/bin/pytest -q -m e2e "${first[@]}" || status=$?
rest_status=0
wait "$rest" || rest_status=$?
echo "--- the rest of the end-to-end tier (local, sprite, fleet), run beside it:"
cat "$rest_log"
[ "$status" -eq 0 ] || exit "$status"
exit "$rest_status"
