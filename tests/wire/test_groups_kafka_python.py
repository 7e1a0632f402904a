"""kafka-python consumer groups against the server, where it differs from the other
libraries (shared scenarios: test_groups_clients.py, test_groups_members.py)."""

from __future__ import annotations

import pytest

from tests.wire.common import FAST_GROUP_ARGS, create_topic, positions_after, produce_numbered

pytest.importorskip("kafka")
from kafka import OffsetAndMetadata, TopicPartition
from kafka import errors as Errors

from tests.wire.clients.kafka_python import KafkaPython


def test_committed_offsets_survive_a_broker_restart(broker_factory, topic_name):
    first = broker_factory(*FAST_GROUP_ARGS)
    topic, partitions, total = topic_name(), 3, 300
    group = f"g-{topic}"
    create_topic(first.bootstrap, topic, partitions)
    produce_numbered(first.bootstrap, topic, partitions, 0, total)
    with KafkaPython(first).subscribed(group, topic) as c:
        got = KafkaPython.poll(c, total)
        c.commit()
        positions = positions_after(got)
    assert first.stop() == 0
    second = broker_factory(*FAST_GROUP_ARGS)  # another port, the same Redis
    c = KafkaPython(second).group_consumer(group)
    try:
        for p, o in positions.items():
            assert c.committed(TopicPartition(topic, p)) == o
        c.subscribe([topic])
        assert not c.poll(timeout_ms=1500), "records consumed again after the restart"
        assert c.assignment() == {TopicPartition(topic, p) for p in range(partitions)}
    finally:
        c.close()


def test_delete_group_offsets_spares_the_topics_members_read(broker_factory, topic_name):
    """OffsetDelete through the admin client: refused for a topic a live member subscribes
    to (GROUP_SUBSCRIBED_TO_TOPIC), done for the others, and for all once the group is empty."""
    server = broker_factory(*FAST_GROUP_ARGS)
    read, other = topic_name(), topic_name()
    group = f"g-{read}"
    for t in (read, other):
        create_topic(server.bootstrap, t, 1)
    produce_numbered(server.bootstrap, read, 1, 0, 10)
    client = KafkaPython(server)
    with client.subscribed(group, read) as c, client.admin() as admin:
        KafkaPython.poll(c, 10)
        c.commit({TopicPartition(read, 0): OffsetAndMetadata(10, "", -1)})
        c.commit({TopicPartition(other, 0): OffsetAndMetadata(4, "", -1)})
        deleted = admin.delete_group_offsets(
            group, [TopicPartition(read, 0), TopicPartition(other, 0)]
        )
        assert deleted == {
            TopicPartition(read, 0): Errors.GroupSubscribedToTopicError,
            TopicPartition(other, 0): Errors.NoError,
        }
        assert set(admin.list_group_offsets(group)[group]) == {TopicPartition(read, 0)}
    solo = f"{group}-solo"
    with client.admin() as admin:
        assert admin.delete_group_offsets(group, [TopicPartition(read, 0)]) == {
            TopicPartition(read, 0): Errors.NoError
        }
        admin.alter_group_offsets(solo, {TopicPartition(other, 0): OffsetAndMetadata(7, "x", -1)})
        # Several groups in one OffsetFetch (v8+), each with its offsets.
        fetched = admin.list_group_offsets({group: None, solo: [TopicPartition(other, 0)]})
        assert {
            g: {tp: o.offset for tp, o in offsets.items()} for g, offsets in fetched.items()
        } == {
            group: {},
            solo: {TopicPartition(other, 0): 7},
        }
        with pytest.raises(Errors.GroupIdNotFoundError):
            admin.delete_group_offsets(f"{group}-none", [TopicPartition(read, 0)])
