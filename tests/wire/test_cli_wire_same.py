"""The wire mode prints what the direct mode prints: topics, describe and group of one
data set, compared in their JSON forms (what only Redis knows, the wire leaves null:
Redis' memory, pages and bytes held; and DescribeGroups tells no generation)."""

from __future__ import annotations

import json

import pytest

from tests.wire.cli_wire import as_json, ok, wire
from tests.wire.conftest import Broker

pytest.importorskip("confluent_kafka")


def direct(broker: Broker, *args: str) -> object:
    return json.loads(broker.cli(*args).stdout)


def test_topics_describe_and_group_as_the_direct_mode(broker: Broker, topic_name) -> None:
    topic, group = topic_name(), f"group-{topic_name()}"
    broker.cli("create", topic, "--partitions", "3", "--config", "retention.ms=3600000")
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(30))
    broker.cli("produce", topic, "--key-separator", ":", input=lines)
    broker.cli("consume", topic, "--group", group, "--max-records", "12")

    assert as_json(wire(broker.bootstrap, "topics", "--format", "json")) == direct(
        broker, "topics", "--format", "json"
    )
    assert ok(wire(broker.bootstrap, "topics")) == broker.cli("topics").stdout.decode()

    over_wire = as_json(wire(broker.bootstrap, "describe", topic, "--format", "json"))
    held = direct(broker, "describe", topic, "--format", "json")
    assert isinstance(held, dict)
    assert over_wire.pop("redis") is None and held.pop("redis")
    for state in over_wire["partition_states"]:
        assert state.pop("pages") is None and state.pop("bytes") is None
    for state in held["partition_states"]:
        del state["pages"], state["bytes"]
    assert over_wire == held

    over_wire = as_json(wire(broker.bootstrap, "group", group, "--format", "json"))
    held = direct(broker, "group", group, "--format", "json")
    assert isinstance(held, dict)
    assert over_wire.pop("generation") is None and held.pop("generation") is not None
    assert over_wire == held
    assert as_json(wire(broker.bootstrap, "groups", "--format", "json")) == direct(
        broker, "groups", "--format", "json"
    )


def test_topic_ids_are_printed_as_kafka_prints_them() -> None:
    """URL-safe base64, as the direct mode (librdkafka's str() uses + and /: a topic id with
    one of those printed differently in the two modes, one time in four)."""
    from confluent_kafka import Uuid

    from kafkaesque.cli.topics import kafka_uuid
    from kafkaesque.cli.wire_client import kafka_id

    uuid = Uuid(-1, 5)  # bytes ff * 8, 00 * 7, 05: '/' in standard base64
    assert kafka_id(uuid) == kafka_uuid(b"\xff" * 8 + b"\x00" * 7 + b"\x05")
    assert "/" not in kafka_id(uuid) and "+" not in kafka_id(uuid)
