"""The classic group APIs at the versions Kafka 4 advertises, over a raw connection: each
version's own behaviour (batched lookups and fetches, static members, protocol checks,
filters, OffsetDelete) and the group configs the broker enforces."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, assignment_bytes, join_request, request
from tests.wire.common import FAST_GROUP_ARGS, create_topic

BROKER_ARGS = FAST_GROUP_ARGS  # the module's server: short group delays, sessions from 1 s
KAFKA4_GROUP_VERSIONS = {8: 9, 9: 9, 10: 6, 11: 9, 12: 4, 13: 5, 14: 5, 15: 5, 16: 5, 42: 2, 47: 0}
NOT_ASKED = -(2**31)
# READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: a group's, with no authorizer
GROUP_OPERATIONS = 1 << 3 | 1 << 6 | 1 << 8 | 1 << 10 | 1 << 11


def sync_v5(conn: Connection, group: str, joined, assignments: dict, **names) -> object:
    return conn.request(
        request(
            14,
            5,
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=names.pop("instance_id", None),
            protocol_type=names.get("protocol_type"),
            protocol_name=names.get("protocol_name"),
            assignments=[{"member_id": m, "assignment": a} for m, a in assignments.items()],
        )
    )


def heartbeat_v4(conn: Connection, group: str, generation: int, member: str, instance=None):
    req = request(
        12,
        4,
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
    )
    return conn.request(req).error_code


def commit(conn: Connection, version: int, group: str, generation: int, member: str, **kw):
    """OffsetCommit of ``version`` for partition 0 of kw["topic"]: its error code."""
    req = request(
        8,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=kw.get("instance_id"),
        topics=[
            {
                "name": kw["topic"],
                "partitions": [
                    {
                        "partition_index": kw.get("partition", 0),
                        "committed_offset": kw.get("offset", 1),
                        "committed_leader_epoch": kw.get("epoch", -1),
                        "committed_metadata": kw.get("metadata"),
                    }
                ],
            }
        ],
    )
    ((partition,),) = [t.partitions for t in conn.request(req).topics]
    return partition.error_code


def test_api_versions_match_kafka4(broker):
    with Connection(broker.bootstrap) as conn:
        keys = {k.api_key: (k.min_version, k.max_version) for k in conn.api_versions(3).api_keys}
    assert {k: keys[k][1] for k in KAFKA4_GROUP_VERSIONS} == KAFKA4_GROUP_VERSIONS


def test_find_coordinator_batched_and_refusals(broker):
    with Connection(broker.bootstrap) as conn:
        batched = conn.request(request(10, 4, key_type=0, coordinator_keys=("g-a", "g-b")))
        assert [(c.key, c.error_code, c.port) for c in batched.coordinators] == [
            ("g-a", ErrorCode.none, broker.port),
            ("g-b", ErrorCode.none, broker.port),
        ]
        # A share group's coordinator (v6): a per-key error with a message, no hang-up.
        share = conn.request(request(10, 6, key_type=2, coordinator_keys=("g-a:t:0",)))
        (refused,) = share.coordinators
        assert refused.error_code == ErrorCode.invalid_request and refused.node_id == -1
        assert "share groups" in refused.error_message
        old = conn.request(request(10, 3, key="g-a", key_type=2))
        assert old.error_code == ErrorCode.invalid_request
        txn = conn.request(request(10, 5, key_type=1, coordinator_keys=("tx",)))
        assert [(c.key, c.error_code, c.port) for c in txn.coordinators] == [
            ("tx", ErrorCode.none, broker.port)
        ]
        assert conn.api_versions().error_code == ErrorCode.none  # still connected


def test_offset_fetch_v8_batches_groups_with_leader_epochs(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    g1, g2, unknown = f"g1-{topic}", f"g2-{topic}", f"g3-{topic}"
    with Connection(broker.bootstrap) as conn:
        assert commit(conn, 9, g1, -1, "", topic=topic, offset=5, epoch=3) == ErrorCode.none
        stored = commit(conn, 8, g2, -1, "", topic=topic, partition=1, offset=7, metadata="m")
        assert stored == ErrorCode.none
        assert commit(conn, 8, g2, -1, "", topic=topic, offset=9) == ErrorCode.none
        for version in (8, 9):
            resp = conn.request(
                request(
                    9,
                    version,
                    groups=[
                        {"group_id": g1, "member_id": None, "member_epoch": -1, "topics": None},
                        {
                            "group_id": g2,
                            "member_id": None,
                            "member_epoch": -1,
                            "topics": [{"name": topic, "partition_indexes": [1]}],
                        },
                        {
                            "group_id": unknown,
                            "member_id": None,
                            "member_epoch": -1,
                            "topics": [{"name": topic, "partition_indexes": [0]}],
                        },
                    ],
                    require_stable=True,
                )
            )
            got = {
                g.group_id: (
                    g.error_code,
                    [
                        (
                            t.name,
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata,
                        )
                        for t in g.topics
                        for p in t.partitions
                    ],
                )
                for g in resp.groups
            }
            assert got == {
                g1: (ErrorCode.none, [(topic, 0, 5, 3, "")]),
                g2: (ErrorCode.none, [(topic, 1, 7, -1, "m")]),
                unknown: (ErrorCode.none, [(topic, 0, -1, -1, "")]),
            }, version


def test_offset_commit_versions_and_static_fencing(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 1)
    with Connection(broker.bootstrap) as conn:
        # No such group: v9 says so; older versions keep Kafka's ILLEGAL_GENERATION.
        assert commit(conn, 9, group, 1, "m", topic=topic) == ErrorCode.group_id_not_found
        assert commit(conn, 8, group, 1, "m", topic=topic) == ErrorCode.illegal_generation
        joined = conn.join_group(group, topics=[topic], version=9, instance_id="inst")
        assert joined.error_code == ErrorCode.none, joined  # static: no MEMBER_ID_REQUIRED
        assert joined.member_id.startswith("inst-"), joined.member_id
        me, gen = joined.member_id, joined.generation_id
        assert sync_v5(conn, group, joined, {me: b""}, instance_id="inst").error_code == 0
        ok = commit(conn, 9, group, gen, me, topic=topic, instance_id="inst", epoch=2)
        assert ok == ErrorCode.none
        fenced = commit(conn, 7, group, gen, "someone-else", topic=topic, instance_id="inst")
        assert fenced == ErrorCode.fenced_instance_id
        unknown = commit(conn, 9, group, gen, me, topic=topic, instance_id="other")
        assert unknown == ErrorCode.unknown_member_id
        assert commit(conn, 9, group, gen + 1, me, topic=topic) == ErrorCode.illegal_generation


def test_join_v9_static_leader_rejoin_skips_assignment(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    mine = assignment_bytes({topic: [0, 1]})
    with Connection(broker.bootstrap) as conn:
        first = conn.join_group(group, topics=[topic], version=9, instance_id="s-1")
        assert first.error_code == ErrorCode.none, first
        assert first.protocol_type == "consumer" and first.protocol_name == "range"
        assert not first.skip_assignment and len(first.members) == 1
        # SyncGroup v5: the protocol must be the group's, and is named in the answer.
        wrong = sync_v5(
            conn, group, first, {first.member_id: mine}, instance_id="s-1", protocol_name="sticky"
        )
        assert wrong.error_code == ErrorCode.inconsistent_group_protocol, wrong
        synced = sync_v5(
            conn,
            group,
            first,
            {first.member_id: mine},
            instance_id="s-1",
            protocol_type="consumer",
            protocol_name="range",
        )
        assert synced.error_code == ErrorCode.none and synced.assignment == mine, synced
        assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
        # The process restarts: a new member id under the same instance, same generation.
        again = conn.join_group(group, topics=[topic], version=9, instance_id="s-1")
        assert again.error_code == ErrorCode.none and again.member_id != first.member_id
        assert again.generation_id == first.generation_id, again
        assert again.skip_assignment and again.leader == again.member_id, again
        assert [(m.member_id, m.group_instance_id) for m in again.members] == [
            (again.member_id, "s-1")
        ]
        kept = sync_v5(conn, group, again, {}, instance_id="s-1")
        assert kept.assignment == mine, kept
        gen = first.generation_id
        assert heartbeat_v4(conn, group, gen, first.member_id, "s-1") == (
            ErrorCode.fenced_instance_id
        )
        assert heartbeat_v4(conn, group, gen, again.member_id, "s-1") == ErrorCode.none
        # Before v9 the static leader gets no members, so it cannot reassign.
        old = conn.join_group(group, topics=[topic], version=5, instance_id="s-1")
        assert old.error_code == ErrorCode.none and old.leader == old.member_id, old
        assert old.members == () and old.generation_id == gen, old
        # LeaveGroup v5 by instance id, with a reason.
        left = conn.request(
            request(
                13,
                5,
                group_id=group,
                members=[{"member_id": "", "group_instance_id": "s-1", "reason": "shutdown"}],
            )
        )
        assert [m.error_code for m in left.members] == [ErrorCode.none], left
        assert conn.describe_group(group).group_state == "Empty"


def test_list_groups_filters_and_describe_operations(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    stable, empty = f"stable-{topic}", f"empty-{topic}"
    with Connection(broker.bootstrap) as conn:
        joined = conn.join_new_member(stable, [topic])
        assert conn.sync_group(stable, joined.generation_id, joined.member_id, {}).error_code == 0
        assert commit(conn, 9, empty, -1, "", topic=topic) == ErrorCode.none

        def listed(states=(), types=()):
            resp = conn.request(request(16, 5, states_filter=states, types_filter=types))
            return {
                g.group_id: (g.group_state, g.group_type, g.protocol_type)
                for g in resp.groups
                if g.group_id in (stable, empty)
            }

        assert listed() == {
            stable: ("Stable", "classic", "consumer"),
            empty: ("Empty", "classic", ""),
        }
        assert listed(states=("STABLE",)) == {stable: ("Stable", "classic", "consumer")}
        assert listed(states=("Empty", "Dead")) == {empty: ("Empty", "classic", "")}
        assert listed(types=("Classic",)).keys() == {stable, empty}
        assert listed(types=("consumer", "share")) == {}
        for include, expected in ((True, GROUP_OPERATIONS), (False, NOT_ASKED)):
            resp = conn.request(
                request(15, 5, groups=(stable,), include_authorized_operations=include)
            )
            assert resp.groups[0].authorized_operations == expected
        deleted = conn.request(request(42, 2, groups_names=(empty,)))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [(empty, ErrorCode.none)]


def offset_delete(conn: Connection, group: str, partitions: dict[str, list[int]]):
    resp = conn.request(
        request(
            47,
            0,
            group_id=group,
            topics=[
                {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                for t, ps in partitions.items()
            ],
        )
    )
    return resp.error_code, {
        (t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions
    }


def test_offset_delete_spares_subscribed_topics(broker, topic_name):
    used, unused = topic_name(), topic_name()
    group = f"g-{used}"
    for t in (used, unused):
        create_topic(broker.bootstrap, t, 2)
    with Connection(broker.bootstrap) as conn:
        assert offset_delete(conn, group, {used: [0]}) == (ErrorCode.group_id_not_found, {})
        for t in (used, unused):
            for p in (0, 1):
                assert commit(conn, 9, group, -1, "", topic=t, partition=p, offset=3) == 0
        joined = conn.join_new_member(group, [used])  # subscribes to ``used`` only
        assert conn.sync_group(group, joined.generation_id, joined.member_id, {}).error_code == 0
        assert offset_delete(conn, group, {used: [0], unused: [1]}) == (
            ErrorCode.none,
            {(used, 0): ErrorCode.group_subscribed_to_topic, (unused, 1): ErrorCode.none},
        )
        assert set(conn.offset_fetch(group)) == {(unused, 0), (used, 0), (used, 1)}
        conn.leave_group(group, joined.member_id)
        # Empty now: nobody subscribes, every offset may go.
        assert offset_delete(conn, group, {used: [0, 1]}) == (
            ErrorCode.none,
            {(used, 0): ErrorCode.none, (used, 1): ErrorCode.none},
        )
        assert set(conn.offset_fetch(group)) == {(unused, 0)}


def test_group_configs_are_enforced(broker_factory, topic_name):
    limited = broker_factory(
        *FAST_GROUP_ARGS,
        "--config",
        "group.max.size=2",
        "--config",
        "group.max.session.timeout.ms=20000",
    )
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(limited.bootstrap, topic, 3)
    with Connection(limited.bootstrap) as conn:
        for session_ms in (999, 20_001):
            refused = conn.join_group(group, topics=[topic], session_ms=session_ms)
            assert refused.error_code == ErrorCode.invalid_session_timeout, refused
        a = conn.join_new_member(group, [topic])
        a_sync = conn.sync_group(group, a.generation_id, a.member_id, {a.member_id: b""})
        assert a_sync.error_code == ErrorCode.none
        b_id = conn.join_group(group, topics=[topic]).member_id
        with Connection(limited.bootstrap) as other:
            waiting = join_request(group, b_id, topics=[topic])
            waiting_id = other.send_request(waiting)
            again = conn.join_group(group, a.member_id, topics=[topic])
            assert again.error_code == ErrorCode.none and len(again.members) == 2, again
            assert other.read_response(waiting, waiting_id).error_code == ErrorCode.none
        # A third member does not fit, before it is even given an id; the group is unchanged.
        for instance_id in (None, "s-9"):
            full = conn.join_group(group, topics=[topic], instance_id=instance_id)
            assert full.error_code == ErrorCode.group_max_size_reached, full
            assert full.member_id == ""
        described = conn.describe_group(group)
        assert len(described.members) == 2 and described.group_state == "CompletingRebalance"
