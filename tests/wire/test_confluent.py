"""confluent-kafka (librdkafka) against the server: produce with every codec, consume with
manual assignment, admin, idempotence, and cross-checks with the CLI."""

from __future__ import annotations

import time

import pytest

from tests.wire.common import (
    CODECS,
    PARTITIONS,
    Rec,
    by_position,
    check_codec,
    cli_lines_input,
    cli_records,
    stored_batches,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

TIMEOUT = 30.0


class Logs:
    """librdkafka's log lines, to show in failures."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def error_cb(self, err) -> None:
        self.lines.append(f"error_cb: {err}")

    def __str__(self) -> str:
        return "\n".join(self.lines[-50:])


def base_config(broker, logs: Logs) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap,
        "client.id": "wire-tests-confluent",
        "broker.address.family": "v4",
        "socket.timeout.ms": 10000,
        "error_cb": logs.error_cb,
        "logger": _Logger(logs),
    }


class _Logger:
    """A logging.Logger look-alike for librdkafka's ``logger`` setting."""

    def __init__(self, logs: Logs) -> None:
        self.logs = logs

    def log(self, level: int, fmt: str, *args) -> None:
        self.logs.lines.append(fmt % args if args else fmt)


def produce(broker, topic: str, records: list[Rec], compression: str, **config) -> Logs:
    """Produce in order; check each delivery report's partition and offset."""
    logs = Logs()
    producer = Producer(
        {
            **base_config(broker, logs),
            "compression.type": compression,
            "linger.ms": 50,
            "message.timeout.ms": int(TIMEOUT * 1000),
            **config,
        }
    )
    reports: list = []

    def on_delivery(err, msg):
        reports.append((err, msg))

    for r in records:
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            timestamp=r.timestamp,
            headers=list(r.headers) or None,
            on_delivery=on_delivery,
        )
    remaining = producer.flush(TIMEOUT)
    assert remaining == 0, f"{remaining} messages not delivered; librdkafka log:\n{logs}"
    errors = [err for err, _ in reports if err is not None]
    assert not errors, f"delivery errors {errors}; librdkafka log:\n{logs}"
    delivered = {(m.partition(), m.offset()) for _, m in reports}
    assert delivered == {(r.partition, r.offset) for r in records}, f"log:\n{logs}"
    return logs


