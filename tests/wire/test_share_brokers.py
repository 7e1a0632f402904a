"""A share group across a leader move (KIP-932): two brokers on one Redis, a
confluent-kafka ShareConsumer bootstrapped to both, the partition's leader stopped halfway
(SIGTERM hands its partitions over): the consumer goes on with the other broker, whose
share-partition state is the same (it is Redis'). Every record is accepted, none that was
accepted is delivered again."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection
from tests.servers import RedisServer
from tests.wire.common import create_topic, value_of
from tests.wire.conftest import Broker
from tests.wire.test_share_consumers import configure

pytestmark = pytest.mark.clients
OPTIONS = ("--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "300")
OPTIONS += ("--config", "group.share.record.lock.duration.ms=4000")
# At most 20 records in flight: the consumer takes them 20 at a time, on both brokers.
OPTIONS += ("--config", "group.share.partition.max.record.locks=20")
RECORDS = 200
DEADLINE = 40.0


def leader(bootstrap: str, topic: str) -> int:
    with Connection(bootstrap) as conn:
        [entry] = conn.metadata([topic]).topics
    assert entry.error_code == ErrorCode.none, entry
    return entry.partitions[0].leader_id


def test_a_share_group_goes_on_across_a_leader_move(tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis")
    brokers = {
        n: Broker(redis_server.url, tmp_path / f"b{n}", ("--node-id", str(n), *OPTIONS))
        for n in (1, 2)
    }
    try:
        first = brokers[1].bootstrap
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        topic, group = "moving", "share-moving"
        create_topic(first, topic, 1)
        producer = Producer({"bootstrap.servers": bootstrap})  # to the partition's leader
        for i in range(RECORDS):
            producer.produce(topic, value_of(i).encode())
        assert producer.flush(30) == 0
        configure(first, group)
        consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
            }
        )
        consumer.subscribe([topic])
        deliveries: Counter[bytes] = Counter()
        accepted: set[bytes] = set()
        moved = False
        try:
            start = time.monotonic()
            while len(accepted) < RECORDS and time.monotonic() - start < DEADLINE:
                polled = [m for m in consumer.poll(0.5) if m.error() is None]
                for message in polled:
                    deliveries[message.value()] += 1
                    assert message.value() not in accepted  # accepted: never again
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                results = consumer.commit_sync(10) or {}
                if polled and all(error is None for error in results.values()):
                    accepted.update(m.value() for m in polled)
                if not moved and len(accepted) >= RECORDS // 2:
                    old = leader(first, topic)
                    brokers[old].stop()  # hands the partition over
                    (other,) = [b for n, b in brokers.items() if n != old]
                    assert leader(other.bootstrap, topic) not in (old, -1)
                    before = len(accepted)
                    moved = True
        finally:
            consumer.close()
        assert moved and len(accepted) > before  # the other broker served the rest
        assert accepted == {value_of(i).encode() for i in range(RECORDS)}
        for b in brokers.values():
            assert "Traceback" not in b.stderr()
    finally:
        for b in brokers.values():
            b.stop()
        redis_server.stop()
