"""Fuzz the broker's wire protocol for a long run: the strategies of tests/fuzz (requests
generated from kio's schemas, mutated frames, mutated record batches, group members'
sessions) sent to a broker process on a private redis-server, both on free loopback ports
in a temporary directory, with the checks of tests/fuzz/harness.py after every case.

    .venv/bin/python scripts/fuzz.py [--cases N] [--seed S] [--max-rss-mb MB] [--no-archive]

The broker archives to a throwaway PostgreSQL (names reach it), unless --no-archive.
Progress goes to stderr (a bar when it is a terminal), each failure with its case; at the
end one line: cases, failures, internal errors, the size of the broker's log, its peak RSS
per case and its RSS at the end. The exit status is 1 when any case
failed, the broker died, a normal client was not served afterwards or the broker did not
stop cleanly; 130 when interrupted. The cases are drawn in chunks, each from its own seed
derived from --seed, so a run is reproducible.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# The strategies and the harness live with the tests, which are not an installed package.
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The run's servers and Hypothesis' caches (its unicode tables, built as soon as kio is
# imported, here and in the broker) live in a temporary directory, removed at the end.
RUN_DIRECTORY = Path(tempfile.mkdtemp(prefix="kafkaesque-fuzz-"))
atexit.register(shutil.rmtree, RUN_DIRECTORY, ignore_errors=True)  # --help exits early
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(RUN_DIRECTORY / "hypothesis")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from tests.fuzz import harness, strategies  # noqa: E402
from tests.pg import PostgresServer  # noqa: E402
from tests.servers import RedisServer  # noqa: E402
from tests.wire.conftest import Broker  # noqa: E402

CHUNK = 1000  # cases per Hypothesis run: its memory of what it generated stays small
SHOWN_FAILURES = 20  # printed in full; later ones get one line
MB = 1024


class Progress:
    """A bar on a terminal, else a line every ``LINE_EVERY`` seconds."""

    LINE_EVERY = 30.0

    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()
        self.started = self.shown = time.monotonic()

    def update(self, done: int, failures: int, rss_kb: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.shown < (0.2 if self.tty else self.LINE_EVERY):
            return
        self.shown = now
        rate = done / max(now - self.started, 1e-9)
        eta = (self.total - done) / rate if rate else 0
        status = (
            f"{done}/{self.total} cases, {failures} failures, {rate:.0f}/s,"
            f" RSS {rss_kb // MB} MB, ETA {eta / 60:.0f} min"
        )
        if self.tty:
            filled = 30 * done // max(self.total, 1)
            bar = "#" * filled + "." * (30 - filled)
            sys.stderr.write(f"\r[{bar}] {status}\x1b[K" + ("\n" if final else ""))
        else:
            sys.stderr.write(status + "\n")
        sys.stderr.flush()

    def clear(self) -> None:
        """Before printing something else: the bar's line ends."""
        if self.tty:
            sys.stderr.write("\r\x1b[K")


Fuzzed = strategies.Case | strategies.Session


def run_chunk(cases: int, chunk_seed: int, each: Callable[[Fuzzed], None]) -> None:
    """Draw ``cases`` cases from every family and call ``each`` with each one."""

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # no shrinking: failures are counted, the run goes on
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(chunk_seed)
    @given(case=strategies.cases())
    def fuzz(case: Fuzzed) -> None:
        each(case)

    fuzz()


def internal_errors(problems: list[str]) -> int:
    """How many of a case's problems are internal errors: UNKNOWN_SERVER_ERROR in an
    answer, or a connection closed "after an internal error" (logged with a Traceback)."""
    return sum(
        "UNKNOWN_SERVER_ERROR" in p or "internal error" in p or "Traceback" in p for p in problems
    )


