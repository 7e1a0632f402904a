"""acks=1 and acks=all through a power cut of the embedded Valkey, with their throughput
in the same run (tests/power/power_cut.py simulates the cut: the server runs under an
fsync recorder, is killed, and its AOF is cut back to what its fsyncs covered).

    python scripts/bench/power_cut.py [--seconds 5] [--appendfsync always|everysec]
                                      [--fsync-delay-ms 0]

For each of acks=1 and acks=all (idempotent): a fresh embedded server and broker, a
producer flat out for --seconds, the power cut while records are still in flight, then
the log read back. Prints records/s while producing, acknowledged records and how many
of them the cut lost. --appendfsync everysec sets the server back to what it ran before
(CONFIG SET after start) to show what that lost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.power.power_cut import build_shim, through_a_power_cut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--appendfsync", choices=["always", "everysec"], default="always")
    parser.add_argument("--fsync-delay-ms", type=int, default=0, help="a slower disk")
    args = parser.parse_args()
    setting = None if args.appendfsync == "always" else args.appendfsync  # always: as is
    with tempfile.TemporaryDirectory(prefix="ks-power-") as tmp:
        shim = build_shim(Path(tmp))
        outcomes = {
            acks: through_a_power_cut(
                Path(tmp) / f"acks-{acks}", shim, acks, args.seconds, args.fsync_delay_ms, setting
            )
            for acks in ("1", "all")
        }
    print(
        f"appendfsync {args.appendfsync}, fsync delay {args.fsync_delay_ms} ms "
        f"(cpus: {os.cpu_count()})"
    )
    base = outcomes["1"].rate
    for acks, outcome in outcomes.items():
        name = f"acks={acks}" + (", idempotent" if acks == "all" else "")
        print(
            f"{name + ':':<22}{outcome.rate:>10,.0f} records/s  {outcome.rate / base:.2f} of "
            f"acks=1   {len(outcome.acknowledged):>9,} acknowledged, {len(outcome.lost):,} "
            "lost in the power cut"
        )


if __name__ == "__main__":
    main()
