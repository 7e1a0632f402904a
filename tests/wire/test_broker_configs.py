"""Dynamic broker configs through confluent-kafka's AdminClient and raw requests: the topic
defaults (log.retention.ms, log.segment.bytes, message.max.bytes, ...) altered per broker
and cluster-wide (the empty broker name) while the broker runs, described with their
source, applied to topics without their own value at once, and shared by the brokers on
one Redis; read-only broker configs and bad values refused as Kafka refuses them."""

from __future__ import annotations

import pytest
import redis
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request
from tests.wire.common import TIMEOUT, create_topic

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

# A start-up (static) topic default, which dynamic configs override and give back.
BROKER_ARGS = ("--config", "log.retention.hours=2")
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})


class RawError:
    """An error of a raw answer, read as a KafkaError is."""

    def __init__(self, code: int, message: str | None) -> None:
        self._code, self._message = code, message or ""

    def code(self) -> int:
        return self._code

    def str(self) -> str:
        return self._message


def _alter(broker, name: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    """IncrementalAlterConfigs of broker ``name``: None when done, else the error. The
    cluster-wide default (name "") goes raw: librdkafka refuses an empty broker name."""
    if not name:
        configs = [{"name": n, "config_operation": op.value, "value": v} for n, v, op in ops]
        resources = [{"resource_type": 4, "resource_name": "", "configs": configs}]
        with Connection(broker.bootstrap) as conn:
            (answer,) = conn.request(
                request(44, 1, resources=resources, validate_only=False)
            ).responses
        return None if answer.error_code == 0 else RawError(answer.error_code, answer.error_message)
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)
    admin = _admin(broker)  # kept alive until the answer: its handle would be destroyed
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]
    return None


def _describe(broker, kind: ResourceType, name: str) -> dict[str, tuple[str, int, bool]]:
    """DescribeConfigs: name -> (value, source, read only); raw for the empty broker name."""
    if kind == ResourceType.BROKER and not name:
        resources = [{"resource_type": 4, "resource_name": "", "configuration_keys": None}]
        with Connection(broker.bootstrap) as conn:
            (answer,) = conn.request(
                request(
                    32,
                    4,
                    resources=resources,
                    include_synonyms=False,
                    include_documentation=False,
                )
            ).results
        assert answer.error_code == 0, answer
        return {c.name: (c.value, c.config_source, c.read_only) for c in answer.configs}
    resource = ConfigResource(kind, name)
    admin = _admin(broker)
    entries = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    return {n: (e.value, e.source, e.is_read_only) for n, e in entries.items()}


def _meta(broker, topic: str, field: str) -> str:
    """A field of partition 0's meta hash: what the Lua scripts enforce."""
    client = redis.Redis.from_url(broker.redis_url)
    try:
        return client.hget(f"ks:{{{topic}:0}}:meta", field).decode()
    finally:
        client.close()


DYNAMIC, DEFAULT_DYNAMIC = (
    ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
)
STATIC = ConfigSource.STATIC_BROKER_CONFIG.value


def test_dynamic_topic_defaults_per_broker_and_cluster_wide(broker, topic_name):
    plain, own = topic_name("plain"), topic_name("own")
    create_topic(broker.bootstrap, plain, 1)
    create_topic(broker.bootstrap, own, 1)
    own_retention = ConfigResource(
        ResourceType.TOPIC,
        own,
        incremental_configs=[ConfigEntry("retention.ms", "60000", incremental_operation=SET)],
    )
    admin = _admin(broker)
    admin.incremental_alter_configs([own_retention])[own_retention].result(timeout=TIMEOUT)
    assert _meta(broker, plain, "ttl") == "7200"  # log.retention.hours=2, in seconds
    try:
        assert _alter(broker, "", ("log.segment.bytes", "2097152", SET)) is None
        assert _alter(broker, "", ("log.retention.ms", "600000", SET)) is None
        assert _alter(broker, "0", ("log.retention.ms", "3600000", SET)) is None

        # The cluster-wide default lists what is set on it.
        assert _describe(broker, ResourceType.BROKER, "") == {
            "log.segment.bytes": ("2097152", DEFAULT_DYNAMIC, False),
            "log.retention.ms": ("600000", DEFAULT_DYNAMIC, False),
        }
        # The broker: its own dynamic value over the cluster's over its start-up one.
        mine = _describe(broker, ResourceType.BROKER, "0")
        assert mine["log.retention.ms"] == ("3600000", DYNAMIC, False)
        assert mine["log.segment.bytes"] == ("2097152", DEFAULT_DYNAMIC, False)
        assert mine["broker.id"][2]  # read-only

        # Applied at once to the topic without its own value; the other keeps its own.
        described = _describe(broker, ResourceType.TOPIC, plain)
        assert described["retention.ms"][:2] == ("3600000", DYNAMIC)
        assert described["segment.bytes"][:2] == ("2097152", DEFAULT_DYNAMIC)
        assert _meta(broker, plain, "ttl") == "3600"
        assert _meta(broker, plain, "segment_bytes") == "2097152"
        assert _describe(broker, ResourceType.TOPIC, own)["retention.ms"][0] == "60000"
        assert _meta(broker, own, "ttl") == "60"

        # Deleted per broker: the cluster-wide value shows through; deleted there too:
        # the start-up one.
        assert _alter(broker, "0", ("log.retention.ms", None, DELETE)) is None
        assert _meta(broker, plain, "ttl") == "600"
        assert _alter(broker, "", ("log.retention.ms", None, DELETE)) is None
        assert _meta(broker, plain, "ttl") == "7200"
        assert _describe(broker, ResourceType.TOPIC, plain)["retention.ms"][:2] == (
            "7200000",
            STATIC,
        )
    finally:
        _alter(broker, "", ("log.segment.bytes", None, DELETE), ("log.retention.ms", None, DELETE))
        _alter(broker, "0", ("log.retention.ms", None, DELETE))


