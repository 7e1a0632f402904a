"""Topic admin APIs of Kafka 4 through real clients and raw requests: DescribeTopicPartitions
(pages and cursors), DescribeLogDirs (Redis and, with an archive, PostgreSQL), DeleteTopics
by topic id (v6), CreatePartitions with replica assignments (v3), DescribeCluster v2."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions
from kio.schema.errors import ErrorCode

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, request
from tests.wire.common import create_topic, wait_until
from tests.wire.conftest import Broker

DESCRIBE_TOPIC_PARTITIONS, DESCRIBE_LOG_DIRS, DELETE_TOPICS = 75, 35, 20
CREATE_PARTITIONS, DESCRIBE_CLUSTER = 37, 60


@pytest.fixture
def admin(broker) -> Any:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    with Connection(bootstrap) as conn:
        (entry,) = conn.request(
            request(
                3,
                12,
                topics=[{"name": topic, "topic_id": None}],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        ).topics
    return entry.topic_id


# -- DescribeTopicPartitions ------------------------------------------------------------------


def test_describe_topic_partitions_pages_through_topics(broker, admin, topic_name):
    a, b = sorted([topic_name("a"), topic_name("b")])
    create_topic(broker.bootstrap, a, 3)
    create_topic(broker.bootstrap, b, 2)
    missing = topic_name("missing")

    # Pages of 2 partitions: a[0..1], then a[2] and b[0], then b[1]; unknown topics are
    # listed with their error and take no room on a page.
    pages, cursor = [], None
    while True:
        page = admin.describe_topic_partitions(
            [b, missing, a], response_partition_limit=2, cursor=cursor
        )
        pages.append(
            [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]]
        )
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages[0] == [(a, [0, 1])]
    assert pages[1] == [(a, [2]), (b, [0])]
    # The cursor names b: the missing topic sorts after both (its name's suffix).
    assert pages[2] == [(b, [1]), (missing, [])]
    first = admin.describe_topic_partitions([a, missing])
    assert first["next_cursor"] is None
    described, unknown = first["topics"]
    assert unknown["error_code"] == ErrorCode.unknown_topic_or_partition
    assert unknown["topic_id"] in (None, uuid.UUID(int=0))  # kafka-python: zero is None
    assert described["error_code"] == ErrorCode.none
    assert described["topic_id"] == topic_id(broker.bootstrap, a)
    partition = described["partitions"][0]
    assert partition["leader_id"] == 0 and partition["leader_epoch"] == 0
    assert partition["replica_nodes"] == [0] and partition["isr_nodes"] == [0]
    assert partition["offline_replicas"] == []
    # The topic was not auto-created by being described.
    assert admin.describe_topic_partitions([missing])["topics"][0]["error_code"] == 3


def test_describe_topic_partitions_raw_cursor_and_listing(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 4)
    with Connection(broker.bootstrap) as conn:

        def describe(**fields: Any) -> Any:
            return conn.request(request(DESCRIBE_TOPIC_PARTITIONS, 0, **fields))

        # The cursor starts inside the topic; the limit ends the page after 2.
        page = describe(
            topics=[{"name": topic}],
            response_partition_limit=2,
            cursor={"topic_name": topic, "partition_index": 1},
        )
        assert [p.partition_index for p in page.topics[0].partitions] == [1, 2]
        assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == (topic, 3)
        # A limit below 1 counts as 1, as in Kafka.
        page = describe(topics=[{"name": topic}], response_partition_limit=0)
        assert [p.partition_index for p in page.topics[0].partitions] == [0]
        # No topics: every topic, in name order, unknown ones never among them.
        listed = describe(topics=[], response_partition_limit=2000)
        names = [t.name for t in listed.topics]
        assert topic in names and names == sorted(names)
        assert all(t.error_code == ErrorCode.none for t in listed.topics)
        # A cursor on a topic not asked for, or a negative index: INVALID_REQUEST for each.
        for cursor in (
            {"topic_name": "other", "partition_index": 0},
            {"topic_name": topic, "partition_index": -1},
        ):
            bad = describe(topics=[{"name": topic}, {"name": "x"}], cursor=cursor)
            assert [(t.name, t.error_code) for t in bad.topics] == [
                (topic, ErrorCode.invalid_request),
                ("x", ErrorCode.invalid_request),
            ]
        # A bad topic name is not "unknown": Kafka's INVALID_TOPIC_EXCEPTION.
        (bad,) = describe(topics=[{"name": "bad name!"}]).topics
        assert bad.error_code == ErrorCode.invalid_topic_exception


# -- DescribeLogDirs -----------------------------------------------------------------------------


def partition_sizes(result: dict) -> dict[tuple[str, int], int]:
    return {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in result["topics"]
        for p in t["partitions"]
    }


def test_describe_log_dirs_reports_redis_bytes(broker, admin, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    batch = build_batch([b"x" * 1000] * 5)
    with Connection(broker.bootstrap) as conn:
        for _ in range(3):
            assert conn.produce(topic, 0, batch).error_code == ErrorCode.none
    (answer,) = admin.describe_log_dirs({topic: [0, 1, 7]})
    (redis_dir,) = answer["log_dirs"]  # no archive on this broker
    assert redis_dir["log_dir"] == "redis" and redis_dir["error_code"] == 0
    # The bytes of the batches as stored (partition 7 does not exist: left out).
    assert partition_sizes(redis_dir) == {(topic, 0): 3 * len(batch), (topic, 1): 0}
    assert all(p["offset_lag"] == 0 for t in redis_dir["topics"] for p in t["partitions"])
    # The whole described with null topics; unknown topics are simply absent.
    (everything,) = admin.describe_log_dirs()
    assert partition_sizes(everything["log_dirs"][0])[topic, 0] == 3 * len(batch)
    (none,) = admin.describe_log_dirs({topic_name("missing"): [0]})
    assert none["log_dirs"][0]["topics"] == []


def test_alter_replica_log_dirs_answers_where_replicas_live(broker, topic_name):
    """A replica lives in Redis: "moving" it there is done at once; no other path is a log
    dir of the broker (LOG_DIR_NOT_FOUND), an unknown partition has no replica here."""
    topic, missing = topic_name(), topic_name("missing")
    create_topic(broker.bootstrap, topic, 2)
    wanted = [
        dict(path="redis", topics=[dict(name=topic, partitions=[0, 7])]),
        dict(path="/var/lib/kafka/data", topics=[dict(name=topic, partitions=[1])]),
        dict(path="redis", topics=[dict(name=missing, partitions=[0])]),
    ]
    with Connection(broker.bootstrap) as conn:
        for version in (1, 2):
            answer = conn.request(request(34, version, dirs=wanted))
            codes = {
                (t.topic_name, p.partition_index): p.error_code
                for t in answer.results
                for p in t.partitions
            }
            assert codes == {
                (topic, 0): ErrorCode.none,
                (topic, 7): ErrorCode.replica_not_available,
                (topic, 1): ErrorCode.log_dir_not_found,
                (missing, 0): ErrorCode.replica_not_available,
            }


def test_describe_log_dirs_v4_memory_bounds(broker, redis_server, topic_name):
    """v4's total and usable bytes: Redis' maxmemory and what is left of it, -1 without."""
    client = redis.Redis.from_url(redis_server.url)
    before = client.config_get("maxmemory")["maxmemory"]
    with Connection(broker.bootstrap) as conn:

        def redis_dir() -> Any:
            (result,) = conn.request(request(DESCRIBE_LOG_DIRS, 4, topics=[])).results
            return result

        try:
            client.config_set("maxmemory", 0)
            assert (redis_dir().total_bytes, redis_dir().usable_bytes) == (-1, -1)
            client.config_set("maxmemory", 1 << 30)
            result = redis_dir()
            used = client.info("memory")["used_memory"]
            assert result.total_bytes == 1 << 30
            assert 0 < result.usable_bytes < 1 << 30
            assert abs((1 << 30) - result.usable_bytes - used) < 1 << 20
        finally:
            client.config_set("maxmemory", before)
        # v1 has no bounds, and an empty topic list describes no partition.
        (v1,) = conn.request(request(DESCRIBE_LOG_DIRS, 1, topics=[])).results
        assert v1.log_dir == "redis" and v1.topics == ()


def test_describe_log_dirs_with_an_archive(redis_server, pg_server, tmp_path, topic_name):
    """With an archive, an "archive" dir gives the bytes of each partition's archived rows."""
    # A database of its own on the session's Redis: the module's broker stays unarchived.
    redis_url = redis_server.url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(redis_url).flushdb()
    with pg_server.database() as dsn:
        server = Broker(redis_url, tmp_path / "b", ["--archive-interval", "0.2"], pg_dsn=dsn)
        try:
            topic = topic_name()
            create_topic(server.bootstrap, topic, 2)
            with Connection(server.bootstrap) as conn:
                configs = [{"name": "kafkaesque.page.size", "value": "10"}]
                altered = conn.request(
                    request(
                        33,
                        0,
                        resources=[
                            {"resource_type": 2, "resource_name": topic, "configs": configs}
                        ],
                        validate_only=False,
                    )
                )
                assert altered.responses[0].error_code == ErrorCode.none
                for i in range(5):  # 50 records: pages of 10 close and are archived
                    batch = build_batch([b"value-%d" % i] * 10)
                    assert conn.produce(topic, 0, batch).error_code == ErrorCode.none
            client = KafkaAdminClient(bootstrap_servers=server.bootstrap)
            try:

                def archived() -> dict | None:
                    (answer,) = client.describe_log_dirs({topic: [0, 1]})
                    dirs = {d["log_dir"]: d for d in answer["log_dirs"]}
                    sizes = partition_sizes(dirs["archive"])
                    return dirs if sizes[topic, 0] > 0 else None

                dirs = wait_until(archived, "records archived")
            finally:
                client.close()
            assert set(dirs) == {"redis", "archive"}
            archive = dirs["archive"]
            assert archive["error_code"] == 0
            sizes = partition_sizes(archive)
            # Each archived row holds its value and more: at least the values' bytes.
            assert sizes[topic, 1] == 0 and sizes[topic, 0] >= 40 * len(b"value-0")
            assert (archive["total_bytes"], archive["usable_bytes"]) == (-1, -1)
        finally:
            server.stop()
        assert "Traceback" not in server.stderr()


