"""The consumer group protocol's rules without Redis: the assignors, reconciliation (never
two owners of a partition), epochs, expiry and the commit check."""

from __future__ import annotations

import random
import time

import pytest

from kafkaesque.errors import Code, Refused
from kafkaesque.groups import topic_regex
from kafkaesque.groups.assignors import range_, uniform
from kafkaesque.groups.consumer import validate
from kafkaesque.groups.consumer_state import (
    ConsumerGroup,
    ConsumerGroupConfig,
    Heartbeat,
    MemberState,
)

ID = {"a": b"A" * 16, "b": b"B" * 16}


def sub(**members: set[str]) -> dict[str, frozenset[str]]:
    return {m: frozenset(t) for m, t in members.items()}


def loads(assignment: dict) -> list[int]:
    return sorted(len(v) for v in assignment.values())


def test_uniform_balances_and_sticks():
    first = uniform(sub(m1={"a"}, m2={"a"}), {"a": 7}, {})
    assert loads(first) == [3, 4]
    assert set().union(*first.values()) == {("a", p) for p in range(7)}
    # A third member takes partitions only from the others: nothing else moves.
    second = uniform(sub(m1={"a"}, m2={"a"}, m3={"a"}), {"a": 7}, first)
    assert loads(second) == [2, 2, 3]
    for m in ("m1", "m2"):
        assert second[m] <= first[m]


def test_uniform_heterogeneous_subscriptions():
    out = uniform(sub(m1={"a", "b"}, m2={"b"}), {"a": 4, "b": 4}, {})
    assert {t for t, _ in out["m2"]} == {"b"}
    assert loads(out) == [4, 4]


def test_range_gives_contiguous_ranges_per_topic():
    out = range_(sub(m1={"a", "b"}, m2={"a", "b"}), {"a": 5, "b": 2}, {})
    assert out["m1"] == {("a", 0), ("a", 1), ("a", 2), ("b", 0)}
    assert out["m2"] == {("a", 3), ("a", 4), ("b", 1)}


def join(group: ConsumerGroup, member_id: str, now: int = 0, **fields) -> list:
    hb = Heartbeat(member_id, 0, rebalance_timeout_ms=1000, topics=["a"], **fields)
    member, joined = group.update_member(hb)
    group.set_topics({"a": [ID["a"], 6]}, now)
    return group.heartbeat(hb, member, joined, now).assignment


def beat(group: ConsumerGroup, member_id: str, owned: set | None, now: int = 0):
    m = group.members[member_id]
    owned_ids = None if owned is None else {ID["a"]: [p for _, p in sorted(owned)]}
    hb = Heartbeat(member_id, m.epoch, owned=owned_ids)
    member, joined = group.update_member(hb)
    return group.heartbeat(hb, member, joined, now)


def test_random_heartbeats_never_give_a_partition_two_owners():
    rng = random.Random(7)
    group = ConsumerGroup("g")
    owned: dict[str, set] = {}  # what each simulated client consumes
    for step in range(400):
        action = rng.random()
        if action < 0.1 and len(group.members) < 5:
            member_id = f"m{step}"
            owned[member_id] = set(join(group, member_id) or [])
        elif action < 0.15 and group.members:
            gone = rng.choice(sorted(group.members))
            group.leave(gone, -1)
            owned.pop(gone)
        elif group.members:
            member_id = rng.choice(sorted(group.members))
            result = beat(group, member_id, owned[member_id] if rng.random() < 0.8 else None)
            if result.assignment is not None:
                owned[member_id] = set(result.assignment)  # revoke at once, take the new
        everyone = [tp for tps in owned.values() for tp in tps]
        assert len(everyone) == len(set(everyone)), f"step {step}: {owned}"
    # Quiet heartbeats settle the group: everything assigned, every member stable.
    for _ in range(4):
        for member_id in sorted(group.members):
            result = beat(group, member_id, owned[member_id])
            if result.assignment is not None:
                owned[member_id] = set(result.assignment)
    if group.members:
        assert group.state == "Stable"
        assert set().union(*owned.values()) == {("a", p) for p in range(6)}


