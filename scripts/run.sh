#!/usr/bin/env bash
# Set up kafkaesque and run it on the embedded default (a private redis-server under
# ./.kafkaesque). With arguments, runs that CLI command; without, a demo round trip:
# create a topic, produce the given file (default /usr/share/dict/words), consume it back.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ks=(.venv/bin/python -m kafkaesque)
if (( $# )); then
  exec "${ks[@]}" "$@"
fi
input=${KAFKAESQUE_DEMO_FILE:-/usr/share/dict/words}
[[ -f "$input" ]] || { input=$(mktemp); seq 1 100000 > "$input"; }
topic=demo-$(date +%s)
"${ks[@]}" create "$topic" --page-size 4096
"${ks[@]}" produce --batch-size 1024 "$topic" "$input"
"${ks[@]}" consume --fetch-size 512 "$topic" > .kafkaesque/demo.out
if cmp -s "$input" .kafkaesque/demo.out; then
  echo "round trip OK: $(wc -l < .kafkaesque/demo.out) records of $input came back byte for byte" >&2
else
  echo "round trip FAILED: see .kafkaesque/demo.out" >&2
  exit 1
fi