# -- DeleteTopics v6, CreatePartitions v3, DescribeCluster v2 ------------------------------------


def test_delete_topics_by_id(broker, topic_name):
    by_id, by_name = topic_name("id"), topic_name("name")
    for topic in (by_id, by_name):
        create_topic(broker.bootstrap, topic, 1)
    ids = {t: topic_id(broker.bootstrap, t) for t in (by_id, by_name)}
    unknown = uuid.uuid4()
    with Connection(broker.bootstrap) as conn:
        answer = conn.request(
            request(
                DELETE_TOPICS,
                6,
                topics=[
                    {"name": None, "topic_id": ids[by_id]},
                    {"name": by_name, "topic_id": uuid.UUID(int=0)},
                    {"name": None, "topic_id": unknown},
                    {"name": "both", "topic_id": unknown},
                    {"name": None, "topic_id": uuid.UUID(int=0)},
                ],
                timeout=1000,
            )
        )
        results = [(r.name, r.topic_id, r.error_code) for r in answer.responses]
        assert results == [
            (by_id, ids[by_id], ErrorCode.none),
            (by_name, ids[by_name], ErrorCode.none),
            (None, unknown, ErrorCode.unknown_topic_id),
            ("both", unknown, ErrorCode.invalid_request),
            (None, None, ErrorCode.invalid_request),  # kio reads the zero uuid as None
        ]
        assert answer.responses[2].error_message
        metadata = conn.metadata([by_id, by_name])
        assert {t.error_code for t in metadata.topics} == {ErrorCode.unknown_topic_or_partition}
        # v1 by name still works, and says UNKNOWN_TOPIC_OR_PARTITION for an unknown one.
        old = conn.request(request(DELETE_TOPICS, 1, topic_names=[by_id], timeout=1000))
        assert old.responses[0].error_code == ErrorCode.unknown_topic_or_partition


