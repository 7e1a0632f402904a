"""kafka-python against the server, where it differs from the other libraries (shared
scenarios: test_clients.py)."""

from __future__ import annotations

import pytest

from tests.wire.common import PARTITIONS, by_position

pytest.importorskip("kafka")
from tests.wire.clients.kafka_python import KafkaPython


def test_not_idempotent(broker, topic_name):
    """With idempotence turned off (it is on by default) and acks=1."""
    client = KafkaPython(broker)
    records = client.sample()
    topic = topic_name()
    client.create_topic(topic, PARTITIONS)
    client.produce(topic, records, "none", enable_idempotence=False, acks=1)
    assert client.consume(topic, PARTITIONS, len(records)) == by_position(records)