def fuzz(
    total: int, seed: int, max_rss_mb: int, directory: Path, archive: bool = True
) -> tuple[int, bool]:
    """Run the cases against a fresh broker: (failures, whether a signal cut the run short)."""
    redis = RedisServer(directory / "redis")
    # Names reach the archive too (DeleteTopics asks it of a topic Redis does not know).
    pg = PostgresServer() if archive else None
    broker = None
    # Why the run stops early. Hypothesis goes on through what a case raises, even a
    # KeyboardInterrupt, so signals only set this and the remaining cases return at once.
    halted: list[str] = []

    def interrupt(signum: int, frame: object) -> None:
        halted.append(f"interrupted by {signal.Signals(signum).name}")

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        dsn = pg.dsn() if pg is not None else None
        broker = Broker(redis.url, directory / "broker", harness.BROKER_ARGS, dsn)
        target = harness.Target(broker, max_rss_mb)
        target.prepare()
        progress = Progress(total)
        failures = internal = 0

        def each(case: Fuzzed) -> None:
            nonlocal failures, internal
            if halted or target.cases >= total:
                return
            problems = target.run(case)
            if halted:  # a Ctrl-C reaches the broker too: its refusals are no failures
                return
            if problems:
                failures += 1
                internal += internal_errors(problems)
                progress.clear()
                if failures <= SHOWN_FAILURES:
                    print(f"case {target.cases}: {case!r}", file=sys.stderr)
                    for problem in problems:
                        print(f"  {problem}", file=sys.stderr)
                else:
                    print(f"case {target.cases}: {problems[0].splitlines()[0]}", file=sys.stderr)
            if not broker.alive():
                failures += 1
                halted.append(f"the broker died; its last words:\n{broker.stderr()[-4000:]}")
            progress.update(target.cases, failures, target.memory()["VmRSS"])

        chunk = 0
        while target.cases < total and not halted:
            run_chunk(min(CHUNK, total - target.cases), seed * 1_000_003 + chunk, each)
            chunk += 1
        progress.update(target.cases, failures, target.memory()["VmRSS"], final=True)
        if halted:
            print(halted[0], file=sys.stderr)
        else:
            try:
                harness.serves_a_client(broker.bootstrap, "after-the-fuzz")
            except (AssertionError, OSError) as exc:
                print(f"a normal client is not served after the fuzz: {exc!r}", file=sys.stderr)
                failures += 1
            for problem in target.health():
                print(problem, file=sys.stderr)
                failures += 1
            if leaked := target.leaked_fds():
                print(f"the broker holds {leaked} descriptors too many", file=sys.stderr)
                failures += 1
        rss_at_end = target.memory()["VmRSS"]
        status = broker.stop()
        if not halted and status not in (0, -signal.SIGTERM):
            print(f"the broker exited with {status} on SIGTERM", file=sys.stderr)
            failures += 1
        for problem in target.log_problems():
            print(f"at shutdown, {problem}", file=sys.stderr)
            failures += 1
        log_bytes = broker.stderr_path.stat().st_size
        print(
            f"{target.cases} cases, {failures} failures, {internal} internal errors,"
            f" broker log {log_bytes / 1e6:.2f} MB, broker peak RSS {target.peak_kb // MB} MB"
            f" per case (bound {max_rss_mb} MB), RSS at the end {rss_at_end // MB} MB"
        )
        return failures, any(why.startswith("interrupted") for why in halted)
    finally:
        if broker is not None:
            broker.stop()
        redis.stop()
        if pg is not None:
            pg.destroy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1_000_000, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    parser.add_argument(
        "--max-rss-mb",
        type=int,
        default=harness.MAX_RSS_MB,
        help="the broker's peak RSS allowed per case (default: %(default)s)",
    )
    parser.add_argument(
        "--no-archive",
        action="store_true",
        help="no PostgreSQL archive beside the broker (faster to start)",
    )
    args = parser.parse_args()
    directory = RUN_DIRECTORY
    try:
        failures, interrupted = fuzz(
            args.cases, args.seed, args.max_rss_mb, directory, not args.no_archive
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 1 if failures else 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
