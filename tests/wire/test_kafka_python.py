"""kafka-python against the server: produce with every codec it has (idempotent by default),
consume with manual assignment, admin, and cross-checks with the CLI."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from tests.wire.common import (
    CODECS,
    PARTITIONS,
    Rec,
    by_position,
    check_codec,
    cli_lines_input,
    cli_records,
    sample,
    stored_batches,
)

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka import codec as kafka_codec  # noqa: E402
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic  # noqa: E402
from kafka.errors import (  # noqa: E402
    TopicAlreadyExistsError,
    TransactionalIdAuthorizationFailedError,
)

TIMEOUT = 30.0
CODEC_PACKAGES = {
    "snappy": (kafka_codec.has_snappy, "python-snappy"),
    "lz4": (kafka_codec.has_lz4, "lz4"),
    "zstd": (kafka_codec.has_zstd, "zstandard"),
}


@pytest.fixture
def sample_records() -> list[Rec]:
    """kafka-python refuses null header values."""
    return sample(null_header_values=False)


def common(broker) -> dict:
    return {
        "bootstrap_servers": broker.bootstrap,
        "client_id": "wire-tests-kafka-python",
        "request_timeout_ms": int(TIMEOUT * 1000),
    }


def produce(broker, topic: str, records: list[Rec], compression: str, **config) -> None:
    producer = KafkaProducer(
        **common(broker),
        compression_type=None if compression == "none" else compression,
        linger_ms=20,
        max_block_ms=int(TIMEOUT * 1000),
        **config,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        producer.flush(timeout=TIMEOUT)
        metadata = [f.get(timeout=TIMEOUT) for f in futures]
    finally:
        producer.close(timeout=10)
    assert [(m.partition, m.offset) for m in metadata] == [(r.partition, r.offset) for r in records]


def consume(broker, topic: str, partitions: int, count: int, start: int | None = None) -> list[Rec]:
    consumer = KafkaConsumer(
        **common(broker),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    try:
        assignment = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assignment)
        for tp in assignment:
            if start is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, start)
        out: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=500).values():
                for m in messages:
                    assert m.timestamp_type == 0, m  # CreateTime
                    out.append(
                        Rec(
                            partition=m.partition,
                            offset=m.offset,
                            timestamp=m.timestamp,
                            key=m.key,
                            value=m.value,
                            headers=tuple(m.headers),
                        )
                    )
        assert len(out) == count, f"got {len(out)} of {count} records"
        assert not any(consumer.poll(timeout_ms=300).values())
        return by_position(out)
    finally:
        consumer.close()


def admin(broker) -> KafkaAdminClient:
    return KafkaAdminClient(**common(broker))


def create_topic(broker, topic: str, partitions: int = PARTITIONS) -> None:
    client = admin(broker)
    try:
        client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        client.close()


@pytest.mark.parametrize("compression", CODECS)
def test_produce_and_consume(broker, topic_name, sample_records, compression):
    if compression in CODEC_PACKAGES:
        available, package = CODEC_PACKAGES[compression]
        if not available():
            pytest.skip(f"kafka-python needs the {package} package for {compression}")
    topic = topic_name(compression)
    create_topic(broker, topic)
    produce(broker, topic, sample_records, compression)
    assert consume(broker, topic, PARTITIONS, len(sample_records)) == by_position(sample_records)
    check_codec(broker.bootstrap, topic, compression)
    assert cli_records(broker, topic) == by_position(sample_records)


def test_idempotent_by_default(broker, topic_name, sample_records):
    """kafka-python turns idempotence on for brokers >= 0.11: the batches carry the
    producer id from InitProducerId and sequence numbers from 0."""
    from kafkaesque.records import read_header

    topic = topic_name()
    create_topic(broker, topic)
    produce(broker, topic, sample_records, "gzip")
    for p in range(PARTITIONS):
        headers = [read_header(b) for b in stored_batches(broker.bootstrap, topic, p)]
        assert headers[0].producer_id >= 0, "the producer was not idempotent"
        assert headers[0].base_sequence == 0
    assert consume(broker, topic, PARTITIONS, len(sample_records)) == by_position(sample_records)


def test_transactional_producer_is_refused(broker):
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="tx")
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)


def test_not_idempotent(broker, topic_name, sample_records):
    topic = topic_name()
    create_topic(broker, topic)
    produce(broker, topic, sample_records, "none", enable_idempotence=False, acks=1)
    assert consume(broker, topic, PARTITIONS, len(sample_records)) == by_position(sample_records)


def test_consume_from_an_offset(broker, topic_name, sample_records):
    topic = topic_name()
    create_topic(broker, topic)
    produce(broker, topic, sample_records, "none")
    wanted = [r for r in by_position(sample_records) if r.offset >= 3]
    assert consume(broker, topic, PARTITIONS, len(wanted), start=3) == wanted


def test_offsets_for_times_and_end_offsets(broker, topic_name, sample_records):
    topic = topic_name()
    create_topic(broker, topic)
    produce(broker, topic, sample_records, "none")
    consumer = KafkaConsumer(**common(broker), group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
        per_partition = len(sample_records) // PARTITIONS
        assert ends == {tp: per_partition for tp in tps}
        assert starts == {tp: 0 for tp in tps}
        # The first record at or after the timestamp of record (p, 2).
        wanted = {r.partition: r for r in sample_records if r.offset == 2}
        found = consumer.offsets_for_times({tp: wanted[tp.partition].timestamp for tp in tps})
        for tp in tps:
            assert found[tp].offset == 2, found
            assert found[tp].timestamp == wanted[tp.partition].timestamp
    finally:
        consumer.close()


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
    client = admin(broker)
    try:
        client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        assert topic in client.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        (described,) = client.describe_topics([topic])
        assert described["error_code"] == ErrorCode.none, described
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1]

        client.create_partitions({topic: NewPartitions(total_count=3)})
        (described,) = client.describe_topics([topic])
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]

        client.delete_topics([topic])
        assert topic not in client.list_topics()
    finally:
        client.close()
    assert topic not in broker.cli("topics").stdout.decode().split()


def test_admin_describe_configs(broker, topic_name):
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = topic_name()
    create_topic(broker, topic, 1)
    client = admin(broker)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        configs = client.describe_configs([resource], config_filter="all")
    finally:
        client.close()
    assert configs["topic"][topic], configs


def test_admin_describe_cluster(broker):
    client = admin(broker)
    try:
        cluster = client.describe_cluster()
    finally:
        client.close()
    assert [b["broker_id"] for b in cluster["brokers"]] == [0], cluster
    assert cluster["controller_id"] == 0
