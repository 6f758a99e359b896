#!/usr/bin/env bash
# Set up a fresh machine (Debian/Ubuntu): system packages, a virtual environment in .venv,
# and Zodex. Safe to run again.
#
#   scripts/setup.sh          what running Zodex needs
#   scripts/setup.sh --test   that, plus the test extras, Debian's Chromium (browser tests),
#                             Node.js with npm (Liveboard's linter), systemd-analyze (Sprite's unit)
#                             and haproxy (the deployment walk-through)
set -euo pipefail
cd "$(dirname "$0")/.."

for_tests=false
case "${1:-}" in
    "") ;;
    --test) for_tests=true ;;
    *) echo "usage: scripts/setup.sh [--test]" >&2; exit 2 ;;
esac

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v git >/dev/null || need_apt+=(git)
if $for_tests; then
    # Browser tests drive Debian's headless Chromium (Playwright never downloads a browser here).
    [ -x /usr/bin/chromium ] || need_apt+=(chromium)
    command -v npm >/dev/null || need_apt+=(nodejs npm)
    # Sprite's tests check the generated unit with systemd-analyze verify; runuser switches accounts.
    command -v systemd-analyze >/dev/null || need_apt+=(systemd)
    command -v runuser >/dev/null || need_apt+=(util-linux)
    # The deployment walk-through puts Debian's haproxy in front of two gateways (docs/deploy.md).
    command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
    # The screen tests compare with tmux as the reference terminal and drive vim, less and dialog.
    for program in tmux vim less dialog; do
        command -v "$program" >/dev/null || need_apt+=("$program")
    done
fi
if ((${#need_apt[@]})) && command -v apt-get >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    # Wait for another apt or dpkg run (an unattended upgrade) instead of failing at once.
    wait_lock=(-o DPkg::Lock::Timeout=300)
    $SUDO apt-get "${wait_lock[@]}" update -qq
    $SUDO apt-get "${wait_lock[@]}" install -y -qq "${need_apt[@]}"
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Zodex needs Python 3.11 or newer, found {sys.version.split()[0]}")
PY

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if $for_tests; then
    .venv/bin/python -m pip install -q -e ".[test]"
else
    .venv/bin/python -m pip install -q -e .
fi
echo "zodex is installed in .venv: $(.venv/bin/zodex-gateway --version)"
# A path that runs as printed: zodex is not on PATH (docs/modes.md#printed-commands).
printf 'Start Zodex Local: %q local start\n' "$PWD/.venv/bin/zodex"
