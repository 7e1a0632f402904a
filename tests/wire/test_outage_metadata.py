"""Metadata while Redis is away: every request answered, none closes the connection."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, metadata_request
from tests.servers import RedisServer
from tests.wire.conftest import Broker


def test_metadata_for_all_topics_answers_while_redis_is_away(tmp_path: Path) -> None:
    """All topics (null, or an empty list in v0): the brokers, and the topics this broker
    listed last, each LEADER_NOT_AVAILABLE (retriable: a client keeps them and asks
    again, rather than taking them for deleted); a named topic LEADER_NOT_AVAILABLE too.
    The connection stays open throughout."""
    redis_server = RedisServer(tmp_path / "redis")
    broker = Broker(redis_server.url, tmp_path / "broker")
    try:
        with Connection(broker.bootstrap) as c:
            c.create_topic("away", partitions=2)
            [listed] = c.request(metadata_request(None)).topics
            assert (listed.name, listed.error_code) == ("away", ErrorCode.none)
            redis_server.stop()
            for version in (0, 1, 4, 9, 12):
                req = metadata_request([] if version == 0 else None, version=version)
                answer = c.request(req)
                assert [b.node_id for b in answer.brokers], answer
                assert [(t.name, t.error_code) for t in answer.topics] == [
                    ("away", ErrorCode.leader_not_available)
                ], (version, answer.topics)
            [named] = c.request(metadata_request(["away"])).topics
            assert named.error_code == ErrorCode.leader_not_available
        with Connection(broker.bootstrap) as c:  # a new connection is answered as well
            assert c.request(metadata_request(None, version=12)).brokers
    finally:
        broker.stop()
        redis_server.stop()
