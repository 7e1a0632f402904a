"""Group configs (ConfigResource type GROUP, Kafka 4.2's GroupConfig) through confluent-kafka's
AdminClient and raw requests: set, described with their source, deleted back to the
broker's default, refused as Kafka refuses them; and KIP-848 consumer groups obey their
own consumer.session.timeout.ms and consumer.heartbeat.interval.ms."""

from __future__ import annotations

import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request
from tests.wire.common import TIMEOUT, create_topic

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

BROKER_SESSION_MS, BROKER_HEARTBEAT_MS = 2000, 500
# The broker's own KIP-848 session and heartbeat (below Kafka's 45 s and 5 s: the group
# configs' lower bounds follow them down).
BROKER_ARGS = (
    "--config",
    f"group.consumer.session.timeout.ms={BROKER_SESSION_MS}",
    "--config",
    f"group.consumer.heartbeat.interval.ms={BROKER_HEARTBEAT_MS}",
)
GROUP_CONFIG_TYPE = 32  # ConfigResource.Type.GROUP on the wire
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})


def _alter(admin: AdminClient, group: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    """IncrementalAlterConfigs of one group: None when done, else the KafkaError."""
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]
    return None


def _describe(admin: AdminClient, group: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)


def test_group_configs_set_described_and_deleted(broker):
    admin = _admin(broker)
    group = f"configs-{uuid.uuid4().hex[:8]}"  # a group that does not exist: as Kafka
    before = _describe(admin, group)
    assert set(before) >= {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms",
        "share.auto.offset.reset",
        "share.isolation.level",
        "streams.session.timeout.ms",
        "streams.num.standby.replicas",
    }
    # The broker's own (start-up) value, else Kafka's default.
    session = before["consumer.session.timeout.ms"]
    assert (session.value, session.source) == (
        str(BROKER_SESSION_MS),
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    lock = before["share.record.lock.duration.ms"]
    assert (lock.value, lock.source) == ("30000", ConfigSource.DEFAULT_CONFIG.value)
    assert not lock.is_read_only

    assert (
        _alter(
            admin,
            group,
            ("consumer.session.timeout.ms", "5000", SET),
            ("share.isolation.level", "read_committed", SET),
            ("share.auto.offset.reset", "by_duration:PT1H", SET),
        )
        is None
    )
    after = _describe(admin, group)
    for name, value in (
        ("consumer.session.timeout.ms", "5000"),
        ("share.isolation.level", "read_committed"),
        ("share.auto.offset.reset", "by_duration:PT1H"),
    ):
        assert (after[name].value, after[name].source) == (
            value,
            ConfigSource.GROUP_CONFIG.value,
        ), name
    assert after["streams.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    assert _alter(admin, group, ("consumer.session.timeout.ms", None, DELETE)) is None
    gone = _describe(admin, group)["consumer.session.timeout.ms"]
    assert (gone.value, gone.source) == (
        str(BROKER_SESSION_MS),
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    assert _describe(admin, group)["share.isolation.level"].value == "read_committed"


@pytest.mark.parametrize(
    ("ops", "code", "words"),
    [
        ([("consumer.no.such", "1", SET)], KafkaError.INVALID_CONFIG, "Unknown group config"),
        ([("consumer.session.timeout.ms", "abc", SET)], KafkaError.INVALID_CONFIG, "INT"),
        ([("share.record.lock.duration.ms", "999", SET)], KafkaError.INVALID_CONFIG, "at least"),
        # Above Kafka's group.consumer.max.session.timeout.ms (60 s).
        (
            [("consumer.session.timeout.ms", "60001", SET)],
            KafkaError.INVALID_CONFIG,
            "group.consumer.max.session.timeout.ms",
        ),
        # Below the broker's minimum (its own session timeout here).
        (
            [("consumer.session.timeout.ms", "1999", SET)],
            KafkaError.INVALID_CONFIG,
            "group.consumer.min.session.timeout.ms",
        ),
        (
            [("consumer.heartbeat.interval.ms", "3000", SET)],
            KafkaError.INVALID_CONFIG,
            "must be greater than consumer.heartbeat.interval.ms",
        ),
        ([("share.isolation.level", "dirty", SET)], KafkaError.INVALID_CONFIG, "String must"),
        ([("share.auto.offset.reset", "soon", SET)], KafkaError.INVALID_CONFIG, "share.auto"),
        ([("streams.num.standby.replicas", "3", SET)], KafkaError.INVALID_CONFIG, "max.standby"),
        ([("share.isolation.level", "x", APPEND)], KafkaError.INVALID_CONFIG, "append"),
    ],
)
def test_bad_group_configs_are_refused(broker, ops, code, words):
    admin = _admin(broker)
    group = f"bad-{uuid.uuid4().hex[:8]}"
    assert _alter(admin, group, ("share.delivery.count.limit", "7", SET)) is None
    error = _alter(admin, group, *ops)
    assert error is not None and error.code() == code, error
    assert words in error.str(), error.str()
    described = _describe(admin, group)
    assert described["share.delivery.count.limit"].value == "7"  # nothing else changed
    assert described["consumer.session.timeout.ms"].source != ConfigSource.GROUP_CONFIG.value


def test_group_configs_raw_requests(broker):
    """What the AdminClient does not send: an empty group name, validate_only, the legacy
    AlterConfigs replacing a group's configs, configuration_keys."""
    group = f"raw-{uuid.uuid4().hex[:8]}"

    def incremental(name: str, configs: list[tuple[str, str | None, int]], **more):
        (answer,) = conn.request(
            request(
                44,
                1,
                resources=[
                    {
                        "resource_type": GROUP_CONFIG_TYPE,
                        "resource_name": name,
                        "configs": [
                            {"name": n, "config_operation": op, "value": v} for n, v, op in configs
                        ],
                    }
                ],
                validate_only=more.get("validate_only", False),
            )
        ).responses
        return answer

    def describe(name: str, keys=None):
        (answer,) = conn.request(
            request(
                32,
                4,
                resources=[
                    {
                        "resource_type": GROUP_CONFIG_TYPE,
                        "resource_name": name,
                        "configuration_keys": keys,
                    }
                ],
                include_synonyms=True,
                include_documentation=False,
            )
        ).results
        return answer

    with Connection(broker.bootstrap) as conn:
        answer = incremental("", [("consumer.session.timeout.ms", "5000", 0)])
        assert answer.error_code == ErrorCode.invalid_request, answer
        assert describe("").error_code == ErrorCode.invalid_request
        # validate_only checks and stores nothing.
        answer = incremental(
            group, [("consumer.session.timeout.ms", "5000", 0)], validate_only=True
        )
        assert answer.error_code == ErrorCode.none, answer
        bad = incremental(group, [("consumer.session.timeout.ms", "1", 0)], validate_only=True)
        assert bad.error_code == ErrorCode.invalid_config, bad
        (entry,) = describe(group, ["consumer.session.timeout.ms"]).configs
        assert entry.value == str(BROKER_SESSION_MS) and entry.config_source == 4, entry
        # The legacy AlterConfigs replaces the group's whole set.
        assert incremental(group, [("share.delivery.count.limit", "9", 0)]).error_code == 0
        (legacy,) = conn.request(
            request(
                33,
                2,
                resources=[
                    {
                        "resource_type": GROUP_CONFIG_TYPE,
                        "resource_name": group,
                        "configs": [{"name": "consumer.heartbeat.interval.ms", "value": "600"}],
                    }
                ],
                validate_only=False,
            )
        ).responses
        assert legacy.error_code == ErrorCode.none, legacy
        configs = {c.name: c for c in describe(group).configs}
        assert configs["consumer.heartbeat.interval.ms"].value == "600"
        assert configs["consumer.heartbeat.interval.ms"].config_source == 8
        assert configs["share.delivery.count.limit"].config_source == 5  # replaced away


# -- KIP-848 groups obey their configs -------------------------------------------------------


def _join(conn: Connection, group: str, topic: str) -> tuple[str, int, int]:
    """A consumer-protocol member joins; returns its id, epoch and heartbeat interval."""
    resp = conn.request(
        request(
            68,
            1,
            group_id=group,
            member_id=uuid.uuid4().hex,
            member_epoch=0,
            rebalance_timeout=10_000,
            subscribed_topic_names=[topic],
            topic_partitions=[],
        )
    )
    assert resp.error_code == ErrorCode.none, resp
    interval = int(resp.heartbeat_interval.total_seconds() * 1000)
    return resp.member_id, resp.member_epoch, interval


def _delete_error(conn: Connection, group: str) -> int:
    (result,) = conn.request(request(42, 2, groups_names=[group])).results
    return result.error_code


def test_consumer_groups_obey_their_session_timeout_and_heartbeat_interval(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    configured, plain = f"{topic}-configured", f"{topic}-plain"
    admin = _admin(broker)
    assert (
        _alter(
            admin,
            configured,
            ("consumer.session.timeout.ms", "5000", SET),
            ("consumer.heartbeat.interval.ms", "1500", SET),
        )
        is None
    )
    with Connection(broker.bootstrap) as conn:
        # Heartbeats are answered with the group's interval, else the broker's.
        _, _, interval = _join(conn, configured, topic)
        assert interval == 1500
        _, _, interval = _join(conn, plain, topic)
        assert interval == BROKER_HEARTBEAT_MS
        joined = time.monotonic()
        # Both members go silent: the plain group's is gone after the broker's 2 s, the
        # configured group's only after its own 5 s.
        time.sleep(max(0.0, joined + BROKER_SESSION_MS / 1000 + 0.3 - time.monotonic()))
        assert _delete_error(conn, plain) == ErrorCode.none
        assert _delete_error(conn, configured) == ErrorCode.non_empty_group
        time.sleep(max(0.0, joined + 4.0 - time.monotonic()))
        assert _delete_error(conn, configured) == ErrorCode.non_empty_group
        time.sleep(max(0.0, joined + 5.3 - time.monotonic()))
        assert _delete_error(conn, configured) == ErrorCode.none
