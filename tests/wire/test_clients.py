"""What every client library does alike against the server, each scenario parametrized over
the libraries that have it (adapters: tests.wire.clients): produce and consume with every
codec, idempotent producers, consuming from an offset, records the CLI produced,
auto-created topics, offset lookups, topic admin, and transactional producers. What only one
library does is in its own module (test_kafka_python.py, test_kcat.py, ...)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import read_header
from tests.kafka_client import Connection
from tests.wire.clients import Client, params, params_with
from tests.wire.common import (
    BASE_TIMESTAMP,
    CODECS,
    PARTITIONS,
    Rec,
    by_position,
    check_codec,
    cli_lines_input,
    cli_records,
    stored_batches,
)

PYTHON = ("kafka-python", "aiokafka", "confluent")


@pytest.mark.parametrize(
    ("client", "codec"),
    params_with(
        {
            "kafka-python": CODECS,
            "aiokafka": CODECS,
            "confluent": CODECS,
            "kafkajs": ["none", "gzip"],  # the codecs kafkajs has without plug-ins
        }
    ),
    indirect=["client"],
)
def test_produce_and_consume(client: Client, topic_name, codec: str) -> None:
    """The records come back as sent (null and empty keys, values and headers, binary bytes,
    timestamps), stored with the codec the producer used; the CLI reads the same."""
    records = client.sample()
    topic = topic_name(codec)
    client.create_topic(topic, PARTITIONS)
    client.produce(topic, records, codec)
    assert client.consume(topic, PARTITIONS, len(records)) == by_position(records)
    check_codec(client.bootstrap, topic, codec, librdkafka=client.name == "confluent")
    assert cli_records(client.broker, topic) == by_position(records)


@pytest.mark.parametrize(
    ("client", "codec"),
    params_with(
        {"kafka-python": ["gzip"], "aiokafka": ["zstd"], "confluent": ["lz4"], "kafkajs": ["gzip"]}
    ),
    indirect=["client"],
)
def test_idempotent_producer(client: Client, topic_name, codec: str) -> None:
    """The batches carry the producer id InitProducerId gave and sequences from 0 (for
    kafka-python, which turns idempotence on by itself for brokers >= 0.11, by default)."""
    records = client.sample()
    topic = topic_name()
    client.create_topic(topic, PARTITIONS)
    client.produce(topic, records, codec, **client.idempotent)
    assert client.consume(topic, PARTITIONS, len(records)) == by_position(records)
    for p in range(PARTITIONS):
        headers = [read_header(b) for b in stored_batches(client.bootstrap, topic, p)]
        assert headers[0].producer_id >= 0, "the producer was not idempotent"
        assert headers[0].base_sequence == 0
        assert {h.producer_id for h in headers} == {headers[0].producer_id}


@pytest.mark.parametrize(
    ("client", "codec", "start"),
    params_with(
        {
            "kafka-python": [("none", 3)],
            "aiokafka": [("snappy", 5)],
            "confluent": [("gzip", 4)],
            "kafkajs": [("none", 3)],
        }
    ),
    indirect=["client"],
)
def test_consume_from_an_offset(client: Client, topic_name, codec: str, start: int) -> None:
    records = client.sample()
    topic = topic_name()
    client.create_topic(topic, PARTITIONS)
    client.produce(topic, records, codec)
    wanted = [r for r in by_position(records) if r.offset >= start]
    assert client.consume(topic, PARTITIONS, len(wanted), start=start) == wanted


@pytest.mark.parametrize("client", params(*PYTHON, "kafkajs", "kcat"), indirect=True)
def test_cli_produce_client_consume(client: Client, topic_name) -> None:
    """Lines the CLI produced (null and empty keys, empty values) read as the CLI reads them."""
    topic = topic_name()
    client.broker.cli("create", topic, "--partitions", str(PARTITIONS))
    lines = cli_lines_input()
    client.broker.cli("produce", topic, "--key-separator", ":", input=lines)
    expected = cli_records(client.broker, topic)
    assert len(expected) == lines.count(b"\n")
    assert client.consume(topic, PARTITIONS, len(expected)) == expected


@pytest.mark.parametrize(
    ("client", "key", "count"),
    params_with({"confluent": [(None, 5)], "kafkajs": [(b"k", 4)]}),
    indirect=["client"],
)
def test_auto_created_topic(client: Client, topic_name, key: bytes | None, count: int) -> None:
    """Producing to an unknown topic creates it, with one partition, through Metadata."""
    topic = topic_name()
    records = [Rec(0, i, BASE_TIMESTAMP + i, key, b"auto-%d" % i) for i in range(count)]
    client.produce(topic, records)
    assert client.consume(topic, 1, count) == records
    with Connection(client.bootstrap) as conn:
        (created,) = conn.metadata([topic]).topics
    assert [p.partition_index for p in created.partitions] == [0], created


@pytest.mark.parametrize(
    ("client", "offset"), params_with({"kafka-python": [2], "aiokafka": [4]}), indirect=["client"]
)
def test_offset_lookups(client: Client, topic_name, offset: int) -> None:
    """Each partition's first and end offsets, and the first record at or after a time."""
    records = client.sample()
    topic = topic_name()
    client.create_topic(topic, PARTITIONS)
    client.produce(topic, records)
    wanted = {r.partition: r for r in records if r.offset == offset}
    starts, ends, found = client.offset_lookups(
        topic, PARTITIONS, {p: r.timestamp for p, r in wanted.items()}
    )
    assert starts == dict.fromkeys(range(PARTITIONS), 0)
    assert ends == dict.fromkeys(range(PARTITIONS), len(records) // PARTITIONS)
    assert found == {p: (offset, r.timestamp) for p, r in wanted.items()}, found


@pytest.mark.parametrize(
    ("client", "initial", "grown"),
    params_with({"kafka-python": [(2, 3)], "aiokafka": [(2, 5)], "confluent": [(4, 6)]}),
    indirect=["client"],
)
def test_admin_create_list_delete(client: Client, topic_name, initial: int, grown: int) -> None:
    """Create a topic, not twice; list it; give it more partitions; delete it."""
    topic = topic_name()
    client.create_topic(topic, initial)
    assert topic in client.list_topics()
    assert client.create_again(topic) == ErrorCode.topic_already_exists
    assert client.partitions(topic) == list(range(initial))
    client.create_partitions(topic, grown)
    assert client.partitions(topic) == list(range(grown))
    client.delete_topics([topic])
    assert topic not in client.list_topics()
    assert topic not in client.broker.cli("topics").stdout.decode().split()


@pytest.mark.parametrize("client", params(*PYTHON), indirect=True)
def test_admin_describe_topic_configs(client: Client, topic_name) -> None:
    topic = topic_name()
    client.create_topic(topic, 1)
    configs = client.topic_configs(topic)
    assert "retention.ms" in configs, configs


@pytest.mark.parametrize("client", params("kafka-python", "confluent"), indirect=True)
def test_admin_describe_cluster(client: Client) -> None:
    """One broker, id 0, which is the controller."""
    assert client.cluster() == ([0], 0)


@pytest.mark.parametrize("client", params("kafka-python", "confluent"), indirect=True)
def test_transactions_init(client: Client) -> None:
    """init_transactions() finds this broker as the transaction coordinator and gets a
    producer id (tests/wire/test_transactions.py has the transactions themselves)."""
    client.init_transactions()
