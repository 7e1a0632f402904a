"""The archive holds what a read_committed consumer reads: the archiver stops at the last
stable offset (no record of an open transaction, and the watermark stays below it), leaves
out aborted records and transaction markers. Real redis-server and PostgreSQL."""

from __future__ import annotations

import asyncio

from click.testing import CliRunner

from kafkaesque.cli import main
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch
from kafkaesque.txn.transaction import TxnMarker
from storage_pg import Archiver, create_pool, ensure_schema, watermark
from tests.storage.common import archived_rows, make_log

A, B = 71, 72


def txn(value: bytes, pid: int, seq: int) -> bytes:
    return build_batch(
        [value], producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
    )


def test_archiver_waits_for_transactions_and_skips_aborted(redis_url: str, pg_dsn: str) -> None:
    async def scenario() -> None:
        log = make_log(redis_url)
        parts = Partitions(log)
        pool = await create_pool(pg_dsn)
        await ensure_schema(pool)
        archiver = Archiver(log, pool)
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        await log.append("t", 0, [build_batch([b"p0"])])  # 0
        await log.append("t", 0, [txn(b"a0", A, 0)])  # 1: A's transaction opens
        await log.append("t", 0, [txn(b"a1", A, 1)])  # 2
        for value in [b"p1", b"p2", b"p3"]:  # 3, 4, 5: pages closed
            await log.append("t", 0, [build_batch([value])])
        first_id = 1  # p0's global sequence number: Redis was empty
        await archiver.run_once()
        # The first page already holds a record of the open transaction: nothing goes.
        assert await archived_rows(pg_dsn) == []
        assert await watermark(pool) < first_id

        await parts.write_markers([("t", 0)], TxnMarker(A, 0, commit=False))  # 6
        await log.append("t", 0, [build_batch([b"p4"])])  # 7
        await log.append("t", 0, [txn(b"b0", B, 0)])  # 8
        await parts.write_markers([("t", 0)], TxnMarker(B, 0, commit=True))  # 9: pages closed
        await archiver.run_once()
        rows = await archived_rows(pg_dsn)
        assert [(r.offset, r.value) for r in rows] == [
            (0, b"p0"), (3, b"p1"), (4, b"p2"), (5, b"p3"), (7, b"p4"), (8, b"b0")
        ]  # fmt: skip
        assert await watermark(pool) == await log.sequence_counter()
        # Redis lets the archived pages go; reads below its start go to the archive.
        await log.release_archived()
        assert (await log.state("t", 0)).log_start == 10
        await pool.close()
        await log.redis.aclose()

    asyncio.run(scenario())
    # The CLI reads the archive: the committed records, and no word of a gap where the
    # markers and the aborted records were left out.
    result = CliRunner().invoke(
        main, ["--redis-url", redis_url, "--pg-dsn", pg_dsn, "consume", "t"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b"p0\np1\np2\np3\np4\nb0\n"
    assert result.stderr == ""
