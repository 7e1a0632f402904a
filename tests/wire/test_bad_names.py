"""Names a client chooses that no topic can have: answered with Kafka's error code per
name, never an internal error (a NUL byte is no text to PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request
from tests.storage.test_served import archiving_broker  # noqa: F401
from tests.wire.conftest import Broker

# Kafka's Topic.validate refuses each: characters outside [a-zA-Z0-9._-], "." and "..",
# longer than 249, empty.
BAD_NAMES = ["bad\0name", "\0", ".", "..", "a" * 250, "", "caf\u00e9", "a/b", "a b"]


def test_names_no_topic_can_have(archiving_broker: Callable[[], Broker]) -> None:  # noqa: F811
    """DeleteTopics and CreatePartitions: UNKNOWN_TOPIC_OR_PARTITION per name (Kafka's
    answer for a topic that does not exist); CreateTopics: INVALID_TOPIC_EXCEPTION. The
    connection stays open and the broker logs no error."""
    broker = archiving_broker()
    mark = broker.stderr_size()
    with Connection(broker.bootstrap) as c:
        c.create_topic("good")
        for version in (1, 4, 5):
            deleted = c.request(request(20, version, topic_names=BAD_NAMES, timeout=5000))
            assert [(r.name, r.error_code) for r in deleted.responses] == [
                (n, ErrorCode.unknown_topic_or_partition) for n in BAD_NAMES
            ]
        deleted = c.request(
            request(
                20,
                6,
                topics=[{"name": n, "topic_id": None} for n in BAD_NAMES],
                timeout=5000,
            )
        )
        assert {r.error_code for r in deleted.responses} == {ErrorCode.unknown_topic_or_partition}
        created = c.request(
            request(
                19,
                5,
                topics=[
                    {
                        "name": n,
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                    for n in BAD_NAMES
                ],
                timeout=5000,
                validate_only=False,
            )
        )
        assert [(t.name, t.error_code) for t in created.topics] == [
            (n, ErrorCode.invalid_topic_exception) for n in BAD_NAMES
        ]
        grown = c.request(
            request(
                37,
                1,
                topics=[{"name": n, "count": 2, "assignments": None} for n in BAD_NAMES],
                timeout=5000,
                validate_only=False,
            )
        )
        assert {r.error_code for r in grown.results} == {ErrorCode.unknown_topic_or_partition}
        assert c.metadata(["good"]).topics[0].error_code == ErrorCode.none  # still open
    logged = broker.stderr(mark)
    assert "ERROR" not in logged and "Traceback" not in logged, logged