def test_create_partitions_with_assignments(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    with Connection(broker.bootstrap) as conn:

        def grow(count: int, assignments: list[list[int]] | None, version: int = 3) -> Any:
            body = request(
                CREATE_PARTITIONS,
                version,
                topics=[
                    {
                        "name": topic,
                        "count": count,
                        "assignments": None
                        if assignments is None
                        else [{"broker_ids": a} for a in assignments],
                    }
                ],
                timeout=1000,
                validate_only=False,
            )
            (result,) = conn.request(body).results
            return result.error_code

        assert grow(3, [[0], [1]]) == ErrorCode.invalid_replica_assignment  # no broker 1
        assert grow(3, [[0, 0], [0]]) == ErrorCode.invalid_replica_assignment
        assert grow(3, [[0]]) == ErrorCode.invalid_replica_assignment  # one for two new
        assert grow(2, [[0]]) == ErrorCode.none
        assert grow(3, None, version=0) == ErrorCode.none
        assert grow(3, None) == ErrorCode.invalid_partitions  # not more than it has
        assert len(conn.metadata([topic]).topics[0].partitions) == 3


def test_describe_cluster_v2(broker):
    with Connection(broker.bootstrap) as conn:

        def describe(**fields: Any) -> Any:
            return conn.request(
                request(DESCRIBE_CLUSTER, 2, include_cluster_authorized_operations=False, **fields)
            )

        answer = describe(endpoint_type=1, include_fenced_brokers=True)
        assert answer.error_code == ErrorCode.none and answer.endpoint_type == 1
        assert [(b.broker_id, b.port, b.is_fenced) for b in answer.brokers] == [
            (0, int(broker.bootstrap.rsplit(":", 1)[1]), False)
        ]
        assert describe(endpoint_type=2, include_fenced_brokers=False).error_code == (
            ErrorCode.mismatched_endpoint_type
        )
        assert describe(endpoint_type=7, include_fenced_brokers=False).error_code == (
            ErrorCode.unsupported_endpoint_type
        )


def test_kafka_python_cluster_and_topic_calls(broker, admin, topic_name):
    """kafka-python's calls, on the newest versions it and the broker share."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 0
    assert [b["broker_id"] for b in cluster["brokers"]] == [0], cluster
    admin.create_partitions({topic: NewPartitions(2)})
    (described,) = admin.describe_topic_partitions([topic])["topics"]
    assert [p["partition_index"] for p in described["partitions"]] == [0, 1]
    admin.delete_topics([topic])
    (gone,) = admin.describe_topic_partitions([topic])["topics"]
    assert gone["error_code"] == ErrorCode.unknown_topic_or_partition
