"""The archiver and cold reads against raw asyncpg, on private servers.

Starts its own redis-server (kafkaesque.hot.embedded.EmbeddedRedis) and PostgreSQL
(storage_pg.EmbeddedPostgres) in a temp dir. Per round: appends N records of 100 bytes to
one partition through Log.append in 1000-record batches, archives them with one
Archiver.run_once, and COPYs the same rows (built beforehand, untimed) into an identical
table with a raw asyncpg copy_records_to_table in one transaction; then reads the archive
back through ArchiveReader.read with 1 MiB fetches. Prints the best round of each.

    python scripts/bench/archive.py [--records N] [--rounds R]

Goals: archiver rows/s >= 0.95 x raw COPY (0.7 before runs of records were parsed by
strided slices, storage_pg/row_runs.py); cold fetch >= 150,000 records/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import asyncpg
import redis.asyncio
from broker_process import FAST_CONSUMER, consume, running_broker

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.embedded import EmbeddedRedis
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import read_header
from kafkaesque.records.build import build_batch
from storage_pg import Archiver, ArchiveReader, EmbeddedPostgres, create_pool, ensure_schema
from storage_pg.rows import COLUMNS, batch_rows

BATCH = 1000
VALUE_SIZE = 100
FETCH_BYTES = 1 << 20


async def append(log: Log, topic: str, records: int) -> tuple[float, list[bytes]]:
    """Append ``records`` values through Log.append; return the seconds taken and the batches
    as stored (read back, for the baseline's rows)."""
    # Max pages 1: once archived, Redis drops the pages, so later reads are cold.
    await log.create_topic(TopicConfig(topic, 1, max_pages=1))
    values = [os.urandom(VALUE_SIZE) for _ in range(BATCH)]
    batches = [
        build_batch(values, timestamp=1_700_000_000_000 + i) for i in range(records // BATCH)
    ]
    started = time.perf_counter()
    for b in batches:
        await log.append(topic, 0, [b])
    return time.perf_counter() - started, batches


async def raw_copy(pool: asyncpg.Pool, topic: str, batches: list[bytes], first_id: int) -> float:
    """The baseline: the archiver's rows, built beforehand, in one binary COPY."""
    rows: list[tuple] = []
    offset = 0
    for b in batches:
        _, batch_rows_ = batch_rows(b, first_id + offset, topic, 0)
        rows += [(*r[:3], r[3] + offset, *r[4:]) for r in batch_rows_]
        offset += read_header(b).record_count
    async with pool.acquire() as conn:
        await conn.execute("TRUNCATE record_copy")
        started = time.perf_counter()
        async with conn.transaction():
            await conn.copy_records_to_table("record_copy", records=rows, columns=COLUMNS)
        return time.perf_counter() - started


async def cold_fetch(pool: asyncpg.Pool, topic: str, records: int) -> float:
    reader = ArchiveReader(pool)
    offset, fetched = 0, 0
    started = time.perf_counter()
    while offset < records:
        batches = await reader.read(topic, 0, offset, FETCH_BYTES)
        last = read_header(batches[-1])
        fetched += sum(read_header(b).record_count for b in batches)
        offset = last.base_offset + last.record_count
    seconds = time.perf_counter() - started
    assert fetched == records, (fetched, records)
    return seconds


async def bench(redis_url: str, dsn: str, records: int, rounds: int) -> None:
    log = Log(redis.asyncio.Redis.from_url(redis_url))
    pool = await create_pool(dsn, max_size=4)
    await ensure_schema(pool)
    await log.enable_archiving()  # max pages waits for the archiver
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE record_copy (LIKE record INCLUDING ALL)")
    best = {"append": 1e9, "archive": 1e9, "copy": 1e9, "cold": 1e9}
    pages = 0
    for r in range(rounds):
        topic = f"bench{r}"
        first_id = await log.sequence_counter() + 1
        append_s, batches = await append(log, topic, records)
        copy_s = await raw_copy(pool, topic, batches, first_id)
        summary = await Archiver(log, pool, idle_close_ms=0).run_once()
        assert summary.rows == records, summary
        cold_s = await cold_fetch(pool, topic, records)
        pages = summary.pages
        print(
            f"round {r + 1}: append {records / append_s:,.0f}/s  archive "
            f"{records / summary.seconds:,.0f}/s  raw COPY {records / copy_s:,.0f}/s  "
            f"cold fetch {records / cold_s:,.0f}/s",
            flush=True,
        )
        for key, seconds in (
            ("append", append_s),
            ("archive", summary.seconds),
            ("copy", copy_s),
            ("cold", cold_s),
        ):
            best[key] = min(best[key], seconds)
        if r + 1 < rounds:
            await log.delete_topic(topic)
        async with pool.acquire() as conn:
            await conn.execute("CHECKPOINT")  # start each round with no dirty buffers
    print()
    print(f"{records:,} records of {VALUE_SIZE} bytes, {BATCH} per batch, {pages} pages;")
    print(f"best of {rounds} rounds")
    print(f"  append (Log.append)            {records / best['append']:>12,.0f} records/s")
    print(f"  archive (Archiver.run_once)    {records / best['archive']:>12,.0f} rows/s")
    print(f"  raw asyncpg binary COPY        {records / best['copy']:>12,.0f} rows/s")
    print(
        f"  ratio archiver / raw COPY      {best['copy'] / best['archive']:>12.2f}   (goal >= 0.95)"
    )
    print(
        f"  cold fetch (ArchiveReader.read, 1 MiB) {records / best['cold']:>10,.0f} records/s"
        "   (goal >= 150,000)"
    )
    state = await log.state(topic, 0)
    await pool.close()
    await log.redis.aclose()
    # The last round's topic through the front end: a confluent-kafka consumer from offset 0,
    # all but the newest page read from the archive.
    with running_broker(redis_url, dsn) as bootstrap:
        seconds = await asyncio.to_thread(consume, bootstrap, topic, records, FAST_CONSUMER)
    print(
        f"  cold fetch through the broker    {records / seconds:>10,.0f} records/s"
        f"   (goal >= 150,000; confluent-kafka from offset 0, {state.log_start:,} of the"
        " records only in the archive)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafkaesque-bench-") as tmp:
        home = Path(tmp)
        home.chmod(0o755)  # as root, PostgreSQL's user must reach its data directory
        redis_server = EmbeddedRedis(home / "redis")
        pg = EmbeddedPostgres(home / "pg")
        try:
            started = time.perf_counter()
            dsn = pg.ensure_started()
            print(f"PostgreSQL started in {time.perf_counter() - started:.2f}s (initdb + start)")
            asyncio.run(bench(redis_server.ensure_started(), dsn, args.records, args.rounds))
        finally:
            pg.stop()
            redis_server.stop()


if __name__ == "__main__":
    main()
