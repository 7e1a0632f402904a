"""Share groups (KIP-932) over raw requests, where a client cannot send what is tested:
acknowledging records not acquired, a stale member epoch, unknown or out-of-step share
sessions (Kafka's error codes, nothing changed), the admin APIs on share-partition
offsets, ListGroups/DeleteGroups with share groups, and a broker SIGKILLed and restarted
keeping every share-partition's state."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.records.batch import base_offset, split_batches
from tests.kafka_client import Connection, join_request, request
from tests.wire.common import FAST_GROUP_ARGS, create_topic, produce_numbered

# Long locks (nothing expires unasked), short classic join rounds (a classic group here).
BROKER_ARGS = (*FAST_GROUP_ARGS, "--config", "group.share.record.lock.duration.ms=60000")
GROUP_RESOURCE, SET = 32, 0
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 121, 122, 123


def set_group_configs(conn: Connection, group: str, **configs: str) -> None:
    req = request(
        44,
        1,
        resources=[
            {
                "resource_type": GROUP_RESOURCE,
                "resource_name": group,
                "configs": [
                    {"name": k.replace("_", "."), "config_operation": SET, "value": v}
                    for k, v in configs.items()
                ],
            }
        ],
        validate_only=False,
    )
    (result,) = conn.request(req).responses
    assert result.error_code == ErrorCode.none, result


def topic_id(conn: Connection, topic: str) -> uuid.UUID:
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


def heartbeat(
    conn: Connection, group: str, member: str, epoch: int, topics: list[str] | None
) -> Any:
    return conn.request(
        request(
            76,
            1,
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            rack_id=None,
            subscribed_topic_names=topics,
        )
    )


def share_fetch(
    conn: Connection,
    group: str,
    member: str,
    epoch: int,
    tid: uuid.UUID,
    acks: list[tuple[int, int, list[int]]] = (),  # type: ignore[assignment]
    max_records: int = 500,
    fetch: bool = True,
    version: int = 1,
    **v2: Any,
) -> Any:
    partitions = [
        {
            "partition_index": 0,
            "acknowledgement_batches": [
                {"first_offset": f, "last_offset": last, "acknowledge_types": t}
                for f, last, t in acks
            ],
        }
    ]
    return conn.request(
        request(
            78,
            version,
            **v2,
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            max_wait=100,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=max_records,
            batch_size=max_records,
            topics=[{"topic_id": tid, "partitions": partitions}] if (fetch or acks) else [],
            forgotten_topics_data=[],
        )
    )


def share_ack(
    conn: Connection, group: str, member: str, epoch: int, tid: uuid.UUID, acks: list
) -> Any:
    return conn.request(
        request(
            79,
            1,
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            topics=[
                {
                    "topic_id": tid,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": f, "last_offset": last, "acknowledge_types": t}
                                for f, last, t in acks
                            ],
                        }
                    ],
                }
            ],
        )
    )


def only_partition(resp: Any) -> Any:
    (topic,) = resp.responses
    (partition,) = topic.partitions
    return partition


def describe_offsets(conn: Connection, group: str, topic: str) -> tuple[int, int]:
    """(start offset, lag) of partition 0 of ``topic`` in the share group."""
    resp = conn.request(
        request(
            90,
            1,
            groups=[{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}],
        )
    )
    (g,) = resp.groups
    assert g.error_code == ErrorCode.none, g
    (t,) = g.topics
    (p,) = t.partitions
    return p.start_offset, p.lag


def joined(conn: Connection, group: str, topic: str) -> tuple[str, int]:
    member = str(uuid.uuid4())
    resp = heartbeat(conn, group, member, 0, [topic])
    assert resp.error_code == ErrorCode.none, resp
    assert [list(tp.partitions) for tp in resp.assignment.topic_partitions] == [[0]]
    return member, resp.member_epoch


def setup(broker: Any, topic_name: Any, records: int = 10) -> tuple[str, str]:
    topic = topic_name()
    group = f"share-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 1, 0, records, batch=5)
    with Connection(broker.bootstrap) as conn:
        set_group_configs(conn, group, share_auto_offset_reset="earliest")
    return topic, group


def test_acquire_acknowledge_and_bad_acknowledgements(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        member, _ = joined(conn, group, topic)
        first = only_partition(share_fetch(conn, group, member, 0, tid, max_records=5))
        assert first.error_code == ErrorCode.none
        # Whole batches of 5: the first batch, acquired once.
        assert [
            (r.first_offset, r.last_offset, r.delivery_count) for r in first.acquired_records
        ] == [(0, 4, 1)]
        assert [base_offset(b) for b in split_batches(first.records)] == [0]
        # Past what was ever fetched: INVALID_REQUEST.
        past = only_partition(share_ack(conn, group, member, 1, tid, [(5, 5, [1])]))
        assert past.error_code == ErrorCode.invalid_request
        # Another member's records (5-9 are the other's; 0 is this one's): refused whole,
        # INVALID_RECORD_STATE, and 3, acquired by this member, stays acquired.
        other, _ = joined(conn, group, topic)
        other_fetch = share_fetch(conn, group, other, 0, tid, fetch=True, max_records=5)
        assert [
            (r.first_offset, r.last_offset) for r in only_partition(other_fetch).acquired_records
        ] == [(5, 9)]
        stolen = only_partition(share_ack(conn, group, other, 1, tid, [(0, 0, [1])]))
        assert stolen.error_code == INVALID_RECORD_STATE
        mixed = only_partition(share_ack(conn, group, member, 2, tid, [(3, 3, [1]), (7, 7, [1])]))
        assert mixed.error_code == INVALID_RECORD_STATE
        # A bad acknowledge type: INVALID_REQUEST.
        bad = only_partition(share_ack(conn, group, member, 3, tid, [(0, 0, [7])]))
        assert bad.error_code == ErrorCode.invalid_request
        assert describe_offsets(conn, group, topic)[0] == 0  # nothing accepted yet
        # Accept 0-4 (a piggybacked acknowledgement in the next fetch); again, below the
        # start: already done, nothing to do (as Kafka).
        again = share_fetch(conn, group, member, 4, tid, acks=[(0, 4, [1])])
        assert only_partition(again).acknowledge_error_code == ErrorCode.none
        twice = only_partition(share_ack(conn, group, member, 5, tid, [(0, 4, [1])]))
        assert twice.error_code == ErrorCode.none
        assert describe_offsets(conn, group, topic) == (5, 5)


def test_session_errors_and_a_stale_member_epoch(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        member, epoch = joined(conn, group, topic)
        # No session yet: continuing or closing one is SHARE_SESSION_NOT_FOUND, whole.
        assert share_fetch(conn, group, member, 1, tid).error_code == SHARE_SESSION_NOT_FOUND
        assert (
            share_ack(conn, group, member, 3, tid, [(0, 0, [1])]).error_code
            == SHARE_SESSION_NOT_FOUND
        )
        # A ShareAcknowledge cannot open one.
        assert (
            share_ack(conn, group, member, 0, tid, [(0, 0, [1])]).error_code
            == INVALID_SHARE_SESSION_EPOCH
        )
        # Acknowledgements in an opening fetch: INVALID_REQUEST, nothing acquired.
        assert (
            share_fetch(conn, group, member, 0, tid, acks=[(0, 0, [1])]).error_code
            == ErrorCode.invalid_request
        )
        opened = only_partition(share_fetch(conn, group, member, 0, tid))
        assert opened.acquired_records[0].first_offset == 0
        # Out of step: INVALID_SHARE_SESSION_EPOCH, and the acknowledgement in it not applied.
        wrong = share_fetch(conn, group, member, 5, tid, acks=[(0, 9, [1])])
        assert wrong.error_code == INVALID_SHARE_SESSION_EPOCH
        assert describe_offsets(conn, group, topic)[0] == 0
        # A stale member epoch (one the member never had): FENCED_MEMBER_EPOCH.
        fenced = heartbeat(conn, group, member, epoch + 5, None)
        assert fenced.error_code == ErrorCode.fenced_member_epoch
        unknown = heartbeat(conn, group, str(uuid.uuid4()), 3, None)
        assert unknown.error_code == ErrorCode.unknown_member_id
        assert heartbeat(conn, group, member, epoch, None).error_code == ErrorCode.none
        # Closing the session (epoch -1) releases what the member holds: a new member
        # gets the records again, delivered a second time.
        assert share_ack(conn, group, member, -1, tid, []).error_code == ErrorCode.none
        other, _ = joined(conn, group, topic)
        again = only_partition(share_fetch(conn, group, other, 0, tid))
        first = again.acquired_records[0]
        assert (first.first_offset, first.delivery_count) == (0, 2)


def test_admin_offsets_listing_and_deletion(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        member, _ = joined(conn, group, topic)
        share_fetch(conn, group, member, 0, tid)
        listed = conn.request(request(16, 5, states_filter=[], types_filter=["share"])).groups
        assert [
            (g.group_id, g.group_state, g.group_type) for g in listed if g.group_id == group
        ] == [(group, "Stable", "share")]
        (described,) = conn.request(
            request(77, 1, group_ids=[group], include_authorized_operations=False)
        ).groups
        assert (described.group_state, [m.member_id for m in described.members]) == (
            "Stable",
            [member],
        )
        # Altering or deleting offsets needs an empty group; so does deleting the group.
        alter = request(
            91,
            0,
            group_id=group,
            topics=[
                {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 8}]}
            ],
        )
        assert conn.request(alter).error_code == ErrorCode.non_empty_group
        (refused,) = conn.request(request(42, 2, groups_names=[group])).results
        assert refused.error_code == ErrorCode.non_empty_group
        assert heartbeat(conn, group, member, -1, None).error_code == ErrorCode.none
        assert conn.request(alter).error_code == ErrorCode.none
        assert describe_offsets(conn, group, topic) == (8, 2)
        delete = request(92, 0, group_id=group, topics=[{"topic_name": topic}])
        assert conn.request(delete).error_code == ErrorCode.none
        (g,) = conn.request(request(90, 1, groups=[{"group_id": group, "topics": None}])).groups
        assert g.topics == ()
        (deleted,) = conn.request(request(42, 2, groups_names=[group])).results
        assert deleted.error_code == ErrorCode.none
        (gone,) = conn.request(
            request(77, 1, group_ids=[group], include_authorized_operations=False)
        ).groups
        assert gone.error_code == ErrorCode.group_id_not_found


def test_state_survives_a_broker_sigkill(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        member, _ = joined(conn, group, topic)
        share_fetch(conn, group, member, 0, tid, max_records=5)
        share_ack(conn, group, member, 1, tid, [(0, 4, [1])])
    broker.proc.kill()
    broker.proc.wait()
    broker.start()
    with Connection(broker.bootstrap) as conn:
        # The accepted records stay accepted; the share session is gone with the process.
        assert describe_offsets(conn, group, topic) == (5, 5)
        assert share_fetch(conn, group, member, 2, tid).error_code == SHARE_SESSION_NOT_FOUND
        got = only_partition(share_fetch(conn, group, member, 0, tid))
        assert [
            (r.first_offset, r.last_offset, r.delivery_count) for r in got.acquired_records
        ] == [(5, 9, 1)]


def quota(conn: Connection, client_id: str, rate: float | None) -> None:
    """consumer_byte_rate for ``client_id`` (None: removed), AlterClientQuotas."""
    entity = [{"entity_type": "client-id", "entity_name": client_id}]
    op = {"key": "consumer_byte_rate", "value": rate or 0.0, "remove": rate is None}
    req = request(49, 1, entries=[{"entity": entity, "ops": [op]}], validate_only=False)
    assert [e.error_code for e in conn.request(req).entries] == [ErrorCode.none]


def test_share_fetches_count_against_the_consumer_quota(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as admin, Connection(broker.bootstrap) as conn:
        conn.client_id = "share-quota"
        quota(admin, "share-quota", 10.0)  # 10 bytes/s: the first answer is over it
        try:
            tid = topic_id(conn, topic)
            member, _ = joined(conn, group, topic)
            first = share_fetch(conn, group, member, 0, tid)
            # Throttled, and its records sent all the same: they are acquired for it.
            assert first.throttle_time.total_seconds() > 0
            assert only_partition(first).acquired_records
        finally:
            quota(admin, "share-quota", None)


def test_v2_record_limit_and_renewed_locks(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        member, _ = joined(conn, group, topic)
        limited = share_fetch(
            conn, group, member, 0, tid, max_records=3, version=2, share_acquire_mode=1
        )
        assert [
            (r.first_offset, r.last_offset) for r in only_partition(limited).acquired_records
        ] == [(0, 2)]
        # RENEW is v2's: INVALID_REQUEST in v1.
        old = share_fetch(conn, group, member, 1, tid, acks=[(0, 2, [4])], version=1, fetch=False)
        assert only_partition(old).acknowledge_error_code == ErrorCode.invalid_request
        # RENEW (v2) keeps the records the member's, with a new lock; a renewing request
        # fetches nothing more.
        renew = share_fetch(
            conn, group, member, 2, tid, acks=[(0, 2, [4])], version=2, is_renew_ack=True
        )
        partition = only_partition(renew)
        assert (partition.acknowledge_error_code, partition.acquired_records) == (
            ErrorCode.none,
            (),
        )
        accept = share_ack(conn, group, member, 3, tid, [(0, 2, [1])])
        assert only_partition(accept).error_code == ErrorCode.none
        assert describe_offsets(conn, group, topic)[0] == 3


def test_a_deleted_topics_share_partitions_go_with_it(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        tid = topic_id(conn, topic)
        member, _ = joined(conn, group, topic)
        share_fetch(conn, group, member, 0, tid)
        share_ack(conn, group, member, 1, tid, [(0, 9, [1])])
        assert describe_offsets(conn, group, topic)[0] == 10
        deleted = conn.request(
            request(20, 6, topics=[{"name": topic, "topic_id": None}], timeout=5000)
        )
        assert [r.error_code for r in deleted.responses] == [ErrorCode.none]
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 1, 0, 3)
    with Connection(broker.bootstrap) as conn:
        # Created again: its share-partition starts afresh, at the earliest offset.
        got = only_partition(share_fetch(conn, group, member, 0, topic_id(conn, topic)))
        assert [(r.first_offset, r.last_offset) for r in got.acquired_records] == [(0, 2)]


def test_an_id_is_one_kind_of_group(broker, topic_name):
    topic, group = setup(broker, topic_name)
    with Connection(broker.bootstrap) as conn:
        joined(conn, group, topic)
        # A classic JoinGroup or a consumer-protocol join under a share group's id: refused.
        classic = conn.request(join_request(group, topics=[topic]))
        assert classic.error_code == ErrorCode.inconsistent_group_protocol
        consumer = conn.request(
            request(
                68,
                1,
                group_id=group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout=10_000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            )
        )
        assert consumer.error_code == ErrorCode.group_id_not_found
        # And a share group cannot take a classic group's id.
        other = f"classic-{topic}"
        conn.join_new_member(other, [topic])
        refused = heartbeat(conn, other, str(uuid.uuid4()), 0, [topic])
        assert refused.error_code == ErrorCode.group_id_not_found
