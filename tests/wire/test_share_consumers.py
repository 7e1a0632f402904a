"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka's share
consumer): several consumers of one share group on a one-partition topic accept every
record exactly once; released records come back, rejected ones never; a poison record
stops at the delivery limit; a SIGKILLed consumer's records come to the others once its
locks expire; a classic consumer group reads the same topic on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tests.kafka_client import Connection
from tests.wire.common import FAST_GROUP_ARGS, create_topic, produce_numbered, value_of
from tests.wire.test_share_raw import describe_offsets

pytestmark = pytest.mark.clients
# Short locks by default (a group may set longer ones): a dead consumer's records come
# back within seconds.
LOCK_MS = 1500
BROKER_ARGS = (*FAST_GROUP_ARGS, "--config", f"group.share.record.lock.duration.ms={LOCK_MS}")
DEADLINE = 30.0  # seconds any one scenario may take at most


def configure(bootstrap: str, group: str, **configs: str) -> None:
    """Set the share group's configs (IncrementalAlterConfigs on the GROUP resource)."""
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {"share_auto_offset_reset": "earliest", **configs}.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def share_consumer(
    bootstrap: str, group: str, topic: str, explicit: bool = False, **more: object
) -> ShareConsumer:
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "group.id": group, **more}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    consumer = ShareConsumer(config)
    consumer.subscribe([topic])
    return consumer


def setup(broker: Any, topic_name: Any, records: int, **configs: str) -> tuple[str, str]:
    topic = topic_name()
    group = f"share-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 1, 0, records, batch=50)
    configure(broker.bootstrap, group, **configs)
    return topic, group


def test_consumers_of_one_share_group_accept_every_record_once(broker, topic_name):
    records = 600
    # Locks long enough that no record is redelivered without a failure.
    topic, group = setup(broker, topic_name, records, share_record_lock_duration_ms="30000")
    accepted: list[list[bytes]] = [[], [], []]
    done = threading.Event()

    def run(i: int) -> None:
        # 50 records a poll (one batch), each poll's records handled for a moment: the
        # others acquire the next batches meanwhile.
        consumer = share_consumer(broker.bootstrap, group, topic, **{"max.poll.records": 50})
        try:
            while not done.is_set():
                messages = consumer.poll(0.5)
                for message in messages:
                    assert message.error() is None, message.error()
                    accepted[i].append(message.value())
                    assert message.delivery_count() == 1
                if messages:
                    time.sleep(0.02)
            consumer.commit_sync()  # implicit mode: what the last poll gave is accepted
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(accepted))]
    for t in threads:
        t.start()
    start = time.monotonic()
    while sum(map(len, accepted)) < records and time.monotonic() - start < DEADLINE:
        time.sleep(0.1)
    done.set()
    for t in threads:
        t.join()
    every = Counter(v for values in accepted for v in values)
    assert set(every) == {value_of(i).encode() for i in range(records)}
    assert max(every.values()) == 1  # none twice
    assert sum(1 for a in accepted if a) > 1  # shared, not one consumer's alone


def test_released_records_come_back_and_rejected_ones_never(broker, topic_name):
    records = 30
    # Locks long enough that only releases bring records back.
    topic, group = setup(broker, topic_name, records, share_record_lock_duration_ms="30000")
    consumer = share_consumer(broker.bootstrap, group, topic, explicit=True)
    deliveries: Counter[bytes] = Counter()
    accepted: set[bytes] = set()
    try:
        start = time.monotonic()
        while len(accepted) < 20 and time.monotonic() - start < DEADLINE:
            for message in consumer.poll(0.5):
                value = message.value()
                deliveries[value] += 1
                assert message.delivery_count() == deliveries[value]
                number = int(value.decode().split("-")[-1]) if b"-" in value else 0
                kind = number % 3
                if kind == 1 and deliveries[value] == 1:
                    consumer.acknowledge(message, AcknowledgeType.RELEASE)
                elif kind == 2:
                    consumer.acknowledge(message, AcknowledgeType.REJECT)
                else:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    accepted.add(value)
            consumer.commit_sync()
        # A little longer: nothing rejected may come back.
        for _ in range(3):
            for message in consumer.poll(0.3):
                deliveries[message.value()] += 1
                consumer.acknowledge(message)
            consumer.commit_sync()
    finally:
        consumer.close()
    values = [value_of(i).encode() for i in range(records)]
    ones = {v for v in values if int(v.decode().split("-")[-1]) % 3 == 1}
    twos = {v for v in values if int(v.decode().split("-")[-1]) % 3 == 2}
    assert accepted == set(values) - twos
    assert all(deliveries[v] == 2 for v in ones)  # released once, delivered again
    assert all(deliveries[v] == 1 for v in twos)  # rejected: archived


def test_a_poison_record_stops_at_the_delivery_limit(broker, topic_name):
    limit = 3
    topic, group = setup(
        broker,
        topic_name,
        5,
        share_delivery_count_limit=str(limit),
        share_record_lock_duration_ms="30000",
    )
    poison = value_of(2).encode()
    consumer = share_consumer(broker.bootstrap, group, topic, explicit=True)
    deliveries: Counter[bytes] = Counter()
    try:
        start = time.monotonic()
        while time.monotonic() - start < DEADLINE:
            messages = consumer.poll(0.5)
            for message in messages:
                deliveries[message.value()] += 1
                kind = (
                    AcknowledgeType.RELEASE if message.value() == poison else AcknowledgeType.ACCEPT
                )
                consumer.acknowledge(message, kind)
            consumer.commit_sync()
            if deliveries[poison] >= limit and not messages:
                break
    finally:
        consumer.close()
    assert deliveries[poison] == limit  # then archived, never delivered again
    assert all(deliveries[value_of(i).encode()] == 1 for i in (0, 1, 3, 4))


