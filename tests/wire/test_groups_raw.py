"""Consumer groups over a raw connection, a request at a time: the JoinGroup rounds, the
errors of commits and heartbeats, and generations across a rebalance."""

from __future__ import annotations

import re

from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, assignment_bytes, join_request, subscription
from tests.wire.common import FAST_GROUP_ARGS, create_topic, wait_until

BROKER_ARGS = FAST_GROUP_ARGS  # the module's server: short group delays
CLIENT_ID = "raw-groups"
MEMBER_ID = re.compile(
    rf"^{CLIENT_ID}-[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$"
)


def test_join_requires_member_id_then_syncs(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    with Connection(broker.bootstrap, client_id=CLIENT_ID) as conn:
        for version in (4, 5):
            first = conn.join_group(f"{group}-v{version}", topics=[topic], version=version)
            assert first.error_code == ErrorCode.member_id_required, first
            assert MEMBER_ID.match(first.member_id), first.member_id
            assert first.generation_id == -1 and not first.members, first
        joined = conn.join_group(f"{group}-v5", first.member_id, topics=[topic])
        assert joined.error_code == ErrorCode.none, joined
        assert joined.member_id == joined.leader == first.member_id
        assert joined.protocol_name == "range" and joined.generation_id >= 1
        assert [(m.member_id, m.metadata) for m in joined.members] == [
            (first.member_id, subscription([topic]))
        ]
        mine = assignment_bytes({topic: [0, 1]})
        synced = conn.sync_group(
            f"{group}-v5", joined.generation_id, joined.member_id, {joined.member_id: mine}
        )
        assert synced.error_code == ErrorCode.none and synced.assignment == mine, synced
        heartbeat = conn.heartbeat(f"{group}-v5", joined.generation_id, joined.member_id)
        assert heartbeat == ErrorCode.none
        described = conn.describe_group(f"{group}-v5")
        assert described.group_state == "Stable", described
        (member,) = described.members
        assert (member.member_id, member.client_id) == (joined.member_id, CLIENT_ID)
        assert member.member_assignment == mine
        left = conn.leave_group(f"{group}-v5", joined.member_id)
        assert left.error_code == ErrorCode.none, left
        assert left.members[0].error_code == ErrorCode.none, left
        assert conn.describe_group(f"{group}-v5").group_state == "Empty"
        # JoinGroup v3 and older: no MEMBER_ID_REQUIRED round.
        old = conn.join_group(f"{group}-v3", topics=[topic], version=3)
        assert old.error_code == ErrorCode.none and MEMBER_ID.match(old.member_id), old
        conn.leave_group(f"{group}-v3", old.member_id)
        assert conn.describe_group(f"{group}-v3").group_state == "Empty"


def test_commit_and_heartbeat_errors(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    with Connection(broker.bootstrap, client_id=CLIENT_ID) as conn:
        joined = conn.join_new_member(group, [topic])
        gen, me = joined.generation_id, joined.member_id
        synced = conn.sync_group(group, gen, me, {me: assignment_bytes({topic: [0, 1]})})
        assert synced.error_code == ErrorCode.none, synced

        def commit(offsets, generation=gen, member=me):
            return conn.offset_commit(group, generation, member, offsets)

        # Unknown topic and unknown partition, next to a good partition.
        assert commit(
            {
                (topic, 0): (1, "ok"),
                (topic, 2): (1, None),
                (f"{topic}-missing", 0): (1, None),
            }
        ) == {
            (topic, 0): ErrorCode.none,
            (topic, 2): ErrorCode.unknown_topic_or_partition,
            (f"{topic}-missing", 0): ErrorCode.unknown_topic_or_partition,
        }
        assert commit({(topic, -1): (1, None)}) == {
            (topic, -1): ErrorCode.unknown_topic_or_partition
        }
        # A stale (or future) generation, an unknown member.
        assert commit({(topic, 0): (2, None)}, generation=gen - 1) == {
            (topic, 0): ErrorCode.illegal_generation
        }
        assert commit({(topic, 0): (2, None)}, generation=gen + 5) == {
            (topic, 0): ErrorCode.illegal_generation
        }
        assert commit({(topic, 0): (2, None)}, member=f"{CLIENT_ID}-nobody") == {
            (topic, 0): ErrorCode.unknown_member_id
        }
        # A standalone commit (generation -1, no member) while the group has members.
        assert commit({(topic, 0): (2, None)}, generation=-1, member="") == {
            (topic, 0): ErrorCode.unknown_member_id
        }
        # Metadata up to 4096 bytes is kept; more is refused, per partition.
        big = "m" * 4096
        assert commit({(topic, 0): (3, big), (topic, 1): (4, big + "m")}) == {
            (topic, 0): ErrorCode.none,
            (topic, 1): ErrorCode.offset_metadata_too_large,
        }
        assert conn.offset_fetch(group, {topic: [0, 1]}) == {
            (topic, 0): (3, big, ErrorCode.none),
            (topic, 1): (-1, "", ErrorCode.none),
        }
        # Nothing refused was stored; metadata strings (not ASCII too) come back as sent.
        assert commit({(topic, 0): (5, "käse 🧀"), (topic, 1): (7, None)}) == {
            (topic, 0): ErrorCode.none,
            (topic, 1): ErrorCode.none,
        }
        assert conn.offset_fetch(group, None) == {
            (topic, 0): (5, "käse 🧀", ErrorCode.none),
            (topic, 1): (7, "", ErrorCode.none),
        }
        # Heartbeats: unknown member, stale generation, the real one.
        assert conn.heartbeat(group, gen, f"{CLIENT_ID}-nobody") == ErrorCode.unknown_member_id
        assert conn.heartbeat(f"{group}-none", 1, me) == ErrorCode.unknown_member_id
        assert conn.heartbeat(group, gen - 1, me) == ErrorCode.illegal_generation
        assert conn.heartbeat(group, gen, me) == ErrorCode.none
        # Sync for an unknown member, leave twice.
        bad = conn.sync_group(group, gen, f"{CLIENT_ID}-nobody", {})
        assert bad.error_code == ErrorCode.unknown_member_id, bad
        assert conn.leave_group(group, me).members[0].error_code == ErrorCode.none
        assert conn.leave_group(group, me).members[0].error_code == ErrorCode.unknown_member_id
        # The group is empty now: a standalone commit works, and old members are unknown.
        assert commit({(topic, 1): (8, "standalone")}, generation=-1, member="") == {
            (topic, 1): ErrorCode.none
        }
        assert commit({(topic, 0): (9, None)}) == {(topic, 0): ErrorCode.unknown_member_id}
        assert conn.offset_fetch(group, {topic: [1]}) == {
            (topic, 1): (8, "standalone", ErrorCode.none)
        }
        # DescribeGroups / DeleteGroups of a group that does not exist.
        assert conn.describe_group(f"{group}-none").group_state == "Dead"
        assert conn.delete_groups([f"{group}-none"]) == {
            f"{group}-none": ErrorCode.group_id_not_found
        }
        # The server is still up, on this very connection.
        assert conn.api_versions().error_code == ErrorCode.none
    assert broker.alive()


def test_rebalance_generations(broker, topic_name):
    """A second member starts a rebalance: the first learns of it by heartbeat, commits of
    its old generation are then refused, and after the new round the old one is stale."""
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    with Connection(broker.bootstrap) as c1, Connection(broker.bootstrap) as c2:
        first = c1.join_new_member(group, [topic])
        gen1, m1 = first.generation_id, first.member_id
        assert c1.sync_group(group, gen1, m1, {m1: b""}).error_code == ErrorCode.none
        # The second member's join waits at the barrier until the first joins again.
        pending = c2.join_group(group, topics=[topic])
        assert pending.error_code == ErrorCode.member_id_required
        m2 = pending.member_id
        waiting = join_request(group, m2, topics=[topic])
        waiting_id = c2.send_request(waiting)
        wait_until(
            lambda: c1.heartbeat(group, gen1, m1) == ErrorCode.rebalance_in_progress,
            "the first member to hear of the rebalance",
            timeout=10,
        )
        # While the rebalance is prepared, the current generation may still commit.
        assert c1.offset_commit(group, gen1, m1, {(topic, 0): (1, None)}) == {
            (topic, 0): ErrorCode.none
        }
        again = c1.join_group(group, m1, topics=[topic])
        assert again.error_code == ErrorCode.none and again.generation_id == gen1 + 1, again
        second = c2.read_response(waiting, waiting_id)
        assert second.error_code == ErrorCode.none and second.generation_id == gen1 + 1, second
        assert second.leader == m1 and not second.members, second
        assert {m.member_id for m in again.members} == {m1, m2}
        gen2 = again.generation_id
        assert c1.offset_commit(group, gen1, m1, {(topic, 0): (2, None)}) == {
            (topic, 0): ErrorCode.illegal_generation
        }
        assert c1.heartbeat(group, gen1, m1) == ErrorCode.illegal_generation
        assignments = {m1: assignment_bytes({topic: [0]}), m2: assignment_bytes({topic: [1]})}
        assert c1.sync_group(group, gen2, m1, assignments).assignment == assignments[m1]
        synced = c2.sync_group(group, gen2, m2, {})
        assert synced.error_code == ErrorCode.none and synced.assignment == assignments[m2]
        assert c2.offset_commit(group, gen2, m2, {(topic, 1): (3, "m2")}) == {
            (topic, 1): ErrorCode.none
        }
        # DeleteGroups is refused while the group has members.
        assert c1.delete_groups([group]) == {group: ErrorCode.non_empty_group}
        assert group in c1.list_groups()
        c1.leave_group(group, m1)
        c2.leave_group(group, m2)
        assert c1.delete_groups([group]) == {group: ErrorCode.none}
        assert group not in c1.list_groups()
        assert c1.offset_fetch(group, {topic: [0, 1]}) == {
            (topic, 0): (-1, "", ErrorCode.none),
            (topic, 1): (-1, "", ErrorCode.none),
        }


def test_round_closes_when_a_pending_member_id_lapses(broker, topic_name):
    """A member id handed out with MEMBER_ID_REQUIRED whose client never comes back holds
    a round only until the session timeout of the JoinGroup that asked for it, as Kafka's
    pending members, not until the rebalance timeout: once it lapses, the members that
    rejoined get the next generation without it."""
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    rebalance_ms = 300_000  # kafka-python's and Kafka's default max.poll.interval.ms
    with (
        Connection(broker.bootstrap, timeout=60) as c1,
        Connection(broker.bootstrap) as lost,
        Connection(broker.bootstrap, timeout=60) as c3,
    ):
        first = c1.join_new_member(group, [topic])
        gen1, m1 = first.generation_id, first.member_id
        assert c1.sync_group(group, gen1, m1, {m1: b""}).error_code == ErrorCode.none
        # A client asks for its id, then dies before joining with it.
        asked = lost.join_group(group, topics=[topic], session_ms=6000)
        assert asked.error_code == ErrorCode.member_id_required, asked
        # A third member starts a round while that id is still pending; the first
        # member rejoins: every member has joined, only the pending id is missing.
        m3 = c3.join_group(group, topics=[topic]).member_id
        third = join_request(group, m3, topics=[topic], rebalance_ms=rebalance_ms)
        third_id = c3.send_request(third)
        again = c1.join_group(group, m1, topics=[topic], rebalance_ms=rebalance_ms)
        assert again.error_code == ErrorCode.none and again.generation_id == gen1 + 1, again
        assert {m.member_id for m in again.members} == {m1, m3}
        joined = c3.read_response(third, third_id)
        assert joined.error_code == ErrorCode.none and joined.generation_id == gen1 + 1, joined
        # The lapsed id is unknown now.
        late = lost.join_group(group, asked.member_id, topics=[topic])
        assert late.error_code == ErrorCode.unknown_member_id, late


def test_rejoin_with_the_same_protocols_gets_the_current_generation(broker, topic_name):
    """As Kafka: a member that joins again with unchanged protocols once the round has
    completed (a client that lost its JoinGroup answer, or that let it go) gets that
    generation's answer at once, in CompletingRebalance and, a follower, in Stable, and
    then its assignment from SyncGroup; no new round disturbs the others. The leader's
    JoinGroup in a stable group still starts a round (its way to ask for a new
    assignment)."""
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    slow = 60_000  # a round nobody completes would outlast the connections' timeout

    def join(conn, member_id):
        return conn.join_group(group, member_id, topics=[topic], rebalance_ms=slow)

    with Connection(broker.bootstrap) as c1, Connection(broker.bootstrap) as c2:
        m1 = c1.join_new_member(group, [topic]).member_id
        m2 = c2.join_group(group, topics=[topic]).member_id
        waiting = join_request(group, m2, topics=[topic], rebalance_ms=slow)
        waiting_id = c2.send_request(waiting)
        # m2's JoinGroup must reach the group first: m1's, before it, would be answered
        # from the round m1 already completed alone.
        wait_until(
            lambda: c1.describe_group(group).group_state == "PreparingRebalance",
            "the second member's JoinGroup to start a round",
            timeout=10,
        )
        leader = join(c1, m1)
        follower = c2.read_response(waiting, waiting_id)
        gen = leader.generation_id
        assert follower.generation_id == gen and follower.leader == m1 == leader.leader
        # CompletingRebalance: both ask again before the leader's SyncGroup.
        again = join(c2, m2)
        assert again.error_code == ErrorCode.none, again
        assert (again.generation_id, again.leader, again.members) == (gen, m1, ()), again
        again = join(c1, m1)
        assert again.error_code == ErrorCode.none and again.generation_id == gen, again
        assert {m.member_id for m in again.members} == {m1, m2}
        assert c1.describe_group(group).group_state == "CompletingRebalance"
        assignments = {m1: assignment_bytes({topic: [0]}), m2: assignment_bytes({topic: [1]})}
        assert c1.sync_group(group, gen, m1, assignments).assignment == assignments[m1]
        assert c2.sync_group(group, gen, m2, {}).assignment == assignments[m2]
        # Stable: the follower's JoinGroup is answered from the current generation, and
        # its SyncGroup gives it its assignment again; the leader is not disturbed.
        again = join(c2, m2)
        assert again.error_code == ErrorCode.none, again
        assert (again.generation_id, again.leader, again.members) == (gen, m1, ()), again
        assert c1.describe_group(group).group_state == "Stable"
        synced = c2.sync_group(group, gen, m2, {})
        assert synced.error_code == ErrorCode.none and synced.assignment == assignments[m2]
        assert c1.heartbeat(group, gen, m1) == ErrorCode.none
        # Other protocols (here: another subscription) start a round, as the leader's
        # JoinGroup in a stable group does.
        changed = join_request(group, m2, topics=[topic, f"{topic}-more"], rebalance_ms=slow)
        changed_id = c2.send_request(changed)
        wait_until(
            lambda: c1.heartbeat(group, gen, m1) == ErrorCode.rebalance_in_progress,
            "the leader to hear of the rebalance",
            timeout=10,
        )
        assert join(c1, m1).generation_id == gen + 1
        assert c2.read_response(changed, changed_id).generation_id == gen + 1
        assert c1.sync_group(group, gen + 1, m1, assignments).error_code == ErrorCode.none
        assert c2.sync_group(group, gen + 1, m2, {}).error_code == ErrorCode.none
        leader_again = join_request(group, m1, topics=[topic], rebalance_ms=slow)
        leader_id = c1.send_request(leader_again)
        wait_until(
            lambda: c2.heartbeat(group, gen + 1, m2) == ErrorCode.rebalance_in_progress,
            "the follower to hear of the leader's rebalance",
            timeout=10,
        )
        assert join(c2, m2).generation_id == gen + 2
        assert c1.read_response(leader_again, leader_id).generation_id == gen + 2
