#!/usr/bin/env bash
# Set up and run the tests: lint, format check, type check (mypy.ini), then pytest with
# real servers.
#   scripts/test.sh [PYTEST ARGS]           the whole suite (CI's, the README's)
#   scripts/test.sh --quick [PYTEST ARGS]   the lane to run before each commit: the unit
#                                           tests and one real-client smoke test per area
# Tests run in KAFKAESQUE_TEST_WORKERS pytest-xdist worker processes (default 4: many tests
# wait on servers, not the CPU), a test module per worker at a time, the longest modules
# first (tests/scheduling.py); KAFKAESQUE_TEST_WORKERS=0 runs them one at a time in pytest's
# own process.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=()
if [[ "${1:-}" == "--quick" ]]; then
  shift
  quick=(
    tests/test_*.py tests/jepsen/test_checker.py
    tests/wire/test_api_versions.py tests/wire/test_fast_responses.py
    tests/wire/test_fetch_request.py tests/wire/test_produce_request.py
    tests/wire/test_confluent.py tests/wire/test_kafka_python.py
    tests/storage/test_rows.py tests/storage/test_key_layout.py
    tests/spark/test_source_units.py
  )
fi
scripts/setup.sh --test
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
# Bytecode caches on (__pycache__, git-ignored): else every worker rewrites every test
# module's asserts again, and every broker and CLI process the tests start compiles the
# modules changed since their last cache.
unset PYTHONDONTWRITEBYTECODE
workers=${KAFKAESQUE_TEST_WORKERS:-4}
parallel=()
if [[ "$workers" != 0 ]]; then
  parallel=(-n "$workers" --dist loadfile)
fi
exec .venv/bin/python -m pytest "${parallel[@]}" "${quick[@]}" "$@"
