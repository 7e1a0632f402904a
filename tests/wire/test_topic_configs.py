"""Topic configs through real admin clients: created with a topic, described with their
source and synonyms, altered (whole and incrementally), refused when unknown or bad; and
broker defaults set with ``serve --config``."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from tests.wire.clients import requires
from tests.wire.common import TIMEOUT

RESOURCE_TOPIC = ConfigResource.Type.TOPIC


@pytest.fixture(scope="module")
def configured(broker_factory):
    """A broker with topic defaults and broker settings from ``--config``."""
    return broker_factory(
        "--config",
        "log.retention.hours=2",
        "--config",
        "log.cleanup.policy=delete",
        "--config",
        "num.partitions=3",
        "--config",
        "group.max.session.timeout.ms=60000",
    )


def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def describe_topic(client: AdminClient, topic: str) -> dict[str, object]:
    resource = ConfigResource(RESOURCE_TOPIC, topic)
    return client.describe_configs([resource])[resource].result(timeout=TIMEOUT)


def create(client: AdminClient, topic: str, **configs: str) -> None:
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config=configs)
    client.create_topics([new])[topic].result(timeout=TIMEOUT)


def test_confluent_create_describe_alter(configured, topic_name):
    client, topic = admin(configured), topic_name()
    create(
        client,
        topic,
        **{"cleanup.policy": "compact,delete", "retention.bytes": "1048576", "segment.ms": "60000"},
    )
    entries = describe_topic(client, topic)
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["retention.bytes"].value == "1048576"
    # Not set on the topic: the broker's default (log.retention.hours=2), then Kafka's.
    assert entries["retention.ms"].value == "7200000"
    assert entries["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert "log.retention.ms" in entries["retention.ms"].synonyms
    assert entries["min.insync.replicas"].value == "1"
    assert entries["min.insync.replicas"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not entries["retention.ms"].is_read_only

    # Incremental: SET, DELETE (back to the default), SUBTRACT from / APPEND to a list.
    resource = ConfigResource(
        RESOURCE_TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            ),
        ],
    )
    client.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)
    entries = describe_topic(client, topic)
    assert entries["retention.ms"].value == "60000"
    assert entries["retention.bytes"].value == "-1"
    assert entries["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["cleanup.policy"].value == "compact"
    append = ConfigResource(
        RESOURCE_TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    client.incremental_alter_configs([append])[append].result(timeout=TIMEOUT)
    assert describe_topic(client, topic)["cleanup.policy"].value == "compact,delete"

    # AlterConfigs (not incremental) replaces every config set on the topic.
    whole = ConfigResource(RESOURCE_TOPIC, topic, set_config={"max.message.bytes": "2000000"})
    client.alter_configs([whole])[whole].result(timeout=TIMEOUT)
    entries = describe_topic(client, topic)
    assert entries["max.message.bytes"].value == "2000000"
    assert entries["cleanup.policy"].value == "delete"  # reset: the broker's default
    assert entries["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # The CLI sees the same configs.
    described = configured.cli("describe", topic).stdout.decode()
    assert "max.message.bytes=2000000 (topic)" in described
    assert "retention.ms=7200000 (broker default)" in described


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=TIMEOUT)
    return caught.value.args[0]


def test_confluent_bad_configs(configured, topic_name):
    client, topic = admin(configured), topic_name()
    bad = {
        "no.such.config": "1",
        "retention.ms": "soon",
        "cleanup.policy": "forever",
        "min.cleanable.dirty.ratio": "1.5",
        "segment.bytes": "100",
    }
    for name, value in bad.items():
        new = NewTopic(topic, num_partitions=1, replication_factor=1, config={name: value})
        error = error_of(client.create_topics([new])[topic])
        assert error.code() == KafkaError.INVALID_CONFIG, (name, error)
        assert name in error.str()  # Kafka's message names the config
    assert topic not in configured.cli("topics").stdout.decode().split()

    create(client, topic)
    for name, value in (("no.such.config", "1"), ("retention.bytes", "x")):
        resource = ConfigResource(RESOURCE_TOPIC, topic, set_config={name: value})
        error = error_of(client.alter_configs([resource])[resource])
        assert error.code() == KafkaError.INVALID_CONFIG and name in error.str()
    # APPEND applies only to list configs.
    resource = ConfigResource(
        RESOURCE_TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    assert error_of(client.incremental_alter_configs([resource])[resource]).code() == (
        KafkaError.INVALID_CONFIG
    )
    assert describe_topic(client, topic)["retention.ms"].value == "7200000"  # unchanged
    # A topic that does not exist.
    missing = ConfigResource(
        RESOURCE_TOPIC, topic_name("missing"), set_config={"retention.ms": "1"}
    )
    error = error_of(client.alter_configs([missing])[missing])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    error = error_of(client.describe_configs([missing])[missing])
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # num.partitions is not a dynamic broker config: refused as Kafka refuses it.
    broker = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"num.partitions": "2"})
    assert error_of(client.alter_configs([broker])[broker]).code() == KafkaError.INVALID_REQUEST


def test_confluent_broker_configs(configured):
    client = admin(configured)
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = client.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    assert entries["num.partitions"].value == "3"
    assert entries["group.max.session.timeout.ms"].value == "60000"
    assert entries["log.retention.ms"].value == "7200000"
    assert entries["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert entries["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["num.partitions"].is_read_only


def test_serve_refuses_bad_broker_configs(configured):
    for setting, words in (
        ("no.such=1", "unknown broker config 'no.such'"),
        ("num.partitions=x", "num.partitions: not a number"),
        ("log.retention.ms=x", "log.retention.ms"),
        ("retention.ms", "expected KEY=VALUE"),
    ):
        result = configured.cli(
            "serve", "--listen", "127.0.0.1:0", "--config", setting, check=False
        )
        error = result.stderr.decode()
        assert result.returncode == 2 and words in error, error
        assert len(error.strip().splitlines()) == 1, error


@requires("kafka-python")
def test_kafka_python_admin(configured, topic_name):
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic

    topic = topic_name()
    client = KafkaAdminClient(bootstrap_servers=configured.bootstrap)
    try:
        client.create_topics([KPNewTopic(topic, 2, 1, topic_configs={"retention.ms": "120000"})])
        client.alter_configs(
            [KPResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "5000"})]
        )
        described = client.describe_configs(
            [KPResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        configs = described["topic"][topic]
        assert configs["retention.ms"]["value"] == "5000"
        assert configs["cleanup.policy"]["value"] == "delete"
    finally:
        client.close()


@requires("aiokafka")
def test_aiokafka_admin(configured, topic_name):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AIONewTopic
    from aiokafka.admin.config_resource import ConfigResource as AIOResource
    from aiokafka.admin.config_resource import ConfigResourceType

    topic = topic_name()

    async def scenario() -> dict[str, str]:
        client = AIOKafkaAdminClient(bootstrap_servers=configured.bootstrap)
        await client.start()
        try:
            await client.create_topics(
                [AIONewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})]
            )
            (response,) = await client.describe_configs(
                [AIOResource(ConfigResourceType.TOPIC, topic)]
            )
            return {c[0]: c[1] for c in response.resources[0][4]}
        finally:
            await client.close()

    assert asyncio.run(scenario())["cleanup.policy"] == "compact"


@requires("kafkajs")
def test_kafkajs_create_with_config_entries(configured, topic_name):
    from tests.wire.clients.kafkajs import KafkaJS

    topic = topic_name()
    out = KafkaJS(configured).node("configs", topic=topic)
    assert out["created"] is True
    assert out["cleanupPolicy"] == "compact"
    assert out["retentionMs"] == "1000"  # after alterConfigs
