"""Spark job tests: one local Spark session and one throwaway PostgreSQL per test session, a
fresh archive database per test filled with known rows by SQL (no Redis involved)."""

from __future__ import annotations

import asyncio
import datetime
import json
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark tests need the [spark] extra")
if shutil.which("java") is None:
    pytest.skip("the Spark tests need Java 17+", allow_module_level=True)

import asyncpg

from storage_pg import spark as job
from storage_pg.rows import COLUMNS as ROW_COLUMNS
from storage_pg.schema import ensure_schema
from tests.pg import PostgresServer

try:
    job.find_jdbc_jar()
except job.JdbcDriverMissing as exc:
    pytest.skip(str(exc), allow_module_level=True)

BASE = datetime.datetime(2024, 3, 9, 21, 30, tzinfo=datetime.UTC)  # the cut crosses midnight
COLUMNS = (*ROW_COLUMNS, "archived_at")  # archived_at: set by the archiver


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = job.spark_session("local[2]", "kafkaesque tests")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


class Archive:
    """A fresh archive database: rows are generated deterministically and COPYed in."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.next_id = 1
        self.offsets: dict[tuple[str, int], int] = {}

    def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.dsn)
            try:
                return await conn.fetch(query, *args)
            finally:
                await conn.close()

        return asyncio.run(run())

    def make_rows(
        self,
        n: int,
        topics: Sequence[str] = ("alpha", "beta", "gamma"),
        partitions: int = 2,
        step: datetime.timedelta = datetime.timedelta(seconds=53),
    ) -> list[tuple[Any, ...]]:
        rows = []
        for _ in range(n):
            i = self.next_id
            self.next_id += 1
            topic = topics[(i * 7) % len(topics)]
            partition = (i // 3) % partitions
            offset = self.offsets.get((topic, partition), 0)
            self.offsets[(topic, partition)] = offset + 1
            if i % 23 == 0:
                timestamp = None
                archived = BASE
            else:
                timestamp = BASE + i * step
                archived = timestamp + datetime.timedelta(milliseconds=(i * 7919) % 90_000 + 5)
            if i % 11 == 0:
                key = None
            elif i % 13 == 0:
                key = b""
            elif i % 17 == 0:
                key = bytes([0xFF, 0x00, i % 256])
            else:
                key = f"user-{(i * i) % 6}".encode()
            value = None if i % 19 == 0 else bytes((i + j) % 256 for j in range(i % 97))
            headers = json.dumps([["h", "YQ=="]] if i % 5 == 0 else [])
            producer = (1000 + i % 3, 0, i) if i % 2 else (None, None, None)
            rows.append(
                (i, topic, partition, offset, timestamp, key, value, headers, *producer, archived)
            )
        return rows

    def add(self, n: int, watermark: int | None = None, **kwargs: Any) -> list[tuple[Any, ...]]:
        """COPY ``n`` more rows in; with ``watermark``, then move the watermark there."""
        rows = self.make_rows(n, **kwargs)

        async def run() -> None:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.copy_records_to_table("record", records=rows, columns=COLUMNS)
            finally:
                await conn.close()

        asyncio.run(run())
        if watermark is not None:
            self.set_watermark(watermark)
        return rows

    def set_watermark(self, watermark: int) -> None:
        self.sql("UPDATE archive_watermark SET id = $1, updated = now()", watermark)


async def _migrate(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await ensure_schema(conn)
    finally:
        await conn.close()


@pytest.fixture
def archive(pg_server: PostgresServer) -> Iterator[Archive]:
    """An empty archive (the real schema, watermark 0) in a new database, dropped after."""
    with pg_server.database() as dsn:
        asyncio.run(_migrate(dsn))
        yield Archive(dsn)
