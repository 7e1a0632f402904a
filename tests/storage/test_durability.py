"""acks=all against real servers: what the probe promises, WAITAOF on the appending
connection, and a replica requirement that is not met told as a retriable Kafka error:
before the append while too few replicas are in sync (NOT_ENOUGH_REPLICAS, nothing
written), after it when one in sync does not confirm in time
(NOT_ENOUGH_REPLICAS_AFTER_APPEND), never a duplicate."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import NotDurable, NotEnoughReplicas
from kafkaesque.hot.connect import redis_client
from kafkaesque.hot.durability import Durability, probe
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import decode_values, split_batches
from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, produce_request
from tests.servers import RedisServer
from tests.wire.conftest import Broker


def probed(server: RedisServer, min_insync: int = 1) -> tuple[Durability, str]:
    async def run() -> tuple[Durability, str]:
        redis = redis_client(server.url)
        try:
            return await probe(redis, min_insync)
        finally:
            await redis.aclose()

    return asyncio.run(run())


def test_the_probe_promises_what_the_server_can_keep(tmp_path: Path) -> None:
    with_aof = RedisServer(tmp_path / "aof", appendonly=True)  # appendfsync everysec
    always = RedisServer(
        tmp_path / "always", appendonly=True, extra_args=["--appendfsync", "always"]
    )
    without = RedisServer(tmp_path / "none", appendonly=False)
    try:
        durability, promise = probed(with_aof, min_insync=2)
        assert durability == Durability(fsync=True, replicas=1)
        assert "waits for WAITAOF and 1 replica" in promise
        assert "a power loss may take the last second" in promise  # not promised
        durability, promise = probed(always, min_insync=2)
        # Every reply follows its fsync: nothing to wait for but the replica.
        assert durability == Durability(replicas=1)
        assert "appendfsync always" in promise and "survive" in promise and "power loss" in promise
        durability, promise = probed(without)
        assert durability == Durability() and not durability.waits
        assert "no AOF" in promise and "not a Redis restart" in promise
    finally:
        with_aof.stop()
        always.stop()
        without.stop()


def test_too_few_replicas_refuse_the_append_and_a_stalled_one_fails_the_wait(
    tmp_path: Path,
) -> None:
    """As Kafka: with fewer replicas in sync than acks=all needs, the append is refused
    before it is made (NOT_ENOUGH_REPLICAS, retriable, nothing written); a replica in sync
    that then does not confirm in time fails the wait after it (the append stays)."""
    server = RedisServer(tmp_path / "redis", appendonly=True)
    replica: RedisServer | None = None

    async def run() -> None:
        nonlocal replica
        redis = redis_client(server.url)
        log = Log(redis)
        await log.create_topic(TopicConfig("t", 1))
        batch = build_batch([b"fsynced"])
        appended = await log.append("t", 0, [batch], Durability(fsync=True))
        assert appended.base_offsets == [0]
        try:
            await log.append("t", 0, [batch], Durability(fsync=True, replicas=1), 200)
        except NotEnoughReplicas as exc:
            assert "0 of 1 Redis replicas in sync" in str(exc)
        else:
            raise AssertionError("no replica, yet the append was made")
        assert (await log.state("t", 0)).log_end == 1  # nothing written
        replica = RedisServer(
            tmp_path / "replica", extra_args=["--replicaof", "127.0.0.1", str(server.port)]
        )
        deadline = time.monotonic() + 30
        while (await redis.info("replication")).get("slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the replica never came in sync"
            await asyncio.sleep(0.05)
        replica.proc.send_signal(signal.SIGSTOP)  # in sync, but it confirms nothing now
        try:
            started = time.monotonic()
            await log.append("t", 0, [batch], Durability(fsync=True, replicas=1), 200)
        except NotDurable as exc:
            assert "0 of 1 Redis replicas" in str(exc)
        else:
            raise AssertionError("a stalled replica, yet the wait succeeded")
        finally:
            replica.proc.send_signal(signal.SIGCONT)
        assert time.monotonic() - started < 5  # the wait's timeout, not forever
        assert (await log.state("t", 0)).log_end == 2  # appended all the same
        await redis.aclose()

    try:
        asyncio.run(run())
    finally:
        if replica is not None:
            replica.stop()
        server.stop()


def test_acks_all_through_the_broker_with_and_without_a_replica(tmp_path: Path) -> None:
    primary = RedisServer(tmp_path / "primary", appendonly=True)
    broker = Broker(primary.url, tmp_path / "broker", extra_args=["--min-insync-replicas", "2"])
    replica = None
    try:
        assert "acks=all: Valkey" in broker.stderr() or "acks=all: Redis" in broker.stderr()
        with Connection(broker.bootstrap) as c:
            c.create_topic("durable")
            pid, epoch = c.init_producer_id()
            batch = build_batch([b"once"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
            answer = c.request(produce_request("durable", {0: batch}, acks=-1, timeout_ms=300))
            [partition] = answer.responses[0].partition_responses
            assert partition.error_code == ErrorCode.not_enough_replicas  # nothing written
            assert c.list_offset("durable", 0).offset == 0
            replica = RedisServer(
                tmp_path / "replica",
                appendonly=True,
                extra_args=["--replicaof", "127.0.0.1", str(primary.port)],
            )
            deadline = time.monotonic() + 30
            while True:  # the client's retry of the same batch, once the replica is in sync
                answer = c.request(produce_request("durable", {0: batch}, acks=-1, timeout_ms=1000))
                [partition] = answer.responses[0].partition_responses
                if partition.error_code == ErrorCode.none:
                    break
                assert partition.error_code in (
                    ErrorCode.not_enough_replicas,  # the replica is not in sync yet
                    ErrorCode.not_enough_replicas_after_append,
                )
                assert time.monotonic() < deadline, "the replica never acknowledged"
            assert partition.base_offset == 0  # the retry was not appended again
            records = c.fetch("durable", 0, 0).records
            assert [v for b in split_batches(records) for v in decode_values(b)] == [b"once"]
    finally:
        broker.stop()
        if replica is not None:
            replica.stop()
        primary.stop()
