"""Cold reads: offsets Redis dropped after archiving, read back from PostgreSQL."""

from __future__ import annotations

import asyncio
import random

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.records.batch import Compression, check_batch, decode_batch, read_header
from storage_pg import Archiver, ArchiveReader, create_pool
from tests.storage.common import Row, make_log, produce


async def produce_shapes(log, topic: str, rng: random.Random) -> list[Row]:
    rows: list[Row] = []
    seq = 0
    for i in range(40):
        n = rng.randint(1, 30)
        values = [rng.randbytes(rng.randint(0, 200)) for _ in range(n)]
        kwargs: dict = {"compression": Compression(i % 5)}
        if i % 4 == 1:
            kwargs["keys"] = [None if j % 2 else b"" if j % 3 else b"key" for j in range(n)]
        if i % 4 == 2:
            # A NUL in a key: valid in Kafka, not in a jsonb string.
            kwargs["headers"] = [[("a", b"1"), ("n\0ul", None)][: j % 3] for j in range(n)]
        if i % 4 == 3:
            kwargs["producer"] = (77, 1, seq)
            seq += n
        if i % 5 == 0:
            kwargs["timestamps"] = [1_600_000_000_000] * n  # one timestamp for all
        rows += await produce(log, topic, 0, values, **kwargs)
    return rows


def as_read(rows: list[Row]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in rows]


def decoded(batches: list[bytes], start: int) -> list[tuple]:
    out = []
    for b in batches:
        check_batch(b)
        out += [
            (r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in decode_batch(b)
            if r.offset >= start
        ]
    return out


def test_cold_reads_return_what_redis_dropped(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        reader = ArchiveReader(pool)
        log = make_log(redis_url, cold=reader)
        await log.enable_archiving()  # else retention drops pages before they are archived
        await log.create_topic(TopicConfig("t", 1, page_size=20, max_pages=1))
        rows = await produce_shapes(log, "t", random.Random(5))
        await Archiver(log, pool, idle_close_ms=0).run_once()
        state = await log.state("t", 0)
        assert state.log_start > 100  # archived pages beyond the newest were dropped
        assert await reader.start_offset("t", 0) == 0
        assert await log.earliest_offset("t", 0) == 0

        # Through the Log: every offset from 0, as produced, whatever the fetch size.
        for max_bytes in (1, 700, 1 << 20):
            got, offset = [], 0
            while offset < state.log_end:
                result = await log.read("t", 0, offset, max_bytes=max_bytes)
                assert result.batches and not result.below_start
                got += decoded(result.batches, offset)
                offset = got[-1][0] + 1
            assert got == as_read(rows)

        # Directly: the first batch starts at the offset asked for and always comes.
        for offset in (0, 1, 57, state.log_start - 1):
            batches = await reader.read("t", 0, offset, 1)
            assert len(batches) == 1 and read_header(batches[0]).base_offset == offset
        everything = await reader.read("t", 0, 0, 1 << 30)
        assert decoded(everything, 0) == as_read(rows)
        assert await reader.read("t", 0, state.log_end, 1 << 20) == []
        assert await reader.read("t", 1, 0, 1 << 20) == []

        # Batches never mix producers, and keep the producer's id, epoch and sequence.
        by_offset = {r.offset: r for r in rows}
        for b in everything:
            h = read_header(b)
            members = [by_offset[h.base_offset + i] for i in range(h.record_count)]
            assert {(r.producer_id, r.producer_epoch) for r in members} == {
                (members[0].producer_id, members[0].producer_epoch)
            }
            first = members[0]
            if first.producer_id is None:
                assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1)
            else:
                assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
                    77,
                    1,
                    first.producer_sequence,
                )

        # max_bytes is respected after the first batch
        some = await reader.read("t", 0, 0, 2000)
        assert 1 <= len(some) and sum(map(len, some[1:])) <= 2000
        assert sum(map(len, some)) <= 2000 or len(some) == 1
        await pool.close()

    asyncio.run(scenario())


def test_offsets_by_time_below_redis_come_from_the_archive(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url, cold=ArchiveReader(pool))
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=10, max_pages=1))
        # Timestamps 1000, 1010, ... with one out of order: at offset 5 a late 900.
        stamps = [1000 + 10 * i for i in range(100)]
        stamps[5] = 900
        for first in range(0, 100, 10):
            await produce(log, "t", 0, [b"v"] * 10, timestamps=stamps[first : first + 10])
        await Archiver(log, pool, idle_close_ms=0).run_once()
        start = (await log.state("t", 0)).log_start
        assert start >= 80  # the rest is only in the archive
        assert await log.offset_for_timestamp("t", 0, 0) == (0, 1000)
        assert await log.offset_for_timestamp("t", 0, 1041) == (6, 1060)
        assert await log.offset_for_timestamp("t", 0, 1500) == (50, 1500)
        assert await log.offset_for_timestamp("t", 0, 1000 + 10 * start) == (start, stamps[start])
        assert await log.offset_for_timestamp("t", 0, 1991) is None
        await pool.close()

    asyncio.run(scenario())


def test_cold_read_skips_a_gap(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        await log.create_topic(TopicConfig("t", 1, page_size=3))
        rows = await produce(log, "t", 0, [b"a", b"b", b"c"])
        rows += await produce(log, "t", 0, [b"d", b"e", b"f"])
        await Archiver(log, pool, idle_close_ms=0).run_once()
        async with pool.acquire() as conn:  # as if offsets 1..3 had never been archived
            await conn.execute('DELETE FROM record WHERE "offset" BETWEEN 1 AND 3')
        reader = ArchiveReader(pool)
        batches = await reader.read("t", 0, 1, 1 << 20)
        assert [read_header(b).base_offset for b in batches] == [4]
        assert decoded(batches, 0) == as_read(rows[4:])
        batches = await reader.read("t", 0, 0, 1 << 20)
        assert [read_header(b).base_offset for b in batches] == [0, 4]
        await pool.close()

    asyncio.run(scenario())