def test_epochs_fencing_and_previous_epoch():
    group = ConsumerGroup("g")
    join(group, "m1")
    epoch = group.members["m1"].epoch
    with pytest.raises(Refused) as refused:
        group.update_member(Heartbeat("m1", epoch + 1))
    assert refused.value.code == Code.FENCED_MEMBER_EPOCH
    with pytest.raises(Refused) as refused:
        group.update_member(Heartbeat("nobody", 1))
    assert refused.value.code == Code.UNKNOWN_MEMBER_ID
    join(group, "m2")
    beat(group, "m1", {("a", p) for p in range(6)})  # revoke
    member = group.members["m1"]
    assert member.state == MemberState.UNREVOKED
    kept = set(member.assigned)
    beat(group, "m1", kept)  # revoked: next epoch
    assert member.epoch > epoch and member.previous_epoch == epoch
    # A member that missed that answer may still heartbeat with its previous epoch.
    group.update_member(Heartbeat("m1", epoch, owned={ID["a"]: [p for _, p in kept]}))


def test_expiry_revocation_timeout_and_commit_check():
    group = ConsumerGroup("g")
    join(group, "m1")
    join(group, "m2")
    beat(group, "m1", {("a", p) for p in range(6)})  # m1 must revoke within 1 s
    config = ConsumerGroupConfig(session_timeout_ms=5000)
    assert group.expire({"m1": 1500, "m2": 1500}, 1500, config) == ["m1"]
    assert group.commit_error("m1", 1) == Code.UNKNOWN_MEMBER_ID
    m2 = group.members["m2"]
    assert group.commit_error("m2", m2.epoch - 1) == Code.STALE_MEMBER_EPOCH
    assert group.commit_error("m2", m2.epoch) == Code.NONE
    assert group.expire({"m2": 0}, 6000, config) == ["m2"]
    assert group.commit_error("", -1) == Code.NONE  # empty: standalone ok


@pytest.mark.parametrize(
    ("hb", "version", "code"),
    [
        (
            Heartbeat("", 0, rebalance_timeout_ms=1, topics=[]),
            1,
            Code.INVALID_REQUEST,
        ),
        (Heartbeat("m", 0, topics=["a"]), 1, Code.INVALID_REQUEST),
        (Heartbeat("m", 0, rebalance_timeout_ms=1), 1, Code.INVALID_REQUEST),
        (Heartbeat("m", -2), 1, Code.INVALID_REQUEST),
        (
            Heartbeat("m", 0, rebalance_timeout_ms=1, regex="a(?=b)"),
            1,
            Code.INVALID_REGULAR_EXPRESSION,
        ),
        (
            Heartbeat("m", 0, rebalance_timeout_ms=1, topics=[], assignor="x"),
            0,
            Code.UNSUPPORTED_ASSIGNOR,
        ),
    ],
)
def test_validation(hb, version, code):
    with pytest.raises(Refused) as refused:
        validate(hb, version)
    assert refused.value.code == code


def test_pack_round_trip():
    group = ConsumerGroup("g")
    join(group, "m1", instance_id="i")
    again = ConsumerGroup.unpack(group.pack())
    assert again == group


@pytest.mark.parametrize(
    ("regex", "refused"),
    [
        ("orders-.*", False),
        ("[a-z]+-(eu|us)-\\d+", False),
        ("(^.*a.*)|(^.*b.*)", False),  # librdkafka's, refused before as "slow"
        ("(a+)+$", False),  # RE2 is linear: no shape is slow
        ("((foo|bar)-x)*", False),
        (".*a.*a.*a.*a.*z", False),
        ("(unclosed", True),
        ("a(?=b).*", True),  # no lookarounds in RE2
        ("(a)\\1", True),  # nor backreferences
        ("x" * 1001, True),
    ],
)
def test_topic_regexes(regex, refused):
    assert (topic_regex.problem(regex) is not None) == refused


def test_topic_regexes_match_whole_names_in_linear_time() -> None:
    assert topic_regex.matches("(^.*a.*)|(^.*b.*)", "banana")
    assert not topic_regex.matches("(^.*a.*)|(^.*b.*)", "cc")
    assert not topic_regex.matches("orders", "orders-eu")  # the whole name, as RE2/J
    started = time.perf_counter()  # Python's re takes seconds on each of these names
    for pattern in ("(a+)+$", ".*a.*a.*a.*a.*a.*a.*z"):
        assert not topic_regex.matches(pattern, "a" * 248 + "!")
    assert time.perf_counter() - started < 1
