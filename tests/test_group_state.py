"""The group state machine's rules, with time passed in: no Redis, no waiting."""

from __future__ import annotations

from kafkaesque.errors import Code
from kafkaesque.groups.rules import consumer_member_epoch_error, offset_expires_from
from kafkaesque.groups.state import (
    CoordinatorConfig,
    Group,
    GroupState,
    JoinRequest,
    commit_error,
    heartbeat_error,
    sync_outcome,
)
from tests.kafka_client import subscription

CONFIG = CoordinatorConfig(initial_rebalance_delay_ms=3000, min_session_timeout_ms=100)
PROTOCOLS = [("range", b"meta-range"), ("roundrobin", b"meta-rr")]


def request(member_id: str = "", instance: str | None = None, **kw) -> JoinRequest:
    fields = dict(
        member_id=member_id,
        instance_id=instance,
        client_id="client",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=5_000,
        protocol_type="consumer",
        protocols=PROTOCOLS,
        require_known_member=False,
    )
    fields.update(kw)
    return JoinRequest(**fields)


def stable_group_of_two(now: int = 0) -> tuple[Group, str, str]:
    """Two members that joined one round and synced: generation 1, Stable."""
    g = Group("g")
    a = g.join(request(), now, CONFIG)
    b = g.join(request(), now + 10, CONFIG)
    assert a.result is None and b.result is None and g.state == GroupState.PREPARING
    assert g.close_round_if_due(now + CONFIG.initial_rebalance_delay_ms)
    assert g.sync(g.leader, None, 1, {a.member_id: b"A", b.member_id: b"B"}) == (
        Code.NONE,
        True,
    )
    return g, a.member_id, b.member_id


def test_first_members_wait_out_the_initial_delay_then_one_round() -> None:
    g = Group("g")
    steps = [g.join(request(), t, CONFIG) for t in (0, 100, 2999)]
    assert not g.round_due(2999)  # all joined, but the initial delay is not over
    assert g.join_outcome(steps[0].member_id, steps[0].generation) is None
    assert g.round_due(3000) and g.close_round_if_due(3000)
    results = [g.join_outcome(s.member_id, s.generation) for s in steps]
    assert {r.generation for r in results} == {1}
    leaders = [r for r in results if r.members]
    assert len(leaders) == 1 and len(leaders[0].members) == 3
    assert g.state == GroupState.COMPLETING and g.protocol == "range"


def test_later_round_closes_as_soon_as_every_member_rejoined() -> None:
    g, a, b = stable_group_of_two()
    c = g.join(request(), 5000, CONFIG)  # a third member starts a round
    assert g.state == GroupState.PREPARING and not g.round_due(5001)
    assert heartbeat_error(g, a, None, 1) == Code.REBALANCE_IN_PROGRESS
    g.join(request(a), 5002, CONFIG)
    g.join(request(b), 5003, CONFIG)  # the last one closes it at once, no delay
    assert g.state == GroupState.COMPLETING and g.generation == 2
    assert g.join_outcome(c.member_id, c.generation).generation == 2


def test_round_deadline_drops_members_that_did_not_rejoin() -> None:
    g, a, b = stable_group_of_two()
    g.join(request(a), 5000, CONFIG)
    assert not g.close_round_if_due(5000 + 4999)
    assert g.close_round_if_due(5000 + 5000)  # the rebalance timeout
    assert list(g.members) == [a] and g.leader == a and g.generation == 2
    assert g.join_outcome(b, 1).error == Code.UNKNOWN_MEMBER_ID


def test_member_id_required_then_pending_expires() -> None:
    g = Group("g")
    step = g.join(request(require_known_member=True), 0, CONFIG)
    assert step.result.error == Code.MEMBER_ID_REQUIRED and step.changed
    assert step.member_id.startswith("client-") and step.member_id in g.pending
    assert not step.heartbeat
    # Coming back with the id is a proper join.
    assert g.join(request(step.member_id), 10, CONFIG).result is None
    # An id never handed out is refused.
    assert g.join(request("made-up"), 20, CONFIG).result.error == Code.UNKNOWN_MEMBER_ID


def test_refusals_leave_the_group_unchanged() -> None:
    g, _, _ = stable_group_of_two()
    before = g.pack()
    bad = [
        request(protocol_type="connect"),
        request(protocols=[("other", b"")]),
        request(session_timeout_ms=10),
    ]
    errors = [g.join(r, 9000, CONFIG).result.error for r in bad]
    assert errors == [
        Code.INCONSISTENT_GROUP_PROTOCOL,
        Code.INCONSISTENT_GROUP_PROTOCOL,
        Code.INVALID_SESSION_TIMEOUT,
    ]
    assert Group("").join(request(), 0, CONFIG).result.error == Code.INVALID_GROUP_ID
    assert g.pack() == before


def test_join_without_protocols_is_refused_even_in_an_empty_group() -> None:
    """A round of such members could choose no protocol (the join failed internally)."""
    for bad in (request(protocols=[]), request(protocol_type="")):
        g = Group("g")
        step = g.join(bad, 0, CONFIG)
        assert step.result.error == Code.INCONSISTENT_GROUP_PROTOCOL
        assert not g.members and not step.changed


def test_static_member_restart_keeps_assignment_and_fences_old_id() -> None:
    g = Group("g")
    first = g.join(request(instance="i1"), 0, CONFIG)
    g.close_round_if_due(3000)
    g.sync(first.member_id, "i1", 1, {first.member_id: b"A"})
    restart = g.join(request(instance="i1"), 4000, CONFIG)
    assert restart.result.error == Code.NONE and restart.result.generation == 1
    assert g.state == GroupState.STABLE and g.members[restart.member_id].assignment == b"A"
    assert heartbeat_error(g, first.member_id, "i1", 1) == Code.FENCED_INSTANCE_ID
    assert g.leave([("", "i1")], 5000, CONFIG) == [Code.NONE]
    assert g.state == GroupState.EMPTY and g.generation == 2


