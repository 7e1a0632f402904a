"""High watermarks where Redis replicas are required (kafkaesque/hot/high_watermark.py): a
record only the primary has is not read, so a failover that loses it changes nothing a
consumer saw. Against a real primary and replica: a stopped replica holds the high
watermark back; once it has the records they are read, through the Log and through a
broker's long poll."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.durability import Durability
from kafkaesque.hot.high_watermark import HighWatermarks
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import decode_values, split_batches
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, fetch_request, produce_request
from tests.servers import RedisServer
from tests.wire.conftest import Broker


def replicated(tmp_path: Path) -> tuple[RedisServer, RedisServer]:
    """A primary and a replica in sync with it."""
    primary = RedisServer(tmp_path / "primary", appendonly=True)
    replica = RedisServer(
        tmp_path / "replica", extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    )

    async def in_sync() -> None:
        redis = redis_client(primary.url)
        deadline = time.monotonic() + 30
        try:
            while (await redis.info("replication")).get("slave0", {}).get("state") != "online":
                assert time.monotonic() < deadline, "the replica never came in sync"
                await asyncio.sleep(0.05)
        finally:
            await redis.aclose()

    asyncio.run(in_sync())
    return primary, replica


def values(batches: list[bytes]) -> list[bytes]:
    return [v for b in batches for v in decode_values(b)]


def test_reads_stop_at_what_the_replica_has(tmp_path: Path) -> None:
    primary, replica = replicated(tmp_path)

    async def run() -> None:
        redis = redis_client(primary.url)
        log = Log(redis)
        # A loaded machine (the suite's parallel workers) can delay the replica's ack past
        # a few hundred ms; only the stopped replica's WAIT runs the timeout out.
        watermarks = HighWatermarks(log, replicas=1, timeout_ms=2000)
        watermarks.attach()
        await log.create_topic(TopicConfig("t", 2))
        await log.append("t", 0, [build_batch([b"replicated"])])
        assert await watermarks.raise_once([("t", 0), ("t", 1)]) == set()
        read = await log.read("t", 0, 0)
        assert values(read.batches) == [b"replicated"] and read.log_end == 1

        replica.proc.send_signal(signal.SIGSTOP)  # it confirms nothing now
        try:
            await log.append("t", 0, [build_batch([b"primary only"])])
            assert (await log.state("t", 0)).log_end == 2
            assert await watermarks.raise_once([("t", 0)]) == {("t", 0)}
            read = await log.read("t", 0, 0)  # the replicated record, not the other
            assert values(read.batches) == [b"replicated"] and read.log_end == 1
            read = await log.read("t", 0, 1)  # in range, but nothing to read yet
            assert read.batches == [] and not read.past_end and read.log_end == 1
            assert (await log.partition_offsets([("t", 0)]))[0][1] == 1  # ListOffsets
            committed = await log.read("t", 0, 0, committed=True)
            assert committed.last_stable == 1
        finally:
            replica.proc.send_signal(signal.SIGCONT)
        assert await watermarks.raise_once([("t", 0)]) == set()
        read = await log.read("t", 0, 0)
        assert values(read.batches) == [b"replicated", b"primary only"]
        assert read.log_end == 2
        # acks=all is answered once readers see the records, with no round in between.
        await log.append("t", 1, [build_batch([b"all"])], Durability(replicas=1), 5_000)
        read = await log.read("t", 1, 0)
        assert values(read.batches) == [b"all"] and read.log_end == 1
        await redis.aclose()

    try:
        asyncio.run(run())
    finally:
        replica.stop()
        primary.stop()


def test_a_long_poll_wakes_when_the_replica_catches_up(tmp_path: Path) -> None:
    """Through a broker with --min-insync-replicas 2: an acks=1 record is acknowledged
    while the replica is stopped, but no fetch returns it (high watermark 0) until the
    replica has it; then a waiting fetch gets it without polling again."""
    primary, replica = replicated(tmp_path)
    broker = Broker(primary.url, tmp_path / "broker", extra_args=["--min-insync-replicas", "2"])
    try:
        with Connection(broker.bootstrap) as c:
            c.create_topic("capped")
            replica.proc.send_signal(signal.SIGSTOP)
            try:
                answer = c.request(produce_request("capped", {0: build_batch([b"v"])}, acks=1))
                [partition] = answer.responses[0].partition_responses
                assert partition.error_code == ErrorCode.none and partition.base_offset == 0
                time.sleep(0.5)  # rounds of the high-watermark loop that cannot raise it
                data = c.fetch("capped", 0, 0)
                assert data.error_code == ErrorCode.none
                assert data.high_watermark == 0 and not split_batches(data.records or b"")
                assert c.list_offset("capped", 0).offset == 0
            finally:
                replica.proc.send_signal(signal.SIGCONT)
            wait = fetch_request("capped", {0: 0}, max_wait_ms=10_000)
            started = time.monotonic()
            [data] = c.request(wait).responses[0].partitions
            assert time.monotonic() - started < 9  # woken, not timed out
            assert data.high_watermark == 1
            assert values(split_batches(data.records)) == [b"v"]
    finally:
        broker.stop()
        replica.stop()
        primary.stop()
