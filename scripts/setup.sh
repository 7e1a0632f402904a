#!/usr/bin/env bash
# Set up what kafkaesque needs on a fresh Debian machine with Python 3.11:
# a virtualenv in .venv with the project installed (with the test extras when given --test),
# and, for the tests, the system packages they use (the word list, kcat, the PostgreSQL JDBC
# driver and a JVM for Spark) and kafkajs for
# the wire tests (npm, when Node.js is there).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

apt_packages=()
if (( want_test )); then
  [[ -f /usr/share/dict/words ]] || apt_packages+=(wamerican)
  command -v kcat >/dev/null || apt_packages+=(kcat)
  # the Spark job's JDBC driver, and a JVM for Spark when the machine has none
  [[ -f /usr/share/java/postgresql.jar ]] || apt_packages+=(libpostgresql-jdbc-java)
  command -v java >/dev/null || apt_packages+=(default-jre-headless)
fi
if (( ${#apt_packages[@]} )); then
  echo "installing system packages: ${apt_packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${apt_packages[@]}" >&2
fi

python=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >&2
if (( want_test )); then
  .venv/bin/python -m pip install -q -e '.[test]' >&2
  if command -v node >/dev/null && command -v npm >/dev/null; then
    if [[ -f tests/wire/js/package-lock.json ]]; then
      npm ci --prefix tests/wire/js --no-audit --no-fund --loglevel=error >&2
    else
      npm install --prefix tests/wire/js --no-audit --no-fund --loglevel=error >&2
    fi
  fi
else
  .venv/bin/python -m pip install -q -e . >&2
fi
