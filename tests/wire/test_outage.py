"""A broker whose Redis goes away for a while: one line when it goes, one when it is
back, no traceback per tick, and Kafka clients served again without a restart."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import decode_values, split_batches
from kafkaesque.records.build import build_batch
from tests.cluster_servers import wait_until
from tests.kafka_client import Connection
from tests.servers import RedisServer
from tests.wire.conftest import Broker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402

OUTAGE_SECONDS = 5


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    delivered = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(120) == 0
    assert delivered == [None] * len(values)


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "outage", "broker.address.family": "v4"}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    try:
        while len(values) < count:
            message = consumer.poll(30)
            assert message is not None, f"only {len(values)} of {count} records came back"
            assert message.error() is None, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_broker_that_loses_redis_logs_it_once_and_serves_again(tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis", appendonly=True)
    broker = Broker(redis_server.url, tmp_path / "broker")
    try:
        before = [b"before %d" % i for i in range(10)]
        produce(broker.bootstrap, "outage", before)
        mark = broker.stderr_size()
        redis_server.stop()
        time.sleep(OUTAGE_SECONDS)  # the group reaper ticks 10 times, notifiers retry
        redis_server.start()
        after = [b"after %d" % i for i in range(10)]
        produce(broker.bootstrap, "outage", after)
        assert consume_all(broker.bootstrap, "outage", 20) == before + after
        assert broker.alive()

        def recovery_told() -> str | None:  # once a second has passed without a failure
            text = broker.stderr(mark)
            return text if "available again" in text else None

        logged = wait_until(recovery_told, 15, "the recovery's log line")
        assert "Traceback" not in logged
        lines = logged.splitlines()
        assert len(lines) <= 4, logged
        # Where and why: refused, or closed or reset by a Redis still shutting down.
        assert re.search(
            r"cannot reach Redis: 127\.0\.0\.1:\d+ "
            r"\(connection (refused|closed by server|reset by peer)\)",
            logged,
        ), logged
        assert "Redis available again after" in logged
    finally:
        broker.stop()
        redis_server.stop()


def test_requests_while_redis_is_away_get_retriable_kafka_errors(tmp_path: Path) -> None:
    """Each request is answered with a retriable code per partition (or group), on the
    same connection; nothing is dropped, and the same connection works once Redis is back."""
    redis_server = RedisServer(tmp_path / "redis", appendonly=True)
    broker = Broker(redis_server.url, tmp_path / "broker")
    try:
        with Connection(broker.bootstrap) as c:
            c.create_topic("away", partitions=2)
            assert c.produce("away", 0, build_batch([b"kept"])).error_code == ErrorCode.none
            mark = broker.stderr_size()
            redis_server.stop()
            for _ in range(3):  # several requests: still one connection, one log line
                produced = c.produce("away", 0, build_batch([b"refused"]))
                assert produced.error_code == ErrorCode.kafka_storage_error
                assert c.fetch("away", 0, 0).error_code == ErrorCode.kafka_storage_error
                assert c.list_offset("away", 1).error_code == ErrorCode.kafka_storage_error
                [topic] = c.metadata(["away"]).topics
                assert topic.error_code == ErrorCode.leader_not_available
                joined = c.join_group("g", topics=["away"])
                assert joined.error_code == ErrorCode.coordinator_not_available
            redis_server.start()
            deadline = time.monotonic() + 20
            while (answer := c.produce("away", 0, build_batch([b"after"]))).error_code:
                assert time.monotonic() < deadline, answer
                time.sleep(0.2)
            fetched = c.fetch("away", 0, 0)
            values = [v for b in split_batches(fetched.records) for v in decode_values(b)]
            assert values == [b"kept", b"after"]
        logged = broker.stderr(mark)
        assert "Traceback" not in logged and len(logged.splitlines()) <= 4, logged
    finally:
        broker.stop()
        redis_server.stop()
