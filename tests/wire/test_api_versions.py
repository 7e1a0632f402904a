"""The data-path APIs at Kafka 4's versions: what clients infer from ApiVersions, and raw
requests at the newest versions, field by field (tagged fields, topic ids, record errors,
the new ListOffsets lookups)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import decode_batch, split_batches
from kafkaesque.records.build import build_batch
from tests.kafka_client import (
    Connection,
    create_topics_request,
    fetch_request,
    list_offsets_request,
    produce_request,
    request,
)
from tests.wire.common import BASE_TIMESTAMP

# Topics created without a partition count get num.partitions.
BROKER_ARGS = ("--config", "num.partitions=3")
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 12, 17, 10, 12  # the newest versions offered


def only(items: Any) -> Any:
    (item,) = items
    return item


def create(conn: Connection, topic: str, **configs: str) -> uuid.UUID:
    """A one-partition topic with ``configs``; its topic id, from Metadata v12."""
    entry = {
        "name": topic,
        "num_partitions": 1,
        "replication_factor": 1,
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }
    assert only(conn.request(create_topics_request(entry)).topics).error_code == ErrorCode.none
    described = only(conn.request(metadata_v12({"topic_id": None, "name": topic})).topics)
    assert described.error_code == ErrorCode.none
    return described.topic_id


def metadata_v12(*topics: dict[str, Any] | None) -> Any:
    """Metadata v12 of topics by name or id (no topics: None, all of them)."""
    return request(
        3,
        METADATA,
        topics=list(topics) if topics else None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def produce(conn: Connection, topic: str, batch: bytes) -> Any:
    """The PartitionProduceResponse of a Produce v12 to partition 0."""
    response = conn.request(produce_request(topic, {0: batch}, version=PRODUCE))
    return only(only(response.responses).partition_responses)


def fetch_by_id(conn: Connection, topic_id: uuid.UUID, offset: int = 0, **partition: int) -> Any:
    """A Fetch v17 of partition 0 of the topic with this id (other partition fields given)."""
    fields = {
        "partition": 0,
        "fetch_offset": offset,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": -1,
        **partition,
    }
    return conn.request(
        request(
            1,
            FETCH,
            max_wait=0,
            min_bytes=0,
            max_bytes=1 << 20,
            topics=[{"topic_id": topic_id, "partitions": [fields]}],
            forgotten_topics_data=(),
        )
    )


def list_offset(conn: Connection, topic: str, timestamp: int, version: int = LIST_OFFSETS) -> Any:
    response = conn.request(list_offsets_request(topic, 0, timestamp, version=version))
    return only(only(response.topics).partitions)


# -- what clients infer --------------------------------------------------------------------


def test_kafka_python_infers_kafka_4_and_creates_a_topic_with_broker_defaults(broker, topic_name):
    topic = topic_name()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        assert admin._client.check_version() >= (4, 0)
        # No partition count or replication factor: -1 each, the broker's defaults.
        admin.create_topics([NewTopic(topic)])
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    assert described["error_code"] == 0
    assert len(described["partitions"]) == 3  # num.partitions
    assert [p["replica_nodes"] for p in described["partitions"]] == [[0]] * 3


def test_api_versions_offers_the_kafka_4_data_path(broker):
    with Connection(broker.bootstrap) as conn:
        response = conn.api_versions(version=4)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    # Produce, Fetch, ListOffsets, Metadata, InitProducerId, OffsetForLeaderEpoch.
    expected = {0: (0, 12), 1: (4, 17), 2: (1, 10), 3: (0, 12), 22: (0, 5), 23: (2, 4)}
    assert {k: ranges[k] for k in expected} == expected


# -- Metadata ------------------------------------------------------------------------------


def test_metadata_v12_answers_by_name_and_by_id(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        topic_id = create(conn, topic)
        assert topic_id != uuid.UUID(int=0)
        all_topics = conn.request(metadata_v12())
        assert topic in {t.name for t in all_topics.topics}
        by_id = conn.request(
            metadata_v12(
                {"topic_id": topic_id, "name": None}, {"topic_id": uuid.uuid4(), "name": None}
            )
        )
        found, unknown = by_id.topics
        assert (found.name, found.topic_id, found.error_code) == (topic, topic_id, ErrorCode.none)
        assert unknown.error_code == ErrorCode.unknown_topic_id


# -- Produce -------------------------------------------------------------------------------


def test_produce_v12_accepts_a_batch(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        ok = produce(conn, topic, build_batch([b"a", b"b"], keys=[b"k", b"k"]))
    assert (ok.error_code, ok.base_offset, ok.record_errors, ok.error_message) == (
        ErrorCode.none,
        0,
        (),
        None,
    )


def test_produce_v12_names_the_keyless_records_of_a_refused_batch(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, **{"cleanup.policy": "compact"})
        refused = produce(conn, topic, build_batch([b"a", b"b", b"c"], keys=[None, b"k", None]))
        assert refused.error_code == ErrorCode.invalid_record
        assert "without key" in refused.error_message
        assert [e.batch_index for e in refused.record_errors] == [0, 2]
        assert all("without key" in e.batch_index_error_message for e in refused.record_errors)
        assert list_offset(conn, topic, -1).offset == 0  # nothing written


def test_produce_v12_names_the_records_with_timestamps_out_of_bounds(broker, topic_name):
    topic = topic_name()
    now = int(time.time() * 1000)
    hour = 3_600_000
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, **{"message.timestamp.before.max.ms": str(hour)})
        # The first and third records are a day old: each is named, the second is not.
        day_old = now - 24 * hour
        batch = build_batch([b"a", b"b", b"c"], timestamps=[day_old, now, day_old])
        refused = produce(conn, topic, batch)
        assert refused.error_code == ErrorCode.invalid_timestamp
        assert [e.batch_index for e in refused.record_errors] == [0, 2]
        assert refused.error_message and "out of range" in refused.error_message
        # An older version has no record_errors, but refuses the same.
        old = conn.request(produce_request(topic, {0: batch}, version=7))
        assert only(only(old.responses).partition_responses).error_code == (
            ErrorCode.invalid_timestamp
        )


# -- Fetch ---------------------------------------------------------------------------------


def test_fetch_v17_by_topic_id(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        topic_id = create(conn, topic)
        assert produce(conn, topic, build_batch([b"x", b"y"])).error_code == ErrorCode.none
        response = fetch_by_id(conn, topic_id)
        assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
        answered = only(response.responses)
        assert answered.topic_id == topic_id
        data = only(answered.partitions)
        assert (data.error_code, data.high_watermark) == (ErrorCode.none, 2)
        values = [r.value for b in split_batches(data.records) for r in decode_batch(b)]
        assert values == [b"x", b"y"]
        # No divergence, no fencing: the tagged fields keep their defaults.
        assert (data.diverging_epoch.epoch, data.diverging_epoch.end_offset) == (-1, -1)
        assert data.current_leader.leader_id == -1 and response.node_endpoints == ()


def test_fetch_v17_of_an_unknown_topic_id(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        known = create(conn, topic)
        stranger = uuid.uuid4()
        response = conn.request(
            request(
                1,
                FETCH,
                max_wait=0,
                min_bytes=0,
                topics=[
                    {
                        "topic_id": t,
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}
                        ],
                    }
                    for t in (stranger, known)
                ],
                forgotten_topics_data=(),
            )
        )
    unknown, found = response.responses
    assert unknown.topic_id == stranger
    assert only(unknown.partitions).error_code == ErrorCode.unknown_topic_id
    assert found.topic_id == known and only(found.partitions).error_code == ErrorCode.none


def test_fetch_v17_of_a_deleted_topic_id(broker, topic_name):
    """A topic deleted and created again under its name has a new id: the old one is
    unknown, not a way to read the new topic."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        old = create(conn, topic)
        assert only(fetch_by_id(conn, old).responses).partitions[0].error_code == ErrorCode.none
        deleted = conn.request(request(20, 1, topic_names=(topic,), timeout=10_000))
        assert only(deleted.responses).error_code == ErrorCode.none
        new = create(conn, topic)
        assert new != old
        time.sleep(1.1)  # past the second an id's name is trusted unchecked
        stale = only(only(fetch_by_id(conn, old).responses).partitions)
        assert stale.error_code == ErrorCode.unknown_topic_id
        fresh = only(only(fetch_by_id(conn, new).responses).partitions)
        assert fresh.error_code == ErrorCode.none