def _produce(broker, topic: str, size: int) -> KafkaError | None:
    """One record of ``size`` bytes: None when appended, else the delivery error."""
    results: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4", "retries": 0}
    )
    producer.produce(topic, b"x" * size, on_delivery=lambda err, _msg: results.append(err))
    producer.flush(TIMEOUT)
    return results[0]


def test_dynamic_message_max_bytes_limits_appends(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    assert _produce(broker, topic, 5000) is None
    try:
        assert _alter(broker, "0", ("message.max.bytes", "2000", SET)) is None
        error = _produce(broker, topic, 5000)
        assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
        assert _describe(broker, ResourceType.BROKER, "0")["message.max.bytes"] == (
            "2000",
            DYNAMIC,
            False,
        )
    finally:
        _alter(broker, "0", ("message.max.bytes", None, DELETE))
    assert _produce(broker, topic, 5000) is None


@pytest.mark.parametrize(
    ("name", "ops", "code", "words"),
    [
        ("0", [("broker.id", "7", SET)], KafkaError.INVALID_REQUEST, "dynamically: Set(broker.id)"),
        ("", [("num.partitions", "2", SET)], KafkaError.INVALID_REQUEST, "dynamically"),
        ("0", [("log.retention.hours", "1", SET)], KafkaError.INVALID_REQUEST, "dynamically"),
        ("0", [("log.retention.ms", "soon", SET)], KafkaError.INVALID_REQUEST, "log.retention.ms"),
        ("0", [("log.segment.bytes", "10", SET)], KafkaError.INVALID_REQUEST, "at least"),
        ("0", [("log.retention.ms", "1", APPEND)], KafkaError.INVALID_CONFIG, "append"),
    ],
)
def test_bad_broker_configs_are_refused(broker, name, ops, code, words):
    error = _alter(broker, name, *ops)
    assert error is not None and error.code() == code, error
    assert words in error.str(), error.str()
    assert not _describe(broker, ResourceType.BROKER, "")  # nothing stored
    assert _describe(broker, ResourceType.BROKER, "0")["log.retention.ms"][1] != DYNAMIC


def test_broker_resources_raw(broker, broker_factory):
    """What the AdminClient does not send: another broker's id, validate_only, the legacy
    AlterConfigs; and a second broker on the same Redis sees the cluster-wide default."""

    def alter(api: int, version: int, name: str, configs: list[dict], only: bool = False):
        (answer,) = conn.request(
            request(
                api,
                version,
                resources=[{"resource_type": 4, "resource_name": name, "configs": configs}],
                validate_only=only,
            )
        ).responses
        return answer

    segment = {"name": "log.segment.bytes", "value": "3145728"}
    with Connection(broker.bootstrap) as conn:
        other = alter(44, 1, "7", [{**segment, "config_operation": 0}])
        assert other.error_code == ErrorCode.invalid_request, other
        assert "Unexpected broker id" in other.error_message
        checked = alter(44, 1, "", [{**segment, "config_operation": 0}], only=True)
        assert checked.error_code == ErrorCode.none, checked
        assert not _describe(broker, ResourceType.BROKER, "")  # validate_only stored nothing
        assert alter(33, 2, "", [segment]).error_code == ErrorCode.none
    try:
        assert _describe(broker, ResourceType.BROKER, "")["log.segment.bytes"][0] == "3145728"
        second = broker_factory("--node-id", "1")
        try:
            seen = _describe(second, ResourceType.BROKER, "1")["log.segment.bytes"]
            assert seen == ("3145728", DEFAULT_DYNAMIC, False)
        finally:
            second.stop()
    finally:
        _alter(broker, "", ("log.segment.bytes", None, DELETE))
