"""A short chaos run for CI (about 50 s): idempotent acks=all producers and a consumer
group while the broker, redis-server, the archiver and PostgreSQL are killed and restarted
and the broker and redis-server paused past the clients' timeouts (tests/chaos/harness.py):
one round of every fault, in random order, or rounds for ``KAFKAESQUE_CHAOS_DURATION``
seconds. No acknowledged record may be lost, written twice or reordered. scripts/chaos.py
runs the same harness for longer, and with acks=1."""

from __future__ import annotations

import os
from pathlib import Path

from tests.chaos.harness import KINDS, Settings, run

# A fixed seed, so a failure replays with the same faults in the same order (the timing
# of the clients' requests still varies); KAFKAESQUE_CHAOS_SEED tries others.
SEED = int(os.environ.get("KAFKAESQUE_CHAOS_SEED", "1"))
# Seconds of faults beyond the one round of every kind (0: that round alone).
DURATION = float(os.environ.get("KAFKAESQUE_CHAOS_DURATION", "0"))


def test_idempotent_producers_lose_nothing_through_kills_and_pauses(tmp_path: Path) -> None:
    settings = Settings(duration=DURATION, seed=SEED, min_rounds=1)
    report = run(tmp_path, settings, progress=print)
    print(report.table())
    assert report.problems() == [], report.table()
    assert {fault.kind for fault in report.faults} == set(KINDS)
    assert report.acknowledged >= 3000, report.table()
    # The check covers the archive: most of the log was read back from PostgreSQL.
    assert report.from_archive > report.log_records // 2, report.table()
    assert report.tracebacks == [], report.tracebacks[0]
