"""Helpers for the archive tests: produce known records, read the archive back."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import redis.asyncio

from kafkaesque.hot.log import Log
from kafkaesque.records.batch import Compression
from kafkaesque.records.build import build_batch
from storage_pg.pool import create_pool, init_connection, pg_to_ms

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Row:
    """One record as the archive should hold it."""

    id: int
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    producer_id: int | None = None
    producer_epoch: int | None = None
    producer_sequence: int | None = None


def make_log(url: str, **kwargs: object) -> Log:
    return Log(redis.asyncio.Redis.from_url(url), **kwargs)  # type: ignore[arg-type]


async def produce(
    log: Log,
    topic: str,
    partition: int,
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Headers] | None = None,
    timestamps: Sequence[int] | None = None,
    compression: Compression = Compression.NONE,
    producer: tuple[int, int, int] | None = None,  # producer id, epoch, base sequence
) -> list[Row]:
    """Append one batch; return its records as archive rows. Ids are derived from the
    global sequence counter, so callers must not append concurrently."""
    n = len(values)
    timestamps = timestamps or [1_700_000_000_000 + i for i in range(n)]
    pid, epoch, seq = producer or (-1, -1, -1)
    batch = build_batch(
        values,
        keys,
        timestamps=timestamps,
        headers=headers,
        compression=compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    appended = await log.append(topic, partition, [batch])
    base = appended.base_offsets[0]
    last_id = await log.sequence_counter()
    return [
        Row(
            id=last_id - n + 1 + i,
            topic=topic,
            partition=partition,
            offset=base + i,
            timestamp=timestamps[i],
            key=None if keys is None else keys[i],
            value=values[i],
            headers=[] if headers is None else list(headers[i]),
            producer_id=pid if pid >= 0 else None,
            producer_epoch=epoch if pid >= 0 else None,
            producer_sequence=(seq + i) & 0x7FFFFFFF if pid >= 0 else None,
        )
        for i in range(n)
    ]


async def archived_rows(dsn: str) -> list[Row]:
    """Every row of the record table, by id."""
    conn = await asyncpg.connect(dsn)
    try:
        await init_connection(conn)
        rows = await conn.fetch(
            'SELECT id, topic, partition, "offset", "timestamp", key, value, headers,'
            " producer_id, producer_epoch, producer_sequence FROM record ORDER BY id"
        )
    finally:
        await conn.close()
    return [
        Row(
            r[0],
            r[1],
            r[2],
            r[3],
            pg_to_ms(r[4]),
            r[5],
            r[6],
            [(k, None if v is None else base64.b64decode(v)) for k, v in json.loads(r[7])],
            r[8],
            r[9],
            r[10],
        )
        for r in rows
    ]


async def fetchval(dsn: str, sql: str, *args: object) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        await init_connection(conn)
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def pool(dsn: str, **kwargs: object) -> asyncpg.Pool:
    return await create_pool(dsn, **kwargs)  # type: ignore[arg-type]


def bare_env(home: Path) -> dict[str, str]:
    """A CLI process's environment with nothing of the user's: a plain PATH, its own data
    directory, and the suite's place for Hypothesis' caches (tests/conftest.py)."""
    env = {"PATH": "/usr/bin:/bin", "KAFKAESQUE_HOME": str(home)}
    hypothesis = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
    return env if hypothesis is None else {**env, "HYPOTHESIS_STORAGE_DIRECTORY": hypothesis}
