#!/usr/bin/env bash
# Set up kafkaesque and run it on the embedded default (a private redis-server under
# ./.kafkaesque). Without arguments: the Kafka broker on 127.0.0.1:9092. With arguments:
# that CLI command (scripts/run.sh topics, scripts/run.sh consume words, ...); `spark`
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
exec .venv/bin/python -m kafkaesque serve
