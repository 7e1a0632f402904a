"""A live log for the data source's tests: Redis with the archive attached, records
produced and archived on demand, and what the log holds read back through Log.read (the
path every consumer takes), to compare Spark's rows with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import decode_batch, is_aborted, is_control, next_offset
from kafkaesque.records.build import build_batch
from storage_pg.tiered import Archive, attach

T = TypeVar("T")
BASE_MS = 1_700_000_000_000
Row = tuple[
    str, int, int, bytes | None, bytes | None, int
]  # topic, partition, offset, key, value, ms


class LiveLog:
    """Synchronous helpers over one Redis and one archive database."""

    def __init__(self, redis_url: str, dsn: str) -> None:
        self.redis_url = redis_url
        self.dsn = dsn

    def run(self, step: Callable[[Log], Awaitable[T]]) -> T:
        async def main() -> T:
            log = Log(redis.asyncio.Redis.from_url(self.redis_url))
            archive = Archive(self.dsn)
            attach(log, archive)
            try:
                return await step(log)
            finally:
                await archive.close()
                await log.redis.aclose()

        return asyncio.run(main())

    def run_hot(self, step: Callable[[Log], Awaitable[T]]) -> T:
        """``step(log)`` on Redis alone (no archive attached)."""

        async def main() -> T:
            client = redis.asyncio.Redis.from_url(self.redis_url)
            try:
                return await step(Log(client))
            finally:
                await client.aclose()

        return asyncio.run(main())

    def create(self, topic: str, partitions: int = 3, **config: Any) -> None:
        async def step(log: Log) -> None:
            await log.enable_archiving()
            await log.create_topic(TopicConfig(topic, partitions, **config))

        self.run(step)

    def produce(
        self,
        topic: str,
        partition: int,
        count: int,
        first: int = 0,
        per_batch: int = 10,
        transaction: tuple[int, int] | None = None,  # producer id, base sequence
    ) -> None:
        """``count`` records with values ``{topic}-{partition}-{i}``, keys on even i, a
        header on every third, timestamps BASE_MS + 1000 * i."""

        async def step(log: Log) -> None:
            for low in range(first, first + count, per_batch):
                ids = range(low, min(first + count, low + per_batch))
                extra: dict[str, Any] = {}
                if transaction is not None:
                    pid, seq = transaction
                    extra = {
                        "producer_id": pid,
                        "producer_epoch": 0,
                        "base_sequence": seq + low - first,
                        "transactional": True,
                    }
                batch = build_batch(
                    [f"{topic}-{partition}-{i}".encode() for i in ids],
                    [None if i % 2 else f"k{i}".encode() for i in ids],
                    timestamps=[BASE_MS + 1000 * i for i in ids],
                    headers=[[("n", str(i).encode())] if i % 3 == 0 else [] for i in ids],
                    **extra,
                )
                await log.append(topic, partition, [batch])

        self.run(step)

    def archive(self) -> None:
        """One archiver pass: closed pages to PostgreSQL (and out of Redis where the
        topic keeps fewer pages)."""

        async def step(log: Log) -> None:
            assert isinstance(log.cold, Archive)
            await (await log.cold.archiver(log, idle_close_ms=0)).run_once()

        self.run(step)

    def end_transaction(
        self, topic: str, partitions: Sequence[int], pid: int, commit: bool
    ) -> None:
        async def step(log: Log) -> None:
            for p in partitions:
                await log.end_transaction(topic, p, pid, 0, commit)

        self.run(step)

    def tiers(self, topic: str, partition: int) -> tuple[int, int, int]:
        """(Redis' first offset, the archive's next offset to archive, the log end)."""

        async def step(log: Log) -> tuple[int, int, int]:
            state = await log.state(topic, partition)
            assert log.cold is not None
            return state.log_start, await log.cold.archived_through(topic, partition), state.log_end

        return self.run(step)

    def holds(self, topic: str, partitions: int = 3, committed: bool = True) -> list[Row]:
        """Every record a read_committed consumer reads from offset 0, in offset order
        per partition."""

        async def step(log: Log) -> list[Row]:
            rows: list[Row] = []
            for p in range(partitions):
                offset = 0
                end = (await log.state(topic, p)).log_end
                while offset < end:
                    result = await log.read(topic, p, offset, 1 << 20, committed=committed)
                    if not result.batches:
                        break
                    for b in result.batches:
                        if is_control(b) or is_aborted(b, result.aborted):
                            continue
                        records = decode_batch(b)
                        rows += [
                            (topic, p, r.offset, r.key, r.value, r.timestamp)
                            for r in records
                            if r.offset >= offset
                        ]
                    offset = next_offset(result.batches[-1])
            return rows

        return self.run(step)


def as_rows(collected: Sequence[Any]) -> list[Row]:
    """Spark rows as ``Row`` tuples, by partition and offset."""
    out = [
        (
            r["topic"],
            r["partition"],
            r["offset"],
            None if r["key"] is None else bytes(r["key"]),
            None if r["value"] is None else bytes(r["value"]),
            round(r["timestamp"].timestamp() * 1000),
        )
        for r in collected
    ]
    return sorted(out, key=lambda row: (row[0], row[1], row[2]))
