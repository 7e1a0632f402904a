"""kafka-python consumer groups against the server: members sharing partitions, a member
killed, a restart resuming from committed offsets, and the admin client."""

from __future__ import annotations

import time

import pytest

from tests.wire import groups_common as gc

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402
from kafka.errors import NonEmptyGroupError  # noqa: E402

TIMEOUT = 30.0


BROKER_ARGS = gc.FAST_GROUP_ARGS  # the module's server: short group delays


def consumer(bootstrap: str, group: str, **config):
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="wire-tests-kafka-python",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=gc.SESSION_MS,
        heartbeat_interval_ms=gc.HEARTBEAT_MS,
        fetch_max_wait_ms=100,
        request_timeout_ms=int(TIMEOUT * 1000),
        **config,
    )


def consume(c, count: int, timeout: float = TIMEOUT) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        batch = c.poll(timeout_ms=200, max_records=min(500, count - len(out)))
        out.extend(m for messages in batch.values() for m in messages)
    assert len(out) == count, f"got {len(out)} of {count} records"
    return out


def position_of(messages) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in messages:
        out[m.partition] = max(out.get(m.partition, 0), m.offset + 1)
    return out


def test_restarted_consumer_resumes_from_committed_offsets(broker, topic_name):
    topic, partitions, total = topic_name(), 3, 3000
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
    gc.produce_numbered(broker.bootstrap, topic, partitions, 0, total)
    first = consumer(broker.bootstrap, group)
    try:
        first.subscribe([topic])
        half = consume(first, total // 2)
        positions = position_of(half)
        first.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()}
        )
        for p, o in positions.items():
            assert first.committed(TopicPartition(topic, p)) == o
    finally:
        first.close()
    second = consumer(broker.bootstrap, group)
    try:
        second.subscribe([topic])
        rest = consume(second, total - len(half))
        assert not second.poll(timeout_ms=500), "more records than produced"
    finally:
        second.close()
    before = {m.value.decode() for m in half}
    after = [m.value.decode() for m in rest]
    assert not before & set(after), "records consumed again after the restart"
    assert before | set(after) == {gc.value_of(i) for i in range(total)}
    assert len(after) == len(set(after))
    for p in range(partitions):
        offsets = [m.offset for m in rest if m.partition == p]
        if offsets:
            assert min(offsets) == positions.get(p, 0), (p, positions)


def test_committed_offsets_survive_a_broker_restart(broker_factory, topic_name):
    first = broker_factory(*gc.FAST_GROUP_ARGS)
    topic, partitions, total = topic_name(), 3, 300
    group = f"g-{topic}"
    gc.create_topic(first.bootstrap, topic, partitions)
    gc.produce_numbered(first.bootstrap, topic, partitions, 0, total)
    c = consumer(first.bootstrap, group)
    try:
        c.subscribe([topic])
        got = consume(c, total)
        c.commit()
        positions = position_of(got)
    finally:
        c.close()
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
    topic, partitions = topic_name(), 3
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
    ends = gc.produce_numbered(broker.bootstrap, topic, partitions, 0, 300)
    members = gc.start_members(tmp_path, ["a", "b"], "kafka-python", broker.bootstrap, topic, group)
    client = KafkaAdminClient(
        bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000)
    )
    try:
        split = gc.wait_for_split(members, partitions)
        gc.wait_until(
            lambda: gc.committed(broker.bootstrap, group, topic, partitions) == ends,
            "the members to commit everything",
        )
        listed = {g["group_id"]: g for g in client.list_groups()}
        assert listed[group]["protocol_type"] == "consumer", listed[group]
        described = client.describe_groups([group])[group]
        assert described["error"] is None, described
        assert described["group_state"] == "Stable"
        assert described["protocol_type"] == "consumer"
        assert described["protocol_data"] == "range"
        assigned = sorted(
            sorted(
                p for t in m["member_assignment"]["assigned_partitions"] for p in t["partitions"]
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
        assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == ends
        assert client.delete_groups([group]) == {group: NonEmptyGroupError.__name__}
    finally:
        gc.stop_all(members)
        try:
            described = client.describe_groups([group])[group]
            assert described["group_state"] == "Empty" and not described["members"], described
            assert client.delete_groups([group]) == {group: "OK"}
            assert group not in {g["group_id"] for g in client.list_groups()}
        finally:
            client.close()
