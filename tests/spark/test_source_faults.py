"""Exactly-once across a driver SIGKILL: a streaming query from a 3-partition topic (its
older pages only in the archive) to Parquet with a checkpoint; the driver (its own
process group: Python, JVM, workers) is killed while a micro-batch is planned but not
committed, and the query restarted from the checkpoint in this session. The committed
output holds every record once by (topic, partition, offset).

The driver, the query and the checks are scripts/bench/spark_stream_faults.py's, whose
full run (300k records, three kills, producers and the archiver running) is a script."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.pg import PostgresServer
from tests.servers import RedisServer

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "spark_stream_faults.py"
PER_PARTITION = 900


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_stream_faults", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exactly_once_across_a_driver_kill(
    spark: Any, tmp_path: Path, pg_server: PostgresServer
) -> None:
    faults = script()
    server = RedisServer(tmp_path / "redis")
    try:
        with pg_server.database() as dsn:
            args = argparse.Namespace(
                redis_url=server.url,
                pg_dsn=dsn,
                topic="faults",
                out=str(tmp_path / "out"),
                per_trigger=1000,
                page_size=50,
                rate=1_000_000.0,
            )
            asyncio.run(faults.create_topic(args))
            asyncio.run(faults.produce_and_archive(args, PER_PARTITION, threading.Event()))
            driver = faults.start_driver(args)
            try:
                killed = faults.wait_mid_batch(args, driver, 0)  # batch 0 committed first
            finally:
                faults.kill(driver)
            assert killed >= 1
            query = faults.stream_query(spark, args, available_now=True)
            query.awaitTermination(120)
            assert query.exception() is None
            rows = faults.committed_rows(Path(args.out))
            assert faults.check(rows, "faults", PER_PARTITION) == ""
            assert len(rows) == 3 * PER_PARTITION
    finally:
        server.stop()
