#!/usr/bin/env bash
# Set up what kafkaesque needs on a fresh Debian machine with Python 3.11:
# a virtualenv in .venv with the project installed, and what the README's quick start uses
# when it is missing (Debian's kcat and wamerican, the word list /usr/share/dict/words).
# With --spark: also the [spark] extra, the PostgreSQL JDBC driver and a JVM (Debian
# packages) for `kafkaesque spark`. With --test: everything --spark brings, the test extras,
# Node.js and kafkajs for the wire tests (npm), openssl for the TLS tests' certificates,
# chromium and chromium-driver for the web console's browser tests.
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
# the quick start's Kafka client and word list (the tests use them too)
[[ -f /usr/share/dict/words ]] || apt_packages+=(wamerican)
command -v kcat >/dev/null || apt_packages+=(kcat)
if (( want_test )); then
  command -v npm >/dev/null || apt_packages+=(nodejs npm)  # kafkajs for the wire tests
  command -v openssl >/dev/null || apt_packages+=(openssl)  # the TLS tests' certificates
  # the web console's tests run in a real headless browser, driven by its driver
  command -v chromium >/dev/null || apt_packages+=(chromium)
  command -v chromedriver >/dev/null || apt_packages+=(chromium-driver)
fi
if (( want_spark )); then
  # the Spark job's JDBC driver, and a JVM for Spark when the machine has none
  [[ -f /usr/share/java/postgresql.jar ]] || apt_packages+=(libpostgresql-jdbc-java)
  command -v java >/dev/null || apt_packages+=(default-jre-headless)
fi
if (( ${#apt_packages[@]} )); then
  if (( EUID == 0 )) && command -v apt-get >/dev/null; then
    echo "installing system packages: ${apt_packages[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${apt_packages[@]}" >&2
  elif (( want_test || want_spark )); then
    echo "missing system packages: ${apt_packages[*]} (sudo apt-get install ${apt_packages[*]})" >&2
    exit 1
  else  # the broker and the CLI work without them; the quick start's examples do not
    echo "note: the quick start's examples use Debian's ${apt_packages[*]}, not installed" \
      "(sudo apt-get install ${apt_packages[*]})" >&2
  fi
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
  # UserWarning off: setuptools' "Editable installation" banner, which pip -q still shows
  export PYTHONWARNINGS=ignore::UserWarning
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
