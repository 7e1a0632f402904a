"""Replica and quorum admin APIs of Kafka 4, answered for one broker that leads every
partition: ElectLeaders, Alter/ListPartitionReassignments, DescribeQuorum; and what the
broker knows of clients: DescribeProducers, GetTelemetrySubscriptions. Through
confluent-kafka and kafka-python where they have the call, raw requests for the rest."""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from kio.schema.errors import ErrorCode

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, request
from tests.servers import free_port
from tests.wire.common import TIMEOUT, create_topic, recent

ELECT_LEADERS, DESCRIBE_QUORUM, DESCRIBE_PRODUCERS = 43, 55, 61
GET_TELEMETRY, PUSH_TELEMETRY = 71, 72


@pytest.fixture
def admin(broker) -> Any:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


# -- ElectLeaders ------------------------------------------------------------------------------


def test_confluent_elect_leaders(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 5)]
    wanted.append(TopicPartition(topic_name("missing"), 0))
    future = client.elect_leaders(ElectionType.PREFERRED, wanted)
    results = {(tp.topic, tp.partition): error for tp, error in future.result(TIMEOUT).items()}
    codes = {key: error.code() if error else None for key, error in results.items()}
    assert codes == {
        (topic, 0): ErrorCode.election_not_needed,
        (topic, 1): ErrorCode.election_not_needed,
        (topic, 5): ErrorCode.unknown_topic_or_partition,
        (wanted[3].topic, 0): ErrorCode.unknown_topic_or_partition,
    }


def test_elect_leaders_versions_and_all_partitions(broker, admin, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    with Connection(broker.bootstrap) as conn:

        def elect(version: int, partitions: Any, election_type: int = 0) -> Any:
            return conn.request(
                request(
                    ELECT_LEADERS,
                    version,
                    election_type=election_type,
                    topic_partitions=partitions,
                    timeout=1000,
                )
            )

        def codes(answer: Any) -> list[tuple[str, int, ErrorCode]]:
            return [
                (t.topic, p.partition_id, p.error_code)
                for t in answer.replica_election_results
                for p in t.partition_result
            ]

        asked = [{"topic": topic, "partitions": [1]}]
        # v0 predates ELECTION_NOT_NEEDED: the preferred leader leading is success.
        assert codes(elect(0, asked)) == [(topic, 1, ErrorCode.none)]
        unclean = elect(2, asked, election_type=1)
        assert unclean.error_code == ErrorCode.none
        assert codes(unclean) == [(topic, 1, ErrorCode.election_not_needed)]
        assert unclean.replica_election_results[0].partition_result[0].error_message
        # Every partition (null): those needing no election are left out, as in Kafka.
        everything = elect(2, None)
        assert everything.error_code == ErrorCode.none
        assert everything.replica_election_results == ()
        assert elect(1, asked, election_type=9).error_code == ErrorCode.invalid_request
    # kafka-python counts ELECTION_NOT_NEEDED as no error.
    answer = admin.elect_leaders(0, {topic: [0, 1]})
    assert answer.error_code == 0


# -- partition reassignments --------------------------------------------------------------------


def test_partition_reassignments(broker, admin, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 3)
    missing = topic_name("missing")
    tp = [KafkaTopicPartition(topic, p) for p in range(3)]
    results = admin.alter_partition_reassignments(
        {
            tp[0]: [0],  # where it is: a no-op
            tp[1]: [0, 1],  # broker 1 does not exist
            tp[2]: None,  # cancel: nothing in progress
            KafkaTopicPartition(topic, 9): [0],
            KafkaTopicPartition(missing, 0): [0],
        }
    )
    assert results == {
        tp[0]: None,
        tp[1]: InvalidReplicationAssignmentError,
        tp[2]: NoReassignmentInProgressError,
        KafkaTopicPartition(topic, 9): UnknownTopicOrPartitionError,
        KafkaTopicPartition(missing, 0): UnknownTopicOrPartitionError,
    }
    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments({topic: [0, 1], missing: [0]}) == {}
    with Connection(broker.bootstrap) as conn:
        answer = conn.request(
            request(
                45,
                0,
                timeout=1000,
                topics=[
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "replicas": []},
                            {"partition_index": 1, "replicas": [0, 0]},
                        ],
                    }
                ],
            )
        )
    assert answer.error_code == ErrorCode.none
    partitions = answer.responses[0].partitions
    assert [p.error_code for p in partitions] == [ErrorCode.invalid_replica_assignment] * 2
    assert "empty replica list" in partitions[0].error_message
    assert "more than once" in partitions[1].error_message
    # Nothing moved: every partition still has its one replica here.
    metadata = admin.describe_topics([topic])[0]["partitions"]
    assert [(p["leader_id"], p["replica_nodes"]) for p in metadata] == [(0, [0])] * 3


# -- DescribeQuorum -----------------------------------------------------------------------------


