"""Group members as separate processes, for every client and assignor it has: three members
share a topic's partitions and consume each record exactly once; a member killed without
leaving is expelled after its session timeout and its partitions move."""

from __future__ import annotations

import time

import pytest

from tests.kafka_client import Connection
from tests.wire import groups_common as gc
from tests.wire.clients import needs
from tests.wire.common import (
    FAST_GROUP_ARGS,
    TIMEOUT,
    committed,
    create_topic,
    produce_numbered,
    value_of,
    wait_committed,
    wait_until,
)
from tests.wire.group_member import SESSION_MS

BROKER_ARGS = FAST_GROUP_ARGS  # the module's server: short group delays

# The assignors each client ships (kafkajs has only its round-robin one).
ASSIGNORS = {
    "confluent": ["range", "roundrobin", "cooperative-sticky"],
    "kafka-python": ["range", "roundrobin", "sticky"],
    "aiokafka": ["range", "roundrobin", "sticky"],
    "kafkajs": ["RoundRobinAssigner"],
}


def library_params(with_assignor: bool) -> list:
    return [
        pytest.param(library, assignor, marks=needs(library), id=f"{library}-{assignor}")
        for library, assignors in ASSIGNORS.items()
        for assignor in (assignors if with_assignor else assignors[:1])
    ]


@pytest.mark.parametrize(("library", "strategy"), library_params(with_assignor=True))
def test_three_members_split_and_consume_exactly_once(
    broker, topic_name, tmp_path, library, strategy
):
    """Three members share the partitions without overlap; records produced while the group
    is stable are each consumed exactly once, by the member owning their partition."""
    topic, records, partitions = topic_name(), 30_000, 6
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    members = gc.start_members(
        tmp_path, ["a", "b", "c"], library, broker.bootstrap, topic, group, strategy=strategy
    )
    try:
        split = gc.wait_for_split(members, partitions)
        assert sorted(len(s) for s in split) == [2, 2, 2], split
        with Connection(broker.bootstrap) as conn:
            described = conn.describe_group(group)
        assert described.group_state == "Stable", described
        assert described.protocol_type == "consumer" and described.protocol_data == strategy
        assert len(described.members) == 3, described
        ends = produce_numbered(broker.bootstrap, topic, partitions, 0, records)
        wait_until(
            lambda: sum(len(m.records) for m in members) >= records,
            f"{records} records",
            context=lambda: gc.describe_members(members),
        )
        time.sleep(0.5)  # anything extra (a duplicate) would arrive now
        for m, parts in zip(members, split, strict=True):
            assert m.current() == parts, f"{m.name} was reassigned:\n{gc.describe_members(members)}"
            assert {p for p, _, _ in m.records} <= set(parts), m.name
            assert not m.errors, m.describe()
        consumed = [v for m in members for v in m.values()]
        assert len(consumed) == records, f"{len(consumed) - records} duplicates"
        assert set(consumed) == {value_of(i) for i in range(records)}
        # Each member committed what it consumed.
        wait_committed(broker.bootstrap, group, topic, partitions, ends)
    finally:
        gc.stop_all(members)
    assert [m.proc.returncode for m in members] == [0, 0, 0], gc.describe_members(members)
    # They all left: the group is empty, its offsets stay.
    with Connection(broker.bootstrap) as conn:
        described = conn.describe_group(group)
    assert described.group_state == "Empty" and not described.members, described
    assert committed(broker.bootstrap, group, topic, partitions) == ends


@pytest.mark.parametrize(("library", "strategy"), library_params(with_assignor=False))
def test_killed_member_is_expelled_and_its_partitions_move(
    broker, topic_name, tmp_path, library, strategy
):
    """A member SIGKILLed (no LeaveGroup) is expelled after its session timeout, not
    before; its partitions move to the survivors, and with commits after every batch each
    record is consumed at least once."""
    topic, records, partitions = topic_name(), 6000, 6
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    members = gc.start_members(
        tmp_path, ["a", "b", "c"], library, broker.bootstrap, topic, group, strategy=strategy
    )
    try:
        gc.wait_for_split(members, partitions)
        half = records // 2
        produce_numbered(broker.bootstrap, topic, partitions, 0, half)
        wait_until(
            lambda: {v for m in members for v in m.values()} >= {value_of(i) for i in range(half)},
            "the first half to be consumed",
            context=lambda: gc.describe_members(members),
        )
        victim, survivors = members[0], members[1:]
        taken = set(victim.current() or ())
        assert victim.records, victim.describe()  # it was consuming when it died
        killed = time.monotonic()
        victim.kill()
        ends = produce_numbered(broker.bootstrap, topic, partitions, half, records - half)
        # Until the session times out the group keeps the dead member.
        time.sleep(0.5)
        with Connection(broker.bootstrap) as conn:
            assert len(conn.describe_group(group).members) == 3
        after = gc.wait_for_split(survivors, partitions, timeout=SESSION_MS / 1000 + TIMEOUT)
        moved = time.monotonic() - killed
        assert moved >= SESSION_MS / 1000 - 0.5, f"expelled after {moved:.2f} s"
        assert taken <= set(after[0]) | set(after[1])
        with Connection(broker.bootstrap) as conn:
            described = conn.describe_group(group)
        assert described.group_state == "Stable" and len(described.members) == 2, described
        everything = {value_of(i) for i in range(records)}
        wait_until(
            lambda: {v for m in members for v in m.values()} >= everything,
            "every record to be consumed at least once",
            context=lambda: gc.describe_members(members),
        )
        # The survivors read the victim's partitions on from where it had committed.
        taken_values = {v for m in survivors for p, _, v in m.records if p in taken}
        assert {value_of(i) for i in range(half, records) if i % partitions in taken} <= (
            taken_values
        )
        wait_committed(broker.bootstrap, group, topic, partitions, ends)
    finally:
        gc.stop_all(members)
    assert [m.proc.returncode for m in members[1:]] == [0, 0], gc.describe_members(members)
