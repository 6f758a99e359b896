#!/usr/bin/env bash
# Set up a fresh machine: system packages (Debian/Ubuntu), a virtual environment in .venv,
# and Zodex with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v git >/dev/null || need_apt+=(git)
# Browser tests drive Debian's headless Chromium (Playwright never downloads a browser here).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if ((${#need_apt[@]})) && command -v apt-get >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Zodex needs Python 3.11 or newer, found {sys.version.split()[0]}")
PY

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
echo "zodex is installed in .venv: $(.venv/bin/zodex-gateway --version)"
