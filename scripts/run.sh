#!/usr/bin/env bash
# Set up kafkaesque and run it on the embedded default (a private Valkey server and
# PostgreSQL in the CLI's data directory: $KAFKAESQUE_HOME, else $XDG_DATA_HOME/kafkaesque,
# else ~/.local/share/kafkaesque, whatever the current directory). Without arguments: the
# Kafka broker on 127.0.0.1:9092 until Ctrl-C (or SIGTERM), which then stops the embedded
# servers too (their data stays there for the next start), with its web console on
# 127.0.0.1:8080 (the address is printed). With arguments: that CLI command
# (scripts/run.sh topics, scripts/run.sh consume words, scripts/run.sh stop, ...); `spark`
# commands also get the [spark] extra, the JDBC driver and a JVM set up.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "spark" ]]; then
  scripts/setup.sh --spark
else
  scripts/setup.sh
fi
if (( $# )); then
  exec .venv/bin/python -m kafkaesque "$@"
fi
# The broker runs as a child so that this script outlives it: Ctrl-C reaches both (one
# process group), SIGTERM to this script is passed on; either way the broker answers what
# is in flight and exits, then the servers stop (unless another broker still uses them:
# `stop` refuses then, and says so).
# Its Prometheus metrics on a local port (KAFKAESQUE_METRICS to choose another).
export KAFKAESQUE_METRICS=${KAFKAESQUE_METRICS:-127.0.0.1:9308}
echo "metrics: http://$KAFKAESQUE_METRICS/metrics" >&2
# The web console (read-only) on a local port (KAFKAESQUE_CONSOLE to choose another;
# `scripts/run.sh console --admin --listen 127.0.0.1:8081` runs one that makes changes).
export KAFKAESQUE_CONSOLE=${KAFKAESQUE_CONSOLE:-127.0.0.1:8080}
echo "console: http://$KAFKAESQUE_CONSOLE/" >&2
.venv/bin/python -m kafkaesque serve &
broker=$!
trap 'kill -TERM "$broker" 2>/dev/null || true' INT TERM
status=0
while kill -0 "$broker" 2>/dev/null; do
  wait "$broker" && status=0 || status=$?  # a trapped signal ends the wait early
done
trap - INT TERM
.venv/bin/python -m kafkaesque stop || true
exit "$status"
