"""kafkajs 2.2.4 (Node.js) against the server, where it differs from the other libraries
(shared scenarios: test_clients.py): its admin client, in one node process."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.wire.clients import needs
from tests.wire.clients.kafkajs import KafkaJS

pytestmark = needs("kafkajs")


def test_admin(broker, topic_name):
    topic = topic_name()
    out = KafkaJS(broker).node("admin", topic=topic)
    assert out["created"] is True
    assert out["createdAgain"] is False  # kafkajs answers false for TOPIC_ALREADY_EXISTS
    assert out["listed"] is True
    assert out["partitions"] == [0, 1, 2]
    assert out["leaders"] == [0, 0, 0]
    assert sorted(out["offsets"]) == [[p, "0", "0"] for p in range(3)]
    assert out["configErrors"] == [ErrorCode.none]
    assert out["configNames"], out
    assert out["brokers"] == [[0, "127.0.0.1", broker.port]]
    assert out["controller"] == 0
    assert out["partitionsAfter"] == [0, 1, 2, 3, 4]
    assert out["listedAfterDelete"] is False
    assert topic not in broker.cli("topics").stdout.decode().split()
