"""`kafkaesque consume --isolation`: read_committed (the default) stops at the last stable
offset and drops aborted records, read_uncommitted prints every user record; neither prints
transaction markers. Through click's runner against a real redis-server."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio
from click.testing import CliRunner, Result

from kafkaesque.cli import main
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch
from kafkaesque.txn.transaction import TxnMarker

A, B, C = 11, 12, 13


def txn(values: list[bytes], pid: int, seq: int = 0) -> bytes:
    return build_batch(
        values, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
    )


@pytest.fixture
def ks(redis_url: str):
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(main, ["--redis-url", redis_url, *args])

    return invoke


def setup(redis_url: str) -> None:
    """t[0]: p0 | A a0 a1 (aborted) | B b0 (committed) | p1 | ABORT A | COMMIT B | p2 |
    C c0 (open) | p3, over small pages."""

    async def work() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        log = Log(client)
        parts = Partitions(log)
        await log.create_topic(TopicConfig("t", 1, page_size=2))
        await log.append("t", 0, [build_batch([b"p0"])])
        await log.append("t", 0, [txn([b"a0", b"a1"], A)])
        await log.append("t", 0, [txn([b"b0"], B)])
        await log.append("t", 0, [build_batch([b"p1"])])
        await parts.write_markers([("t", 0)], TxnMarker(A, 0, commit=False))
        await parts.write_markers([("t", 0)], TxnMarker(B, 0, commit=True))
        await log.append("t", 0, [build_batch([b"p2"])])
        await log.append("t", 0, [txn([b"c0"], C)])
        await log.append("t", 0, [build_batch([b"p3"])])
        await client.aclose()

    asyncio.run(work())


def test_consume_isolation_levels(ks, redis_url: str) -> None:
    setup(redis_url)
    committed = ks("consume", "t")
    assert committed.exit_code == 0, committed.output
    assert committed.stdout_bytes == b"p0\nb0\np1\np2\n"
    # One record per fetch: polls that hold only aborted records or markers read on.
    one_by_one = ks("consume", "t", "--fetch-size", "1", "--isolation", "read_committed")
    assert one_by_one.stdout_bytes == b"p0\nb0\np1\np2\n"
    everything = ks("consume", "t", "--isolation", "read_uncommitted")
    assert everything.stdout_bytes == b"p0\na0\na1\nb0\np1\np2\nc0\np3\n"
    offsets = ks("consume", "t", "--format", "offset", "--isolation", "read_uncommitted")
    assert [line.split(b"\t")[1] for line in offsets.stdout_bytes.splitlines()] == [
        b"0",
        b"1",
        b"2",
        b"3",
        b"4",
        b"7",
        b"8",
        b"9",
    ]  # fmt: skip: 5 and 6 are the markers
    rows = [
        json.loads(line)
        for line in ks("consume", "t", "--format", "json").stdout_bytes.splitlines()
    ]
    assert [(r["offset"], r["value"]) for r in rows] == [(0, "p0"), (3, "b0"), (4, "p1"), (7, "p2")]
    limited = ks("consume", "t", "--max-records", "2")
    assert limited.stdout_bytes == b"p0\nb0\n"


def test_consume_refuses_an_unknown_isolation(ks, redis_url: str) -> None:
    setup(redis_url)
    result = ks("consume", "t", "--isolation", "serializable")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "--isolation" in result.stderr and "serializable" in result.stderr
