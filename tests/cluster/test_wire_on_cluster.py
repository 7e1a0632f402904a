"""Kafka clients through brokers whose hot tier is a 3-primary Redis Cluster: two
brokers on it, confluent-kafka and kafka-python producing and consuming in a group."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from kafkaesque.hot.slots import slot_of
from tests.cluster_servers import ClusterServers
from tests.kafka_client import Connection
from tests.wire.conftest import Broker

OPTIONS = ("--broker-session-timeout-ms", "3000", "--broker-heartbeat-interval-ms", "300")


@pytest.fixture
def brokers(empty_cluster: ClusterServers, tmp_path: Path) -> Iterator[list[Broker]]:
    started = [
        Broker(empty_cluster.cluster_url, tmp_path / f"b{n}", ("--node-id", str(n), *OPTIONS))
        for n in (1, 2)
    ]
    yield started
    for broker in started:
        assert broker.stop() == 0, broker.stderr()
        assert "Traceback" not in broker.stderr(), broker.stderr()


def _wait_for_both(broker: Broker) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with Connection(broker.bootstrap) as connection:
            if {b.node_id for b in connection.metadata(None).brokers} == {1, 2}:
                return
        time.sleep(0.1)
    raise AssertionError("the brokers did not see each other")


def test_confluent_and_kafka_python_on_a_cluster(brokers: list[Broker]) -> None:
    first, second = brokers
    _wait_for_both(first)
    first.cli("create", "orders", "--partitions", "6")
    producer = Producer({"bootstrap.servers": first.bootstrap, "enable.idempotence": True})
    for i in range(600):
        producer.produce("orders", value=b"c%d" % i, key=b"k%d" % (i % 17))
    assert producer.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=second.bootstrap, acks="all")
    for i in range(60):
        kp.send("orders", value=b"p%d" % i)
    kp.flush(30)
    kp.close()
    expected = {b"c%d" % i for i in range(600)} | {b"p%d" % i for i in range(60)}
    consumer = Consumer(
        {
            "bootstrap.servers": second.bootstrap,
            "group.id": "on-cluster",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["orders"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(expected) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(seen) == sorted(expected)
    # The group's offsets are committed: kafka-python in the same group reads nothing new.
    kc = KafkaConsumer(
        "orders",
        bootstrap_servers=first.bootstrap,
        group_id="on-cluster",
        consumer_timeout_ms=3000,
    )
    assert [m.value for m in kc] == []
    kc.close()
    # Every record is where the CLI reads it too.
    lines = first.cli("consume", "orders").stdout.split()
    assert sorted(lines) == sorted(expected)


def test_transactions_on_a_cluster(brokers: list[Broker]) -> None:
    """A transactional producer (its coordinator's state in the id's own slot) commits one
    transaction and aborts another; read_committed sees only the committed one."""
    first, second = brokers
    _wait_for_both(first)
    first.cli("create", "payments", "--partitions", "3")
    producer = Producer({"bootstrap.servers": first.bootstrap, "transactional.id": "pay-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("payments", value=b"ok%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("payments", value=b"no%d" % i, partition=i % 3)
    assert producer.flush(30) == 0  # written, then aborted (unsent ones would just go)
    producer.abort_transaction(30)
    consumer = Consumer(
        {
            "bootstrap.servers": second.bootstrap,
            "group.id": "payments",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["payments"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 30 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    extra = consumer.poll(2)  # nothing of the aborted transaction follows
    consumer.close()
    assert sorted(seen) == sorted(b"ok%d" % i for i in range(30))
    assert extra is None or extra.error() is not None
    listed = first.cli("transactions", "describe", "pay-1").stdout.decode()
    assert "CompleteAbort" in listed


RETRIED = {KafkaError.KAFKA_STORAGE_ERROR, KafkaError.NOT_LEADER_FOR_PARTITION}


def _watermark_end(consumer: Consumer, tp: TopicPartition) -> int:
    """The partition's high watermark, asked again while the broker answers a retriable
    error (a command in flight when a migration's new slot map dropped its connection is
    KAFKA_STORAGE_ERROR, which a client retries; this query is a direct one that does not)."""
    for _ in range(20):
        try:
            return consumer.get_watermark_offsets(tp, 10)[1]
        except KafkaException as exc:
            # librdkafka does not mark a direct query's error retriable (retriable() is
            # False for KAFKA_STORAGE_ERROR here); Kafka's protocol says it is.
            if not exc.args[0].retriable() and exc.args[0].code() not in RETRIED:
                raise
            time.sleep(0.5)
    return consumer.get_watermark_offsets(tp, 10)[1]


def test_slots_moved_while_producing_lose_and_duplicate_nothing(
    empty_cluster: ClusterServers, brokers: list[Broker]
) -> None:
    """Atomic slot migrations (Valkey 9) of the partitions' slots, back and forth, while an
    idempotent acks=all producer writes: every acknowledged record is in the log once, in
    the order it was produced."""
    first, _ = brokers
    _wait_for_both(first)
    first.cli("create", "moving", "--partitions", "4")
    acked: list[tuple[int, bytes]] = []
    failed: list[str] = []
    stop = threading.Event()

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acked.append((message.partition(), message.value()))
        else:
            failed.append(str(error))

    def produce() -> None:
        producer = Producer(
            {"bootstrap.servers": first.bootstrap, "enable.idempotence": True, "linger.ms": 2}
        )
        i = 0
        while not stop.is_set():
            producer.produce("moving", value=b"m%06d" % i, partition=i % 4, on_delivery=delivered)
            producer.poll(0.001)
            i += 1
        producer.flush(60)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        nodes = empty_cluster.nodes()
        for round_ in range(3):
            for p in (0, 1):
                slot = slot_of("moving", p)
                owner = empty_cluster.owner(slot)
                target = next(n for n in nodes[round_ % 3 :] + nodes if n is not owner)
                empty_cluster.migrate_slots(slot, slot, target)
            time.sleep(0.3)
    finally:
        stop.set()
        thread.join(90)
    assert not failed, failed[:3]
    assert len(acked) > 500
    consumer = Consumer({"bootstrap.servers": first.bootstrap, "group.id": "check"})
    logged: dict[int, list[bytes]] = {}
    for p in range(4):
        end = _watermark_end(consumer, TopicPartition("moving", p))
        consumer.assign([TopicPartition("moving", p, 0)])
        values: list[bytes] = []
        while len(values) < end:
            message = consumer.poll(5)
            assert message is not None, f"partition {p}: {len(values)} of {end}"
            if message.error() is None:
                values.append(message.value())
        logged[p] = values
    consumer.close()
    for p, values in logged.items():
        assert len(values) == len(set(values)), f"partition {p} has duplicates"
        assert values == sorted(values), f"partition {p} is out of order"
        mine = [v for q, v in acked if q == p]
        assert set(mine) <= set(values), f"partition {p} lost acknowledged records"
