#!/usr/bin/env bash
# Set up and run the whole test suite: lint, format check, then pytest with real servers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
.venv/bin/ruff format --check .
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
