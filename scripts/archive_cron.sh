#!/usr/bin/env bash
# Cron entry point: one archiver pass (closed pages from Redis into PostgreSQL).
# Overlapping runs skip rather than queue up (flock), and the archiver itself locks each
# partition in PostgreSQL, so several hosts may run this too. Example crontab line:
#   * * * * * /path/to/kafkaesque/scripts/archive_cron.sh >> /var/log/kafkaesque-archive.log 2>&1
# Configure with KAFKAESQUE_REDIS_URL and KAFKAESQUE_PG_DSN (or KAFKAESQUE_HOME for the
# embedded servers); cron's environment is minimal, so set them in the crontab.
set -euo pipefail
cd "$(dirname "$0")/.."
# The CLI's data directory (kafkaesque/hot/embedded.py default_home).
data="${XDG_DATA_HOME:-}"
[[ "$data" == /* ]] || data="$HOME/.local/share"
home="${KAFKAESQUE_HOME:-$data/kafkaesque}"
mkdir -p "$home"
exec flock -n "$home/archive-cron.lock" .venv/bin/python -m kafkaesque --home "$home" archive --once
