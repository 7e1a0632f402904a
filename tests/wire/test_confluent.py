"""confluent-kafka (librdkafka) against the server, where it differs from the other
libraries (shared scenarios: test_clients.py)."""

from __future__ import annotations

import pytest

from tests.wire.common import TIMEOUT

pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic

from tests.wire.clients.confluent import Confluent


def test_metadata_leaders_and_broker_defaults(broker, topic_name):
    """Metadata names the one broker as leader; a topic created without a partition count
    or replication factor (CreateTopics v4) gets the broker's --default-partitions, and
    one request deletes two topics."""
    client, logs = Confluent(broker).admin()
    topic = topic_name()
    created = client.create_topics(
        [NewTopic(topic, num_partitions=4, replication_factor=1)], request_timeout=TIMEOUT
    )
    created[topic].result(timeout=TIMEOUT)
    meta = client.list_topics(timeout=TIMEOUT)
    assert sorted(meta.topics[topic].partitions) == [0, 1, 2, 3], f"log:\n{logs}"
    assert meta.topics[topic].partitions[0].leader == 0
    assert [b.id for b in meta.brokers.values()] == [0]

    defaulted = topic_name()
    client.create_topics([NewTopic(defaulted)], request_timeout=TIMEOUT)[defaulted].result(
        timeout=TIMEOUT
    )
    meta = client.list_topics(defaulted, timeout=TIMEOUT)
    assert len(meta.topics[defaulted].partitions) == 1, f"log:\n{logs}"

    deleted = client.delete_topics([topic, defaulted], request_timeout=TIMEOUT)
    deleted[topic].result(timeout=TIMEOUT)
    deleted[defaulted].result(timeout=TIMEOUT)
    listed = client.list_topics(timeout=TIMEOUT).topics
    assert topic not in listed and defaulted not in listed
