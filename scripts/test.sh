#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, type-check and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest -q "$@"