def consume(broker, topic: str, partitions: int, count: int, start=OFFSET_BEGINNING) -> list[Rec]:
    """Assign every partition from the start, poll until ``count`` records came."""
    logs = Logs()
    consumer = Consumer(
        {
            **base_config(broker, logs),
            "group.id": "wire-tests-unused",  # required by the binding; no group is joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        out: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                pytest.fail(f"consume error {msg.error()}; librdkafka log:\n{logs}")
            ts_type, ts = msg.timestamp()
            assert ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME
            out.append(
                Rec(
                    partition=msg.partition(),
                    offset=msg.offset(),
                    timestamp=ts,
                    key=msg.key(),
                    value=msg.value(),
                    headers=tuple(msg.headers() or ()),
                )
            )
        assert len(out) == count, f"got {len(out)} of {count} records; log:\n{logs}"
        # Nothing more arrives.
        extra = consumer.poll(0.3)
        assert extra is None or extra.error() is not None, extra
        return by_position(out)
    finally:
        consumer.close()


def admin(broker) -> tuple[AdminClient, Logs]:
    logs = Logs()
    return AdminClient(base_config(broker, logs)), logs


def create_topic(broker, topic: str, partitions: int = PARTITIONS) -> None:
    client, _ = admin(broker)
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=10,
        request_timeout=TIMEOUT,
    )
    futures[topic].result(timeout=TIMEOUT)


@pytest.mark.parametrize("compression", CODECS)
def test_produce_and_consume(broker, topic_name, sample_records, compression):
    topic = topic_name(compression)
    create_topic(broker, topic)
    produce(broker, topic, sample_records, compression)
    assert consume(broker, topic, PARTITIONS, len(sample_records)) == by_position(sample_records)
    check_codec(broker.bootstrap, topic, compression)
    assert cli_records(broker, topic) == by_position(sample_records)


def test_idempotent_producer(broker, topic_name, sample_records):
    topic = topic_name()
    create_topic(broker, topic)
    produce(broker, topic, sample_records, "lz4", **{"enable.idempotence": True})
    assert consume(broker, topic, PARTITIONS, len(sample_records)) == by_position(sample_records)
    # The batches carry the producer id InitProducerId gave and sequences from 0.
    from kafkaesque.records import read_header

    for p in range(PARTITIONS):
        headers = [read_header(b) for b in stored_batches(broker.bootstrap, topic, p)]
        assert headers[0].producer_id >= 0
        assert headers[0].base_sequence == 0
        assert {h.producer_id for h in headers} == {headers[0].producer_id}


def test_transactions_fail_at_once_with_a_clear_error(broker):
    """No transactions here: init_transactions() fails at once (a fatal error), rather
    than retrying a coordinator lookup until its timeout."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx"})
    started = time.monotonic()
    with pytest.raises(confluent_kafka.KafkaException, match="transactions are not supported"):
        producer.init_transactions(TIMEOUT)
    assert time.monotonic() - started < TIMEOUT / 2


def test_auto_created_topic(broker, topic_name):
    """Producing to an unknown topic creates it (one partition) through Metadata."""
    topic = topic_name()
    records = [Rec(0, i, 1_700_000_000_000 + i, None, b"auto-%d" % i) for i in range(5)]
    produce(broker, topic, records, "none")
    assert consume(broker, topic, 1, 5) == records


def test_consume_from_an_offset(broker, topic_name, sample_records):
    topic = topic_name()
    create_topic(broker, topic)
    produce(broker, topic, sample_records, "gzip")
    wanted = [r for r in by_position(sample_records) if r.offset >= 4]
    assert consume(broker, topic, PARTITIONS, len(wanted), start=4) == wanted


def test_cli_produce_client_consume(broker, topic_name):
    topic = topic_name()
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    lines = cli_lines_input()
    broker.cli("produce", topic, "--key-separator", ":", input=lines)
    expected = cli_records(broker, topic)
    assert len(expected) == lines.count(b"\n")
    assert consume(broker, topic, PARTITIONS, len(expected)) == expected


def test_admin_create_list_delete(broker, topic_name):
    topic = topic_name()
    client, logs = admin(broker)
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=4, replication_factor=1)], request_timeout=TIMEOUT
    )
    futures[topic].result(timeout=TIMEOUT)
    meta = client.list_topics(timeout=TIMEOUT)
    assert topic in meta.topics, f"log:\n{logs}"
    assert sorted(meta.topics[topic].partitions) == [0, 1, 2, 3]
    assert meta.topics[topic].partitions[0].leader == 0
    assert [b.id for b in meta.brokers.values()] == [0]

    # Creating it again fails with TOPIC_ALREADY_EXISTS.
    again = client.create_topics([NewTopic(topic, 1, 1)], request_timeout=TIMEOUT)
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        again[topic].result(timeout=TIMEOUT)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    # More partitions.
    more = client.create_partitions([NewPartitions(topic, 6)], request_timeout=TIMEOUT)
    more[topic].result(timeout=TIMEOUT)
    meta = client.list_topics(topic, timeout=TIMEOUT)
    assert sorted(meta.topics[topic].partitions) == list(range(6)), f"log:\n{logs}"

    # The broker's defaults (CreateTopics v4): its --default-partitions, replication 1.
    defaulted = topic_name()
    client.create_topics([NewTopic(defaulted)], request_timeout=TIMEOUT)[defaulted].result(
        timeout=TIMEOUT
    )
    meta = client.list_topics(defaulted, timeout=TIMEOUT)
    assert len(meta.topics[defaulted].partitions) == 1, f"log:\n{logs}"

    deleted = client.delete_topics([topic, defaulted], request_timeout=TIMEOUT)
    deleted[topic].result(timeout=TIMEOUT)
    deleted[defaulted].result(timeout=TIMEOUT)
    assert topic not in broker.cli("topics").stdout.decode().split()
    meta = client.list_topics(timeout=TIMEOUT)
    assert topic not in meta.topics


def test_admin_describe_configs_and_cluster(broker, topic_name):
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = topic_name()
    create_topic(broker, topic, 1)
    client, logs = admin(broker)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = client.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(
        timeout=TIMEOUT
    )
    assert configs, f"no configs; log:\n{logs}"
    cluster = client.describe_cluster(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
    assert [n.id for n in cluster.nodes] == [0]
    assert cluster.controller.id == 0
