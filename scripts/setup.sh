#!/usr/bin/env bash
# Set up what kafkaesque needs on a fresh Debian machine with Python 3.11:
# a virtualenv in .venv with the project installed. With --spark: also the [spark] extra, the
# PostgreSQL JDBC driver and a JVM (Debian packages) for `kafkaesque spark`. With --test:
# everything --spark brings, the test extras, the system packages the tests use (the word
# list, kcat, Node.js) and kafkajs for the wire tests (npm).
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_spark=0
case "${1:-}" in
  --test) want_test=1; want_spark=1 ;;
  --spark) want_spark=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--test | --spark]" >&2; exit 2 ;;
esac

apt_packages=()
if (( want_test )); then
  [[ -f /usr/share/dict/words ]] || apt_packages+=(wamerican)
  command -v kcat >/dev/null || apt_packages+=(kcat)
  command -v npm >/dev/null || apt_packages+=(nodejs npm)  # kafkajs for the wire tests
fi
if (( want_spark )); then
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
# The install is editable, so code changes need no reinstall: skip pip when this mode was
# installed from the same setup.cfg and pyproject.toml (later runs start at once).
mode=base
(( want_spark )) && mode=spark
(( want_test )) && mode=test
stamp=".venv/.installed-$mode"
digest=$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]]; then
  .venv/bin/python -m pip install -q --upgrade pip >&2
  case $mode in
    test) .venv/bin/python -m pip install -q -e '.[test]' >&2 ;;
    spark) .venv/bin/python -m pip install -q -e '.[spark]' >&2 ;;
    base) .venv/bin/python -m pip install -q -e . >&2 ;;
  esac
  echo "$digest" >"$stamp"
fi
if (( want_test )); then
  if [[ -f tests/wire/js/package-lock.json ]]; then
    npm ci --prefix tests/wire/js --no-audit --no-fund --loglevel=error >&2
  else
    npm install --prefix tests/wire/js --no-audit --no-fund --loglevel=error >&2
  fi
fi