def test_sessionless_fetch_and_an_unknown_session(broker, topic_name):
    """A full fetch of epoch -1 opens no session: the answer says session 0. An
    incremental fetch naming a session that does not exist: FETCH_SESSION_ID_NOT_FOUND, and
    the client goes back to full fetches (tests/wire/test_fetch_sessions.py has the rest)."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        full = fetch_request(topic, {0: 0}, version=FETCH - 5)  # v12: by name
        response = conn.request(full)
        assert (response.error_code, response.session_id) == (ErrorCode.none, 0)
        incremental = request(
            1,
            12,
            max_wait=0,
            min_bytes=0,
            session_id=7,
            session_epoch=3,
            topics=(),
            forgotten_topics_data=(),
        )
        refused = conn.request(incremental)
        assert refused.error_code == ErrorCode.fetch_session_id_not_found
        assert refused.responses == ()


# -- ListOffsets ---------------------------------------------------------------------------


def test_list_offsets_v10_max_timestamp_and_the_local_and_tiered_ends(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        # Timestamps out of order: the largest is at offset 3, and again at 4.
        first = [BASE_TIMESTAMP + t for t in (100, 500, 300)]
        second = [BASE_TIMESTAMP + t for t in (200, 900, 900)]
        assert (
            produce(conn, topic, build_batch([b"a", b"b", b"c"], timestamps=first)).error_code == 0
        )
        assert (
            produce(conn, topic, build_batch([b"d", b"e", b"f"], timestamps=second)).error_code == 0
        )

        latest = list_offset(conn, topic, -3)
        assert (latest.error_code, latest.offset, latest.timestamp) == (
            ErrorCode.none,
            4,
            BASE_TIMESTAMP + 900,
        )
        local = list_offset(conn, topic, -4)
        assert (local.error_code, local.offset) == (ErrorCode.none, 0)
        # No archive (--no-archive): nothing is tiered.
        tiered = list_offset(conn, topic, -5)
        assert (tiered.error_code, tiered.offset) == (ErrorCode.none, -1)
        # DeleteRecords moves the local start too.
        deleted = conn.request(
            request(
                21,
                2,
                topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                timeout=10_000,
            )
        )
        assert only(only(deleted.topics).partitions).error_code == ErrorCode.none
        assert list_offset(conn, topic, -4).offset == 2


def test_list_offsets_lookups_need_their_versions(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        produce(conn, topic, build_batch([b"a"], timestamp=BASE_TIMESTAMP))
        # Each lookup from the version that brought it; before, and unknown ones, refused.
        for special, since in ((-3, 7), (-4, 8), (-5, 9)):
            refused = list_offset(conn, topic, special, version=since - 1)
            assert (refused.error_code, refused.offset) == (ErrorCode.unsupported_version, -1)
            assert list_offset(conn, topic, special, version=since).error_code == ErrorCode.none
        assert list_offset(conn, topic, -6).error_code == ErrorCode.unsupported_version
        assert list_offset(conn, topic, -3).offset == 0  # the one record


def test_list_offsets_max_timestamp_of_an_empty_partition(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        empty = list_offset(conn, topic, -3)
    assert (empty.error_code, empty.offset, empty.timestamp) == (ErrorCode.none, -1, -1)


# -- InitProducerId and OffsetForLeaderEpoch -------------------------------------------------


def test_init_producer_id_v5_gives_a_new_id_for_an_epoch_bump(broker, topic_name):
    """KIP-360: an idempotent producer sends its id and epoch to go on after an error; as
    Kafka for producers without a transactional id, it gets a fresh id at epoch 0."""
    topic = topic_name()

    def init(producer_id: int, epoch: int) -> Any:
        return conn.request(
            request(
                22,
                5,
                transactional_id=None,
                transaction_timeout=60_000,
                producer_id=producer_id,
                producer_epoch=epoch,
            )
        )

    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        first = init(-1, -1)
        assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
        bumped = init(first.producer_id, 0)
        assert bumped.error_code == ErrorCode.none
        assert bumped.producer_id not in (-1, first.producer_id)
        # The new id starts its sequences at 0.
        batch = build_batch(
            [b"a"], producer_id=bumped.producer_id, producer_epoch=0, base_sequence=0
        )
        assert produce(conn, topic, batch).error_code == ErrorCode.none
        # An id without an epoch (or the reverse) is a malformed request.
        for half in ((first.producer_id, -1), (-1, 0)):
            refused = init(*half)
            assert (refused.error_code, refused.producer_id) == (ErrorCode.invalid_request, -1)
        # A transactional id goes to the transaction coordinator: epoch 0, then bumped.
        transactional = conn.request(
            request(22, 5, transactional_id=f"tx-{topic}", transaction_timeout=60_000)
        )
        assert (transactional.error_code, transactional.producer_epoch) == (ErrorCode.none, 0)


def test_offset_for_leader_epoch_v4(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic)
        produce(conn, topic, build_batch([b"a", b"b"]))
        response = conn.request(
            request(
                23,
                4,
                replica_id=-1,
                topics=[
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
                            {"partition": 1, "current_leader_epoch": -1, "leader_epoch": 0},
                        ],
                    }
                ],
            )
        )
    epoch0, missing = only(response.topics).partitions
    assert (epoch0.error_code, epoch0.leader_epoch, epoch0.end_offset) == (ErrorCode.none, 0, 2)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
