"""A long chaos run: producers and a consumer group against a broker whose processes are
killed, restarted and paused at random (tests/chaos/harness.py), then the whole log is
checked against what the producers were told.

    python scripts/chaos.py [--duration SECONDS] [--seed N] [--acks all|1] [--keep]

Starts its own redis-server, PostgreSQL and broker in a temp dir and stops them at the end.
Progress goes to stderr, the summary table to stdout. Exits 1 if an acknowledged record
was lost (with --acks all, the default, also on a duplicate, a reordering or a fatal
producer error), or if the service did not recover from a fault.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.chaos.harness import Settings, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--acks", choices=["all", "1"], default="all")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=float, default=100.0, help="records/s per producer")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = parser.parse_args()
    settings = Settings(
        duration=args.duration,
        seed=args.seed,
        acks=args.acks,
        producers=args.producers,
        partitions=args.partitions,
        rate=args.rate,
    )
    directory = Path(tempfile.mkdtemp(prefix="kafkaesque-chaos-"))
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", file=sys.stderr, flush=True)

    progress(f"seed {settings.seed}, acks={settings.acks}, servers in {directory}")
    # A kill (SIGTERM) unwinds like Ctrl-C, so the servers the run started are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        report = run(directory, settings, progress)
    finally:
        if args.keep:
            progress(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(report.table())
    for traceback in report.tracebacks[:3]:
        print(f"\n{traceback}")
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