def test_expired_member_starts_a_round_for_the_rest() -> None:
    g, a, b = stable_group_of_two()
    heartbeats = {a: 20_000, b: 5_000}
    assert g.expire(heartbeats, 15_001, CONFIG) == [b]
    assert list(g.members) == [a] and g.state == GroupState.PREPARING
    assert g.expire({a: 15_000}, 15_002, CONFIG) == []


def test_sync_follower_waits_for_the_leader_and_times_out() -> None:
    g = Group("g")
    a = g.join(request(), 0, CONFIG).member_id
    b = g.join(request(), 1, CONFIG).member_id
    g.close_round_if_due(3000)
    follower = b if g.leader == a else a
    assert g.sync(follower, None, 1, {}) == (Code.NONE, False)
    assert sync_outcome(g, follower, None, 1, late=False) is None  # keeps waiting
    assert sync_outcome(g, follower, None, 1, late=True) == Code.REBALANCE_IN_PROGRESS
    g.sync(g.leader, None, 1, {follower: b"F"})
    assert sync_outcome(g, follower, None, 1, late=False) == Code.NONE
    assert sync_outcome(g, follower, None, 0, late=False) == Code.ILLEGAL_GENERATION
    assert sync_outcome(None, follower, None, 1, late=False) == Code.UNKNOWN_MEMBER_ID


def test_commit_rules() -> None:
    g, a, _ = stable_group_of_two()
    assert commit_error(g, a, None, 1) == Code.NONE
    assert commit_error(g, a, None, 0) == Code.ILLEGAL_GENERATION
    assert commit_error(g, "", None, -1) == Code.UNKNOWN_MEMBER_ID  # members present
    assert commit_error(None, "", None, -1) == Code.NONE  # standalone, no group yet
    g.join(request(), 9000, CONFIG)
    g.join(request(a), 9001, CONFIG)
    g.expire({}, 9002, CONFIG)
    assert g.close_round_if_due(20_000) and g.state == GroupState.COMPLETING
    assert commit_error(g, a, None, g.generation) == Code.REBALANCE_IN_PROGRESS


def test_pack_round_trip_keeps_state_enum() -> None:
    g, _, _ = stable_group_of_two()
    back = Group.unpack(g.pack())
    assert back == g and back.state is GroupState.STABLE


def test_kafka4_commit_codes() -> None:
    g, a, _ = stable_group_of_two()
    # No such group: v9 says so, older versions get ILLEGAL_GENERATION (as Kafka 4).
    assert commit_error(None, "m", None, 1, api_version=9) == Code.GROUP_ID_NOT_FOUND
    assert commit_error(None, "m", None, 1, api_version=8) == Code.ILLEGAL_GENERATION
    # A static member is known by its instance id; an unknown one is an unknown member.
    assert commit_error(g, a, "nobody", 1) == Code.UNKNOWN_MEMBER_ID
    empty = Group("e")
    assert commit_error(empty, "leftover-id", None, -1) == Code.NONE  # empty: standalone


def test_member_epoch_check_for_consumer_protocol_groups() -> None:
    def check(received, expected, classic, version):
        return consumer_member_epoch_error(
            received, expected, classic_member=classic, commit_version=version
        )

    assert check(5, 5, False, 9) == Code.NONE
    assert check(4, 5, False, 9) == Code.STALE_MEMBER_EPOCH
    assert check(5, 5, False, 8) == Code.UNSUPPORTED_VERSION  # KIP-848 members use v9
    assert check(4, 5, True, 9) == Code.ILLEGAL_GENERATION  # a classic member
    assert check(4, 5, True, 7) == Code.ILLEGAL_GENERATION
    assert check(4, 5, False, None) == Code.STALE_MEMBER_EPOCH  # OffsetFetch v9


def test_group_max_size() -> None:
    small = CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100, max_size=2)
    g, a, b = stable_group_of_two()
    full = g.join(request(), 20, small)
    assert full.result.error == Code.GROUP_MAX_SIZE_REACHED and full.result.member_id == ""
    assert g.state == GroupState.STABLE and len(g.members) == 2
    # Lowered below the size: while the round is prepared, the last to rejoin is turned
    # away and leaves the group.
    tiny = CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100, max_size=1)
    assert g.join(request(a), 30, tiny).result is None  # first back: at the barrier
    late = g.join(request(b), 31, tiny)
    assert late.result.error == Code.GROUP_MAX_SIZE_REACHED and late.changed
    assert list(g.members) == [a] and g.state == GroupState.COMPLETING


def test_offset_retention_starts_by_group_kind() -> None:
    topics = subscription(["t"])
    g = Group("g")
    g.protocol_type = ""  # standalone: from each commit
    assert offset_expires_from(g, "t", 100) == 100
    g = Group("g")
    a = g.join(request(protocols=[("range", topics)]), 0, CONFIG).member_id
    assert offset_expires_from(g, "t", 100) is None  # a round in progress keeps them
    g.close_round_if_due(3000)
    g.sync(a, None, 1, {})
    assert offset_expires_from(g, "t", 100) is None  # subscribed
    assert offset_expires_from(g, "u", 100) == 100  # no member reads it
    g.leave([(a, None)], 5000, CONFIG)
    assert g.empty_since_ms == 5000 and offset_expires_from(g, "t", 100) == 5000
    # A group saved before empty_since_ms existed falls back to the commit time.
    old = Group.unpack(g.pack())
    old.empty_since_ms = None
    assert offset_expires_from(old, "t", 100) == 100
