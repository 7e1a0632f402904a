"""Redis memory as the hot tier's limit: the guard's throttle and refusal, and a broker on a
Redis with a small maxmemory whose producers are held back before Redis is full, lose
nothing acknowledged, and go on once the archiver made room."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis
from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import HotTierFull
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.log import Log
from kafkaesque.hot.memory import FULL, HIGH, MAX_THROTTLE_MS, MemoryGuard, MemoryUse
from kafkaesque.records.batch import base_offset, decode_values, split_batches
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, produce_request
from tests.servers import RedisServer
from tests.wire.conftest import Broker

MAXMEMORY = 24 * 2**20
RECORDS_PER_BATCH = 100
VALUE_BYTES = 1000


def test_the_guard_throttles_above_high_and_refuses_at_full() -> None:
    guard = MemoryGuard(redis=None)  # type: ignore[arg-type]  # never asked here
    guard.use = MemoryUse(int(HIGH * 100) - 1, 100)
    assert guard.throttle_ms() == 0
    guard.check_append(0)
    guard.use = MemoryUse(int((HIGH + FULL) / 2 * 1000), 1000)
    assert 0 < guard.throttle_ms() < MAX_THROTTLE_MS
    guard.check_append(0)
    guard.use = MemoryUse(int(FULL * 100), 100)
    assert guard.throttle_ms() == MAX_THROTTLE_MS
    with pytest.raises(HotTierFull, match="nearly full"):
        guard.check_append(0)
    guard.use = MemoryUse(int(HIGH * 100), 100)
    with pytest.raises(HotTierFull):  # what it would add counts
        guard.check_append(int((FULL - HIGH) * 100) + 1)
    guard.use = MemoryUse(10**9, 0)  # no maxmemory: no limit to guard
    assert guard.throttle_ms() == 0
    guard.check_append(0)


def values(batch_number: int) -> list[bytes]:
    return [
        b"%06d-%03d-" % (batch_number, i) + b"x" * (VALUE_BYTES - 11)
        for i in range(RECORDS_PER_BATCH)
    ]


def test_a_full_redis_holds_producers_back_and_loses_nothing(tmp_path: Path, pg_dsn: str) -> None:
    server = RedisServer(
        tmp_path / "redis",
        extra_args=["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction"],
    )
    # The broker archives only when told (the cron archiver below): Redis fills first.
    broker = Broker(server.url, tmp_path / "b", ["--archive-interval", "3600"], pg_dsn=pg_dsn)
    try:
        broker.cli("create", "full", "--page-size", "500")
        acknowledged: list[bytes] = []
        held_back = None
        with Connection(broker.bootstrap) as c:
            for n in range(2 * MAXMEMORY // (RECORDS_PER_BATCH * VALUE_BYTES)):
                batch = values(n)
                answer = c.request(produce_request("full", {0: build_batch(batch)}, acks=1))
                [partition] = answer.responses[0].partition_responses
                if partition.error_code == ErrorCode.none:
                    acknowledged += batch
                else:
                    assert partition.error_code == ErrorCode.kafka_storage_error
                if answer.throttle_time.total_seconds() > 0 or partition.error_code:
                    held_back = n
                    break
            assert held_back is not None, "Redis filled up and nobody was held back"
            used = redis.Redis.from_url(server.url).info("memory")["used_memory"]
            assert used < MAXMEMORY  # held back before Redis refused anything itself
            broker.cli("archive")  # cron's run: the closed pages are now in PostgreSQL
            deadline = time.monotonic() + 30
            n = held_back + 1
            while True:  # the broker releases the archived pages; producers go on
                batch = values(n)
                answer = c.request(produce_request("full", {0: build_batch(batch)}, acks=1))
                [partition] = answer.responses[0].partition_responses
                if partition.error_code == ErrorCode.none and not answer.throttle_time:
                    acknowledged += batch
                    break
                if partition.error_code == ErrorCode.none:
                    acknowledged += batch
                assert time.monotonic() < deadline, "produce never resumed"
                n += 1
                time.sleep(0.2)
            fetched: list[bytes] = []
            while len(fetched) < len(acknowledged):
                records = c.fetch("full", 0, len(fetched)).records
                assert records, f"only {len(fetched)} of {len(acknowledged)} came back"
                for batch in split_batches(records):  # whole batches: skip what we have
                    fetched += decode_values(batch)[len(fetched) - base_offset(batch) :]
        assert fetched[: len(acknowledged)] == acknowledged
        logged = broker.stderr()
        assert "Traceback" not in logged
    finally:
        broker.stop()
        server.stop()


def test_a_held_back_producer_is_answered_at_once_then_waits(tmp_path: Path) -> None:
    """Redis between HIGH and FULL: as Kafka's quotas since KIP-219, the Produce answer
    goes at once, saying the throttle time, and the connection's next request waits it
    out. An answer held back instead outlasted short client request timeouts: the client
    took the written batch for possibly lost, and an idempotent producer that then bumped
    its epoch wrote it again (duplicates under maxmemory)."""
    server = RedisServer(
        tmp_path / "redis",
        extra_args=["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction"],
    )
    ballast = redis.Redis.from_url(server.url)  # nothing the archiver could release
    n = 0
    while ballast.info("memory")["used_memory"] < (HIGH + FULL) / 2 * MAXMEMORY:
        ballast.set(f"ballast:{n}", b"x" * 65536)
        n += 1
    broker = Broker(server.url, tmp_path / "b")
    try:
        broker.cli("create", "held")
        with Connection(broker.bootstrap) as c:
            # A first append loads what the broker keeps of the partition; then the
            # throttle it earned passes.
            c.request(produce_request("held", {0: build_batch(values(0))}, acks=1))
            c.api_versions()
            started = time.monotonic()
            answer = c.request(produce_request("held", {0: build_batch(values(1))}, acks=1))
            answered = time.monotonic() - started
            [partition] = answer.responses[0].partition_responses
            assert partition.error_code == ErrorCode.none
            throttle = answer.throttle_time.total_seconds()
            assert 0 < throttle <= MAX_THROTTLE_MS / 1000
            assert answered < throttle / 2, f"answered after {answered:.2f} s"
            started = time.monotonic()
            c.api_versions()  # read only once the throttle time has passed
            assert time.monotonic() - started > throttle * 0.8
    finally:
        broker.stop()
        server.stop()


def test_an_append_into_a_full_redis_writes_nothing(tmp_path: Path) -> None:
    """Redis checks maxmemory only at a script's first write, and append.lua's first
    write asks for memory (INCRBY of the sequence) after every check: refused there, the
    append leaves nothing behind, neither its batch nor its producer's sequence state, so
    the producer's retry is appended exactly once."""
    server = RedisServer(
        tmp_path / "redis",
        extra_args=["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction"],
    )

    async def run() -> None:
        log = Log(redis_client(server.url))
        await log.create_topic(TopicConfig("t", 1))
        batch = build_batch([b"first"], producer_id=7, producer_epoch=0, base_sequence=0)
        await log.append("t", 0, [batch])
        admin = redis.Redis.from_url(server.url)
        used = admin.info("memory")["used_memory"]
        admin.config_set("maxmemory", used // 2)  # over it: every write that asks is refused
        producers = log.keys.partition("t", 0).producers
        before = admin.hgetall(producers)
        second = build_batch([b"second"], producer_id=7, producer_epoch=0, base_sequence=1)
        with pytest.raises(HotTierFull):
            await log.append("t", 0, [second])
        assert admin.hget(log.keys.partition("t", 0).meta, "end") == b"1"  # nothing written
        assert admin.hgetall(producers) == before
        admin.config_set("maxmemory", MAXMEMORY)
        appended = await log.append("t", 0, [second])  # the retry, once there is room
        assert appended.base_offsets == [1]
        assert (await log.state("t", 0)).log_end == 2
        await log.redis.aclose()

    try:
        asyncio.run(run())
    finally:
        server.stop()
