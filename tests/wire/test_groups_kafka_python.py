"""kafka-python consumer groups against the server, where it differs from the other
libraries (shared scenarios: test_groups_clients.py, test_groups_members.py)."""

from __future__ import annotations

import pytest

from tests.wire.common import FAST_GROUP_ARGS, create_topic, positions_after, produce_numbered

pytest.importorskip("kafka")
from kafka import TopicPartition

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
