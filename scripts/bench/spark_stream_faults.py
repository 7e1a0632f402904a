"""Exactly-once under faults: a streaming query from a 3-partition topic to Parquet with a
checkpoint, while producers write, the archiver runs and retention drops archived pages,
and the Spark driver is SIGKILLed (with its JVM and workers: the whole process group)
and restarted; the output must hold every record once by (topic, partition, offset).

Each kill lands while a micro-batch is planned (its offsets are in the checkpoint) but
not committed, so the restarted driver replays that batch from the checkpoint's ranges.
Servers: private embedded Redis and PostgreSQL in a temporary data directory, unless
--redis-url and --pg-dsn are given. The output is read back as Spark's file sink commits
it (the files its _spark_metadata log lists; a killed batch's files are not).

    python scripts/bench/spark_stream_faults.py [--records 300000] [--kills 3]
    python scripts/bench/spark_stream_faults.py driver --redis-url U --pg-dsn D --topic T \\
        --out DIR   (one driver: runs the query until killed or --available-now ends it)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout, not installed

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import open_log
from kafkaesque.records.build import build_batch
from storage_pg.tiered import Archive, attach

PARTITIONS = 3
PRODUCED = [0]  # records produced so far (the producer thread writes, the kills print)


def stream_query(spark: Any, args: argparse.Namespace, available_now: bool = False) -> Any:
    """The query under test: topic -> Parquet (topic, partition, offset, value)."""
    from storage_pg.spark.source import register

    register(spark)
    reader = spark.readStream.format("kafkaesque").options(
        redisUrl=args.redis_url,
        pgDsn=args.pg_dsn,
        subscribe=args.topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=str(args.per_trigger),
    )
    writer = (
        reader.load()
        .select("topic", "partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(Path(args.out) / "data"))
        .option("checkpointLocation", str(Path(args.out) / "checkpoint"))
    )
    trigger = {"availableNow": True} if available_now else {"processingTime": "1 second"}
    return writer.trigger(**trigger).start()


def driver(args: argparse.Namespace) -> None:
    from storage_pg.spark.session import spark_session

    spark = spark_session("local[2]", "kafkaesque stream faults")
    query = stream_query(spark, args, available_now=args.available_now)
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")


def start_driver(args: argparse.Namespace, available_now: bool = False) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "driver", "--redis-url", args.redis_url]
    command += ["--pg-dsn", args.pg_dsn, "--topic", args.topic, "--out", args.out]
    command += ["--per-trigger", str(args.per_trigger)]
    if available_now:
        command.append("--available-now")
    return subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's whole process group: Python, its JVM, the Python workers."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def batches(checkpoint: Path, kind: str) -> set[int]:
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def wait_mid_batch(args: argparse.Namespace, proc: subprocess.Popen[bytes], after: int) -> int:
    """Wait until a batch past ``after`` is planned but not committed; its id."""
    checkpoint = Path(args.out) / "checkpoint"
    while proc.poll() is None:
        planned, committed = batches(checkpoint, "offsets"), batches(checkpoint, "commits")
        pending = sorted(b for b in planned - committed if b > after)
        if pending:
            return pending[0]
        time.sleep(0.05)
    raise SystemExit(f"the driver exited ({proc.returncode}) before it was killed")


def committed_rows(out: Path) -> list[tuple[str, int, int, bytes]]:
    """The rows of the files the sink's _spark_metadata log committed."""
    import pyarrow.parquet as pq

    files: set[str] = set()
    removed: set[str] = set()
    for log_file in sorted((out / "data" / "_spark_metadata").iterdir()):
        if log_file.name.startswith("."):
            continue
        for line in log_file.read_text().splitlines()[1:]:  # the first is the version
            entry = json.loads(line)
            (files if entry["action"] == "add" else removed).add(entry["path"])
    rows: list[tuple[str, int, int, bytes]] = []
    for path in sorted(files - removed):
        table = pq.read_table(path.removeprefix("file://"))
        rows += zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)
    return rows


