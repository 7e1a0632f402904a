"""kafka-python consumer groups against the server: members sharing partitions, a member
killed, a restart resuming from committed offsets, and the admin client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.wire import groups_common as gc

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402
from kafka.errors import NonEmptyGroupError  # noqa: E402

TIMEOUT = 30.0
CLIENT_ID = "wire-tests-kafka-python"

BROKER_ARGS = gc.FAST_GROUP_ARGS  # the module's server: short group delays


def consumer(bootstrap: str, group: str, **config) -> KafkaConsumer:
    return KafkaConsumer(**gc.kafka_python_options(bootstrap, group, CLIENT_ID, **config))


@contextlib.contextmanager
def subscribed(bootstrap: str, group: str, topic: str) -> Iterator[KafkaConsumer]:
    """A consumer of the group subscribed to the topic, closed on leaving."""
    c = consumer(bootstrap, group)
    try:
        c.subscribe([topic])
        yield c
    finally:
        c.close()


def consume(c: KafkaConsumer, count: int) -> list[gc.Record]:
    got = gc.Collector(count)
    while wanted := got.wanted():
        got.records += gc.records_of(c.poll(timeout_ms=200, max_records=wanted))
    return got.result()


def test_restarted_consumer_resumes_from_committed_offsets(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"

    def first_consumer(count: int) -> tuple[list[gc.Record], dict[int, int]]:
        with subscribed(broker.bootstrap, group, topic) as first:
            half = consume(first, count)
            positions = gc.positions_after(half)
            first.commit(
                {
                    TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in positions.items()
                }
            )
            return half, {p: first.committed(TopicPartition(topic, p)) for p in positions}

    def second_consumer(count: int) -> list[gc.Record]:
        with subscribed(broker.bootstrap, group, topic) as second:
            rest = consume(second, count)
            assert not second.poll(timeout_ms=500), "more records than produced"
            return rest

    gc.check_restart_resumes(broker.bootstrap, topic, first_consumer, second_consumer)


def test_committed_offsets_survive_a_broker_restart(broker_factory, topic_name):
    first = broker_factory(*gc.FAST_GROUP_ARGS)
    topic, partitions, total = topic_name(), 3, 300
    group = f"g-{topic}"
    gc.create_topic(first.bootstrap, topic, partitions)
    gc.produce_numbered(first.bootstrap, topic, partitions, 0, total)
    with subscribed(first.bootstrap, group, topic) as c:
        got = consume(c, total)
        c.commit()
        positions = gc.positions_after(got)
    assert first.stop() == 0
    second = broker_factory(*gc.FAST_GROUP_ARGS)  # another port, the same Redis
    c = consumer(second.bootstrap, group)
    try:
        for p, o in positions.items():
            assert c.committed(TopicPartition(topic, p)) == o
        c.subscribe([topic])
        assert not c.poll(timeout_ms=1500), "records consumed again after the restart"
        assert c.assignment() == {TopicPartition(topic, p) for p in range(partitions)}
    finally:
        c.close()


def test_admin_list_describe_offsets_delete(broker, topic_name, tmp_path):
    topic = topic_name()
    group = f"g-{topic}"
    client = KafkaAdminClient(
        bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000)
    )
    try:
        members = gc.two_committed_members(broker, tmp_path, topic, group, "kafka-python")
        with members as (split, ends):
            listed = {g["group_id"]: g for g in client.list_groups()}
            assert listed[group]["protocol_type"] == "consumer", listed[group]
            described = client.describe_groups([group])[group]
            assert described["error"] is None, described
            assert described["group_state"] == "Stable"
            assert described["protocol_type"] == "consumer"
            assert described["protocol_data"] == "range"
            assigned = sorted(
                sorted(
                    p
                    for t in m["member_assignment"]["assigned_partitions"]
                    for p in t["partitions"]
                )
                for m in described["members"]
            )
            assert assigned == sorted(split), described
            assert {m["member_metadata"]["topics"][0] for m in described["members"]} == {topic}
            assert {m["client_id"] for m in described["members"]} == {
                "kafka-python-a",
                "kafka-python-b",
            }
            offsets = client.list_group_offsets({group: None})[group]
            assert {
                tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic
            } == ends
            assert client.delete_groups([group]) == {group: NonEmptyGroupError.__name__}
        # The members left: the group is empty, and now it can be deleted.
        described = client.describe_groups([group])[group]
        assert described["group_state"] == "Empty" and not described["members"], described
        assert client.delete_groups([group]) == {group: "OK"}
        assert group not in {g["group_id"] for g in client.list_groups()}
    finally:
        client.close()
