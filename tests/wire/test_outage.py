"""A broker whose Redis goes away for a while: one line when it goes, one when it is
back, no traceback per tick, and Kafka clients served again without a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

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
        logged = broker.stderr(mark)
        assert "Traceback" not in logged
        lines = logged.splitlines()
        assert len(lines) <= 4, logged
        assert "Redis unreachable: 127.0.0.1:" in logged and "(connection refused)" in logged
        assert "Redis reachable again after" in logged
    finally:
        broker.stop()
        redis_server.stop()
