"""Long Jepsen-style runs: Kafka clients send, poll and commit transactions against the
broker while a nemesis kills, pauses and partitions its servers; each run's history is
checked for lost writes, duplicates, inconsistent offsets, poll skips, nonmonotonic sends
and polls, aborted reads (G1a) and write cycles (G0, G1c). See docs/jepsen.md.

    python scripts/jepsen.py [--topology single|brokers3|sentinel|cluster]
        [--nemesis all|KIND,KIND...] [--seconds 300] [--runs 10] [--seed N] [--out DIR]
    python scripts/jepsen.py --check DIR/history.jsonl      # check a history again

Each run writes history.jsonl, result.json, clients.log and the servers' logs into
DIR/run-N-TOPOLOGY-seedS (DIR: --out, else a new directory under /tmp). Progress and logs
go to stderr, the table of runs to stdout. Exits 1 if a run found an anomaly (or a run
could not complete).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.jepsen import history
from tests.jepsen.checker import KINDS, check, summary
from tests.jepsen.nemesis import FAULTS
from tests.jepsen.runner import RunSettings, run
from tests.jepsen.topology import TOPOLOGIES
from tests.jepsen.workload import WorkloadSettings

SHORT = {
    "lost-write": "lost",
    "duplicate": "dup",
    "inconsistent-offsets": "incons",
    "int-poll-skip": "ipskip",
    "poll-skip": "pskip",
    "int-nonmonotonic-poll": "inmpoll",
    "nonmonotonic-poll": "nmpoll",
    "int-nonmonotonic-send": "inmsend",
    "nonmonotonic-send": "nmsend",
    "G1a": "G1a",
    "G0": "G0",
    "G1c": "G1c",
}


class Progress:
    """One line rewritten in place on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()

    def __call__(self, line: str) -> None:
        text = f"[{time.monotonic() - self.started:7.1f}s] {line}"
        if self.tty:
            print(f"\r\x1b[K{text}", end="", file=sys.stderr, flush=True)
        else:
            print(text, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def table(rows: list[dict]) -> str:
    kinds = "  ".join(f"{SHORT[k]:>7}" for k in KINDS)
    lines = [
        f"{'run':>3}  {'topology':<16}{'seed':>6}  {'ops':>7}  {'acked':>7}  {'faults':>6}  "
        f"{kinds}  {'unseen':>6}  result"
    ]
    for row in rows:
        result = row["result"]
        if result is None:
            lines.append(f"{row['n']:>3}  {row['topology']:<16}{row['seed']:>6}  {row['error']}")
            continue
        counts = "  ".join(f"{result['counts'][k]:>7}" for k in KINDS)
        faults = sum(result["run"]["faults"].values())
        verdict = "valid" if result["valid?"] else "INVALID"
        if result["run"]["problems"]:
            verdict += f" ({len(result['run']['problems'])} problems)"
        lines.append(
            f"{row['n']:>3}  {row['topology']:<16}{row['seed']:>6}  "
            f"{result['stats']['ops']:>7}  {result['stats']['acknowledged-writes']:>7}  "
            f"{faults:>6}  {counts}  {result['counts']['unseen']:>6}  {verdict}"
        )
    faults: dict[str, int] = {}
    for row in rows:
        for kind, n in (row["result"] or {}).get("run", {}).get("faults", {}).items():
            faults[kind] = faults.get(kind, 0) + n
    if faults:
        lines += [
            "",
            "faults injected: " + ", ".join(f"{k} {n}" for k, n in sorted(faults.items())),
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Jepsen-style runs against the broker under faults (docs/jepsen.md)."
    )
    parser.add_argument("--topology", choices=TOPOLOGIES, default="single")
    parser.add_argument(
        "--nemesis",
        default="all",
        help="comma-separated faults, or 'all' (the topology's): "
        + "; ".join(f"{t}: {','.join(k)}" for t, k in FAULTS.items()),
    )
    parser.add_argument("--seconds", type=float, default=300.0, help="of load with faults")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--out", type=Path, help="directory of the runs (default: under /tmp)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--senders", type=int, default=3)
    parser.add_argument("--txn-workers", type=int, default=1)
    parser.add_argument(
        "--gap", default="2,5", help="seconds between faults, MIN,MAX (default 2,5)"
    )
    parser.add_argument(
        "--client-debug",
        default="",
        help="librdkafka debug contexts for the consumers (e.g. fetch), into clients.log",
    )
    parser.add_argument("--allow", default="", help="anomaly kinds that do not fail a run")
    parser.add_argument("--check", type=Path, help="only check this history.jsonl")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    allowed = tuple(k for k in args.allow.split(",") if k)
    if args.check:
        result = check(history.read(args.check), allowed=allowed)
        print(json.dumps(result, indent=1, default=str))
        return 0 if result["valid?"] else 1
    faults = None if args.nemesis == "all" else tuple(args.nemesis.split(","))
    low, high = (float(x) for x in args.gap.split(","))
    gap = (low, high)
    out = args.out or Path(tempfile.mkdtemp(prefix="kafkaesque-jepsen-"))
    out.mkdir(parents=True, exist_ok=True)
    # A kill (SIGTERM) unwinds like Ctrl-C, so the servers a run started are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    progress = Progress()
    rows = []
    for n in range(args.runs):
        seed = args.seed + n
        directory = out / f"run-{n}-{args.topology}-seed{seed}"
        settings = RunSettings(
            topology=args.topology,
            seconds=args.seconds,
            seed=seed,
            faults=faults,
            allowed=allowed,
            gap=gap,
            workload=WorkloadSettings(
                partitions=args.partitions,
                senders=args.senders,
                txn_workers=args.txn_workers,
                client_debug=args.client_debug,
            ),
        )
        row: dict = {"n": n, "topology": args.topology, "seed": seed, "result": None}
        try:
            result = run(directory, settings, progress)
        except Exception as exc:  # one run that could not complete; the others go on
            logging.exception("run %d", n)
            row["error"] = f"could not complete: {exc!r}"[:200]
        else:
            row["result"] = result
            progress(f"run {n} (seed {seed}): {summary(result)}; {directory}")
            progress.done()
            for problem in result["run"]["problems"][:5]:
                print(f"run {n}: {problem}", file=sys.stderr)
        rows.append(row)
    (out / "summary.txt").write_text(table(rows) + "\n")
    print(table(rows))
    print(f"\nruns in {out}")
    return 0 if all(r["result"] and r["result"]["valid?"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