def check(rows: list[tuple[str, int, int, bytes]], topic: str, per_partition: int) -> str:
    """'' when the rows hold every produced record exactly once, else what is wrong."""
    seen: dict[tuple[str, int, int], bytes] = {}
    duplicates = 0
    for t, p, o, v in rows:
        duplicates += (t, p, o) in seen
        seen[t, p, o] = v
    expected = {
        (topic, p, o): f"{p}-{o}".encode() for p in range(PARTITIONS) for o in range(per_partition)
    }
    missing = len(expected.keys() - seen.keys())
    wrong = sum(1 for k, v in seen.items() if expected.get(k) != v)
    if duplicates or missing or wrong:
        return f"{duplicates} duplicates, {missing} missing, {wrong} unexpected or wrong"
    return ""


async def produce_and_archive(
    args: argparse.Namespace, per_partition: int, done: threading.Event
) -> None:
    """Produce ``per_partition`` records into each partition (values "p-offset") at about
    --rate records/s in all, with an archiver pass every half second."""
    log = open_log(args.redis_url)
    archive = Archive(args.pg_dsn)
    attach(log, archive)
    archiver = await archive.archiver(log, idle_close_ms=0)
    try:
        chunk = 100
        interval = chunk * PARTITIONS / args.rate
        last_archive = 0.0
        for low in range(0, per_partition, chunk):
            started = time.monotonic()
            for p in range(PARTITIONS):
                values = [f"{p}-{o}".encode() for o in range(low, min(per_partition, low + chunk))]
                await log.append(args.topic, p, [build_batch(values)])
            if started - last_archive > 0.5:
                await archiver.run_once()
                last_archive = started
            PRODUCED[0] = (low + chunk) * PARTITIONS
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
        await archiver.run_once()
    finally:
        done.set()
        await archive.close()
        await log.redis.aclose()


async def create_topic(args: argparse.Namespace) -> None:
    log = open_log(args.redis_url)
    try:
        await log.enable_archiving()  # no page leaves Redis unarchived
        # small pages, few kept: archived pages leave Redis while the query runs
        config = TopicConfig(args.topic, PARTITIONS, page_size=args.page_size, max_pages=2)
        await log.create_topic(config)
    finally:
        await log.redis.aclose()


def orchestrate(args: argparse.Namespace) -> int:
    per_partition = args.records // PARTITIONS
    asyncio.run(create_topic(args))
    produced = threading.Event()
    producer = threading.Thread(
        target=lambda: asyncio.run(produce_and_archive(args, per_partition, produced))
    )
    started = time.monotonic()
    producer.start()
    last = -1
    for round_ in range(args.kills):
        proc = start_driver(args)
        last = wait_mid_batch(args, proc, last)
        kill(proc)
        print(
            f"kill {round_ + 1}: driver SIGKILLed with batch {last} planned, not committed "
            f"({min(PRODUCED[0], args.records):,} records produced so far)"
        )
    producer.join()
    # the last driver runs until the log's end as it was when the producers finished
    final = start_driver(args, available_now=True)
    if final.wait() != 0:
        print(f"the last driver failed ({final.returncode})")
        return 1
    rows = committed_rows(Path(args.out))
    problem = check(rows, args.topic, per_partition)
    seconds = time.monotonic() - started
    if problem:
        print(f"NOT exactly once: {problem} ({len(rows):,} rows)")
        return 1
    print(
        f"exactly once: {len(rows):,} records, each once by (topic, partition, offset), "
        f"across {args.kills} driver kills, in {seconds:.0f} s"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="run", choices=["run", "driver"])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--rate", type=float, default=2_000.0, help="records/s produced")
    parser.add_argument("--per-trigger", type=int, default=20_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--page-size", type=int, default=500, help="records per page")
    parser.add_argument("--redis-url")
    parser.add_argument("--pg-dsn")
    parser.add_argument("--topic", default="faults")
    parser.add_argument("--out")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()
    if args.mode == "driver":
        driver(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="kafkaesque-faults-") as home:
        args.out = args.out or str(Path(home) / "out")
        if args.redis_url and args.pg_dsn:
            return orchestrate(args)
        from kafkaesque.hot.embedded import EmbeddedRedis
        from storage_pg import EmbeddedPostgres

        redis_server, postgres = EmbeddedRedis(Path(home)), EmbeddedPostgres(Path(home))
        args.redis_url, args.pg_dsn = redis_server.ensure_started(), postgres.ensure_started()
        try:
            return orchestrate(args)
        finally:
            redis_server.stop()
            postgres.stop()


if __name__ == "__main__":
    sys.exit(main())
