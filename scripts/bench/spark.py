"""The Spark job's archive read against a plain Spark JDBC scan of the same table.

Starts a private PostgreSQL (storage_pg.EmbeddedPostgres) in a temp dir, COPYs N records
(ids 1..N over 4 topics, 8-byte keys, 100-byte values; untimed, then VACUUM ANALYZE) into a
fresh archive with the watermark at N, and starts one local Spark session (the job's own
set-up: local[*], the JDBC driver jar). Per round, in alternating order, a full pass (every
column of every row, into Spark's "noop" sink) over:

- job:   what export and report read: the watermark and the cut's bounds (one query), then
         the record table split by id ranges over numPartitions JDBC connections;
- plain: spark.read.jdbc(url, "record") with no options (one partition, pgjdbc defaults).

Prints the best round of each and the ratio job / plain (goal >= 0.9), then one timed
export of the N records to Parquet (read + sort + write + commit) for scale.

    python scripts/bench/spark.py [--records N] [--rounds R] [--master URL]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout, not installed

from storage_pg import EmbeddedPostgres, ensure_schema
from storage_pg import spark as job
from storage_pg.rows import COLUMNS as ROW_COLUMNS

TOPICS = ("orders", "payments", "clicks", "logs")
COLUMNS = (*ROW_COLUMNS, "archived_at")  # archived_at: set by the archiver


async def load(dsn: str, n: int) -> float:
    """Fill a fresh archive with n records; return the seconds the COPY took."""
    base = datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)
    value = bytes(range(100))
    conn = await asyncpg.connect(dsn)
    try:
        await ensure_schema(conn)
        started = time.perf_counter()
        chunk = 100_000
        for first in range(1, n + 1, chunk):
            rows = []
            for i in range(first, min(first + chunk, n + 1)):
                ts = base + datetime.timedelta(milliseconds=i * 7)
                topic = TOPICS[i % len(TOPICS)]
                rows.append(
                    (
                        i,
                        topic,
                        i % 3,
                        i // 12,  # unique per (topic, partition): i determines both
                        ts,
                        b"key-%04d" % (i % 5000),
                        value,
                        "[]",
                        1000 + i % 7,
                        0,
                        i,
                        ts + datetime.timedelta(milliseconds=250 + i % 1000),
                    )
                )
            await conn.copy_records_to_table("record", records=rows, columns=COLUMNS)
        copy_s = time.perf_counter() - started
        await conn.execute("VACUUM ANALYZE record")
        await conn.execute("UPDATE archive_watermark SET id = $1", n)
        return copy_s
    finally:
        await conn.close()


def job_pass(spark, target: job.JdbcTarget) -> int:
    """The job's read, start to end: cut query, partitioned scan, a full pass."""
    cut = job.archive_cut(spark, target, 0)
    df = job.read_cut(spark, target, cut)
    df.write.format("noop").mode("overwrite").save()
    return cut.last - cut.first + 1


def plain_pass(spark, target: job.JdbcTarget) -> None:
    props = {k: v for k, v in target.properties.items() if k in ("user", "password", "driver")}
    df = spark.read.jdbc(target.url, "record", properties=props)
    df.write.format("noop").mode("overwrite").save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    n = args.records

    with tempfile.TemporaryDirectory(prefix="kafkaesque-bench-") as tmp:
        home = Path(tmp)
        home.chmod(0o755)  # as root, PostgreSQL's user must reach its data directory
        pg = EmbeddedPostgres(home / "pg")
        try:
            dsn = pg.ensure_started()
            copy_s = asyncio.run(load(dsn, n))
            print(f"{n:,} records archived (COPY {n / copy_s:,.0f} rows/s), watermark {n:,}")
            started = time.perf_counter()
            spark = job.spark_session(
                args.master, "kafkaesque bench", {"spark.driver.memory": "4g"}
            )
            print(
                f"Spark {spark.version} on {args.master} "
                f"({spark.sparkContext.defaultParallelism} cores), "
                f"started in {time.perf_counter() - started:.1f}s"
            )
            target = job.jdbc_target(dsn)
            cut = job.archive_cut(spark, target, 0)
            print(f"job read: {job.jdbc_partitions(spark, cut)} JDBC partitions by id")
            job_pass(spark, target)  # warm-up: JIT, class loading, PostgreSQL's cache
            plain_pass(spark, target)
            best = {"job": float("inf"), "plain": float("inf")}
            for r in range(args.rounds):
                order = ("job", "plain") if r % 2 == 0 else ("plain", "job")
                for name in order:
                    t0 = time.perf_counter()
                    if name == "job":
                        assert job_pass(spark, target) == n
                    else:
                        plain_pass(spark, target)
                    best[name] = min(best[name], time.perf_counter() - t0)
            job_rate, plain_rate = n / best["job"], n / best["plain"]
            print(f"job read    {job_rate:12,.0f} rows/s  ({best['job']:.2f}s)")
            print(f"plain scan  {plain_rate:12,.0f} rows/s  ({best['plain']:.2f}s)")
            print(f"ratio {job_rate / plain_rate:.2f}  (goal >= 0.9)")

            out = home / "export"
            summary = job.export(dsn, str(out), spark=spark)
            assert summary.rows == n
            size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
            print(
                f"export to Parquet: {n / summary.seconds:,.0f} rows/s "
                f"({summary.seconds:.2f}s, {size / 2**20:,.1f} MiB)"
            )
            spark.stop()
        finally:
            pg.stop()


if __name__ == "__main__":
    main()