CONSUMER_SCRIPT = """
import sys
from confluent_kafka import ShareConsumer
consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                          "share.acknowledgement.mode": "explicit"})
consumer.subscribe([sys.argv[3]])
held = 0
while held == 0:
    held = len(consumer.poll(1.0))
print(held, flush=True)
sys.stdin.read()  # holds its records, unacknowledged, until killed
"""


def test_a_killed_consumers_records_go_to_the_others_after_the_lock(broker, topic_name):
    records = 40
    topic, group = setup(broker, topic_name, records)
    victim = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CONSUMER_SCRIPT), broker.bootstrap, group, topic],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        assert victim.stdout is not None
        held = int(victim.stdout.readline())
        assert held > 0
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    consumer = share_consumer(broker.bootstrap, group, topic)
    deliveries: dict[bytes, int] = {}
    try:
        start = time.monotonic()
        while len(deliveries) < records and time.monotonic() - start < DEADLINE:
            for message in consumer.poll(0.5):
                deliveries[message.value()] = message.delivery_count()
        consumer.commit_sync()
    finally:
        consumer.close()
    assert set(deliveries) == {value_of(i).encode() for i in range(records)}  # none lost
    # The victim's records came back after its locks expired: their second delivery (it
    # may have acquired more than the poll it printed handed over).
    assert list(deliveries.values()).count(2) >= held
    assert set(deliveries.values()) <= {1, 2}


def test_a_classic_group_and_a_share_group_read_the_same_topic(broker, topic_name):
    records = 50
    topic, group = setup(broker, topic_name, records, share_record_lock_duration_ms="30000")
    classic = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group + "-classic",
            "auto.offset.reset": "earliest",
        }
    )
    classic.subscribe([topic])
    share = share_consumer(broker.bootstrap, group, topic)
    from_classic: list[bytes] = []
    from_share: list[bytes] = []
    try:
        start = time.monotonic()
        while (len(from_classic) < records or len(from_share) < records) and (
            time.monotonic() - start < DEADLINE
        ):
            for message in classic.consume(100, 0.2):
                if message.error() is None:
                    from_classic.append(message.value())
            from_share += [m.value() for m in share.poll(0.2)]
        share.commit_sync()
    finally:
        classic.close()
        share.close()
    expected = [value_of(i).encode() for i in range(records)]
    assert from_classic == expected
    assert sorted(from_share) == sorted(expected)


def test_read_committed_share_consumers_never_get_aborted_records(broker, topic_name):
    topic = topic_name()
    group = f"share-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    configure(broker.bootstrap, group, share_isolation_level="read_committed")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    for outcome, values in (("abort", [b"a1", b"a2"]), ("commit", [b"c1", b"c2"])):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value)
        producer.flush(10)
        if outcome == "abort":
            producer.abort_transaction(10)
        else:
            producer.commit_transaction(10)
    consumer = share_consumer(broker.bootstrap, group, topic)
    got: list[bytes] = []
    try:
        start = time.monotonic()
        while len(got) < 2 and time.monotonic() - start < DEADLINE:
            got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
        results = consumer.commit_sync(10) or {}
        assert all(error is None for error in results.values()), results
        got += [m.value() for m in consumer.poll(0.5) if m.error() is None]  # nothing more
    finally:
        consumer.close()
    assert got == [b"c1", b"c2"]
    with Connection(broker.bootstrap) as conn:
        # Every offset done: the aborted records and both markers archived, none left.
        assert describe_offsets(conn, group, topic) == (6, 0)


def test_a_share_group_goes_on_across_a_broker_sigkill(broker, topic_name):
    records = 100
    # 4 s locks: what the consumer held when the broker died comes back within seconds,
    # and no lock expires between a poll and its commit on a slow machine.
    topic, group = setup(broker, topic_name, records, share_record_lock_duration_ms="4000")
    consumer = share_consumer(
        broker.bootstrap, group, topic, explicit=True, **{"max.poll.records": 20}
    )
    accepted: set[bytes] = set()
    killed = False
    try:
        start = time.monotonic()
        while len(accepted) < records and time.monotonic() - start < DEADLINE:
            polled = [m for m in consumer.poll(0.5) if m.error() is None]
            for message in polled:
                assert message.value() not in accepted  # accepted: never delivered again
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            try:
                results = consumer.commit_sync(5) or {}
            except KafkaException:
                results = {None: "failed"}  # the broker was away: maybe not accepted
            if polled and all(error is None for error in results.values()):
                accepted.update(m.value() for m in polled)
            if not killed and len(accepted) >= records // 2:
                broker.proc.kill()  # SIGKILL: no handover, the share sessions are lost
                broker.proc.wait()
                broker.start()
                killed = True
    finally:
        consumer.close()
    assert killed
    assert accepted == {value_of(i).encode() for i in range(records)}  # none lost
