"""What transactions cost the log: a transactional producer's appends, a marker ending every
N batches, against an idempotent producer's (the baseline: the same sequence checks; same
run, same server), and READ_COMMITTED reads against READ_UNCOMMITTED ones over the same
records.

Each batch holds 100 records of 100 bytes, appended one per call (Log.append), as a
client's produce request for one partition does. Prints each figure and its ratio to
the baseline.

    python scripts/bench/transactions_log.py [--batches N] [--per-txn N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis_servers import add_server_option, running_server

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import open_log
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import next_offset
from kafkaesque.records.build import build_batch

VALUES = [b"v" * 100] * 100
PID = 4242


async def appends(log: Log, batches: int, per_txn: int, rounds: int = 10) -> tuple[float, float]:
    """Seconds to append ``batches`` batches of an idempotent producer to topic "plain"
    and as many of a transactional one to "txn" (a marker every ``per_txn``), in
    alternating rounds so both see the same machine load."""
    await log.create_topic(TopicConfig("plain", 1, page_size=10_000))
    await log.create_topic(TopicConfig("txn", 1, page_size=10_000))
    times = [0.0, 0.0]
    per_round = batches // rounds
    for r in range(rounds):
        first = r * per_round
        # Both idempotent (the same sequence checks); built before the clock starts.
        plain, built = (
            [
                build_batch(
                    VALUES,
                    producer_id=PID + txn,
                    producer_epoch=0,
                    base_sequence=i * 100,
                    transactional=bool(txn),
                )
                for i in range(first, first + per_round)
            ]
            for txn in (0, 1)
        )
        started = time.perf_counter()
        for batch in plain:
            await log.append("plain", 0, [batch])
        times[0] += time.perf_counter() - started
        started = time.perf_counter()
        for i, batch in enumerate(built, first):
            await log.append("txn", 0, [batch])
            if (i + 1) % per_txn == 0:
                await log.end_transaction("txn", 0, PID + 1, 0, commit=(i // per_txn) % 2 == 0)
        times[1] += time.perf_counter() - started
    return times[0], times[1]


async def reads(log: Log, topic: str, committed: bool) -> float:
    """Seconds to read the whole partition in reads of up to 1 MiB."""
    end = (await log.state(topic, 0)).log_end
    started = time.perf_counter()
    offset = 0
    while offset < end:
        result = await log.read(topic, 0, offset, committed=committed)
        if not result.batches:
            break
        offset = next_offset(result.batches[-1])
    return time.perf_counter() - started


async def bench(url: str, batches: int, per_txn: int) -> None:
    log = open_log(url)
    await log.ensure_recovered()
    batches -= batches % 10
    records = batches * 100
    base, txn = await appends(log, batches, per_txn)
    print(f"idempotent appends:    {records / base:,.0f} records/s (baseline)")
    print(
        f"transactional appends: {records / txn:,.0f} records/s, "
        f"{txn / base:.2f}x the baseline's time "
        f"(a marker every {per_txn} batches, half of them aborts)"
    )
    uncommitted = await reads(log, "txn", committed=False)
    committed = await reads(log, "txn", committed=True)
    print(f"read_uncommitted reads: {records / uncommitted:,.0f} records/s (baseline)")
    print(
        f"read_committed reads:   {records / committed:,.0f} records/s, "
        f"{committed / uncommitted:.2f}x the baseline's time"
    )
    await log.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=5_000)
    parser.add_argument("--per-txn", type=int, default=10)
    add_server_option(parser)
    args = parser.parse_args()
    with running_server(args.server, "txn-bench-") as url:
        asyncio.run(bench(url, args.batches, args.per_txn))


if __name__ == "__main__":
    main()