def test_describe_metadata_quorum(broker, admin):
    before = int(time.time() * 1000)
    quorum = admin.describe_metadata_quorum()
    (topic,) = quorum["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (partition,) = topic["partitions"]
    assert partition["error"] is None
    assert (partition["leader_id"], partition["leader_epoch"]) == (0, 1)
    assert partition["high_watermark"] == 0 and partition["observers"] == []
    (voter,) = partition["current_voters"]
    assert voter["replica_id"] == 0 and voter["log_end_offset"] == 0
    assert voter["last_caught_up_timestamp"] >= before
    (node,) = quorum["nodes"]  # v2: the voters' endpoints
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    assert node["node_id"] == 0 and node["listeners"][0]["port"] == port
    with Connection(broker.bootstrap) as conn:
        for version in (0, 2):
            for topic_name, index in (("__cluster_metadata", 1), ("other", 0)):
                answer = conn.request(
                    request(
                        DESCRIBE_QUORUM,
                        version,
                        topics=[
                            {"topic_name": topic_name, "partitions": [{"partition_index": index}]}
                        ],
                    )
                )
                assert answer.error_code == ErrorCode.none
                (part,) = answer.topics[0].partitions
                assert part.error_code == ErrorCode.unknown_topic_or_partition


# -- DescribeProducers --------------------------------------------------------------------------


def test_describe_producers_raw(broker, admin, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    before = int(time.time() * 1000)
    with Connection(broker.bootstrap) as conn:
        pid, epoch = conn.init_producer_id()
        other, _ = conn.init_producer_id()
        for sequence in (0, 3):
            batch = build_batch(
                [b"a", b"b", b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=sequence
            )
            assert conn.produce(topic, 0, batch).error_code == ErrorCode.none
        batch = build_batch([b"z"], producer_id=other, producer_epoch=0, base_sequence=0)
        assert conn.produce(topic, 0, batch).error_code == ErrorCode.none
        assert conn.produce(topic, 1, build_batch([b"plain"])).error_code == ErrorCode.none
    states = admin.describe_producers([KafkaTopicPartition(topic, p) for p in (0, 1)])
    active = states[KafkaTopicPartition(topic, 0)].active_producers
    assert [(p.producer_id, p.producer_epoch, p.last_sequence) for p in active] == sorted(
        [(pid, epoch, 5), (other, 0, 0)]
    )
    assert all(p.last_timestamp >= before and recent(p.last_timestamp) for p in active)
    assert all(p.coordinator_epoch == -1 for p in active)
    assert all(p.current_transaction_start_offset == -1 for p in active)
    assert states[KafkaTopicPartition(topic, 1)].active_producers == []  # not idempotent
    with Connection(broker.bootstrap) as conn:
        answer = conn.request(
            request(
                DESCRIBE_PRODUCERS,
                0,
                topics=[
                    {"name": topic, "partition_indexes": [7]},
                    {"name": topic_name("missing"), "partition_indexes": [0]},
                ],
            )
        )
    codes = [p.error_code for t in answer.topics for p in t.partitions]
    assert codes == [ErrorCode.unknown_topic_or_partition] * 2


def test_describe_producers_of_a_real_idempotent_producer(broker, admin, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    try:
        for i in range(10):
            producer.send(topic, b"v%d" % i, partition=0).get(timeout=TIMEOUT)
    finally:
        producer.close()
    (state,) = admin.describe_producers([KafkaTopicPartition(topic, 0)]).values()
    (active,) = state.active_producers
    assert active.producer_id >= 0 and active.producer_epoch >= 0
    assert active.last_sequence == 9  # one batch per send, sequences 0..9


# -- client telemetry (KIP-714): not offered ------------------------------------------------


def test_telemetry_is_not_offered_without_a_metrics_sink(broker):
    """As a Kafka broker without a ClientTelemetry metrics reporter: ApiVersions lists neither
    GetTelemetrySubscriptions nor PushTelemetry (clients then never ask, and librdkafka no
    longer logs "Telemetry client instance id changed" for every client)."""
    with Connection(broker.bootstrap) as conn:
        offered = {api.api_key for api in conn.api_versions().api_keys}
    assert GET_TELEMETRY not in offered and PUSH_TELEMETRY not in offered
    assert {0, 1, 3, 18} <= offered  # the answer is a real one


BROKER_ARGS = ("--metrics", f"127.0.0.1:{free_port()}")


def requests_of(api: str) -> float:
    """The broker's count of requests of ``api`` (Prometheus, ``--metrics``)."""
    with urllib.request.urlopen(f"http://{BROKER_ARGS[1]}/metrics", timeout=TIMEOUT) as page:
        text = page.read().decode()
    found = re.search(rf'kafkaesque_requests_total{{api="{api}"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_librdkafka_never_asks_for_telemetry(broker, topic_name):
    """librdkafka produces without a telemetry request: the broker does not offer one."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        producer.produce(topic_name(), b"v")
        assert producer.flush(TIMEOUT) == 0
        assert requests_of("api_versions") > 0  # the metrics do count requests
        assert requests_of("get_telemetry_subscriptions") == 0
        assert requests_of("push_telemetry") == 0
    finally:
        producer.flush(TIMEOUT)
