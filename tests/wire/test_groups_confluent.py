"""confluent-kafka (librdkafka) consumer groups against the server, where it differs from
the other libraries (shared scenarios: test_groups_clients.py, test_groups_members.py): a
broker restarted under a live group, cooperative-sticky rebalances, static membership."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.kafka_client import Connection
from tests.wire import conftest as wire_conftest
from tests.wire import groups_common as gc
from tests.wire.common import (
    FAST_GROUP_ARGS,
    TIMEOUT,
    cli_group,
    committed,
    create_topic,
    produce_numbered,
    value_of,
    wait_until,
)

pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition

from tests.wire.clients.confluent import (
    Confluent,
    Logs,
    consume_and_commit,
    group_consumer,
    nothing_more,
    poll,
)

BROKER_ARGS = FAST_GROUP_ARGS  # the module's server: short group delays


# -- 1. a broker restarted under a live group ----------------------------------------------


def test_broker_restart_keeps_committed_offsets_and_the_cli(
    broker_factory, topic_name, monkeypatch
):
    first = broker_factory(*FAST_GROUP_ARGS)
    topic, partitions, total = topic_name(), 3, 600
    group = f"g-{topic}"
    create_topic(first.bootstrap, topic, partitions)
    ends = produce_numbered(first.bootstrap, topic, partitions, 0, total)
    logs = Logs()
    live = group_consumer(first.bootstrap, group, logs, **{"session.timeout.ms": 15_000})
    second = None
    try:
        got, positions = consume_and_commit(live, topic, total // 2, logs)
        expected = {p: positions.get(p, -1) for p in range(partitions)}
        assert committed(first.bootstrap, group, topic, partitions) == expected
        before = cli_group(first, group)
        assert before["state"] == "Stable" and before["members"] == "1", before["text"]

        # SIGTERM the broker under the live member; a new one on the same port and Redis.
        assert first.stop() == 0, first.stderr()
        monkeypatch.setattr(wire_conftest, "free_port", lambda: first.port)
        second = broker_factory(*FAST_GROUP_ARGS)
        monkeypatch.undo()
        assert second.bootstrap == first.bootstrap

        assert committed(second.bootstrap, group, topic, partitions) == expected
        # The live consumer gets the same committed offsets from the new broker.
        stored = live.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT
        )
        assert {tp.partition: tp.offset for tp in stored if tp.offset >= 0} == positions, logs
        # The group survived with its member and generation: no rebalance was needed.
        after = cli_group(second, group)
        assert (after["state"], after["members"], after["generation"]) == (
            "Stable",
            "1",
            before["generation"],
        ), f"{after['text']}\nlibrdkafka log:\n{logs}"
    finally:
        live.close()  # no auto commit: leaves the group, commits nothing

    # A new consumer resumes at the committed offsets.
    logs2 = Logs()
    resumed = group_consumer(second.bootstrap, group, logs2)
    try:
        resumed.subscribe([topic])
        rest = poll(resumed, total - len(got), logs2)
        nothing_more(resumed, 0.3)
        assert {v for _, _, v in rest} == {value_of(i) for i in range(total)} - {
            v for _, _, v in got
        }

        # The CLI shows the committed offsets and the lag; it will not reset an active group.
        shown = cli_group(second, group)
        assert shown["members"] == "1", shown["text"]
        for p in range(partitions):
            c = positions.get(p)
            assert shown["rows"][topic, p] == (
                "-" if c is None else str(c),
                str(ends[p]),
                "-" if c is None else str(ends[p] - c),
            ), shown["text"]
        refused = second.cli("group", group, topic, "--reset-offsets", "earliest", check=False)
        assert refused.returncode == 1, refused
        assert b"active members" in refused.stderr, refused.stderr
        assert committed(second.bootstrap, group, topic, partitions) == expected
    finally:
        resumed.close()

    # Once the members left, the reset works (a dry run without --execute); `groups`
    # lists the group.
    dry = second.cli("group", group, topic, "--reset-offsets", "earliest")
    assert b"dry run" in dry.stderr, dry.stderr
    assert committed(second.bootstrap, group, topic, partitions) == expected
    done = second.cli("group", group, topic, "--reset-offsets", "earliest", "--execute")
    assert done.returncode == 0
    assert committed(second.bootstrap, group, topic, partitions) == dict.fromkeys(
        range(partitions), 0
    )
    shown = cli_group(second, group)
    assert shown["state"] == "Empty" and shown["members"] == "0", shown["text"]
    assert all(
        shown["rows"][topic, p] == ("0", str(ends[p]), str(ends[p])) for p in range(partitions)
    ), shown["text"]
    assert group in second.cli("groups").stdout.decode().split()


# -- 2. cooperative-sticky rebalances incrementally -----------------------------------------


def test_cooperative_sticky_only_revokes(broker, topic_name, tmp_path):
    topic, partitions = topic_name(), 6
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    produce_numbered(broker.bootstrap, topic, partitions, 0, 3000)
    common = ("confluent", broker.bootstrap, topic, group)
    members = gc.start_members(tmp_path, ["a", "b"], *common, strategy="cooperative-sticky")
    try:
        before = gc.wait_for_split(members, partitions)
        assert sorted(len(s) for s in before) == [3, 3], before
        seen = [len(m.callbacks()) for m in members]
        snapshots_seen = [len(m.assignments) for m in members]
        members += gc.start_members(tmp_path, ["c"], *common, strategy="cooperative-sticky")
        after = gc.wait_for_split(members, partitions)
        assert sorted(len(s) for s in after) == [2, 2, 2], after
        time.sleep(0.5)  # no further rebalance
        assert [sorted(m.current() or ()) for m in members] == after
        for m, held, final, n, k in zip(members, before, after, seen, snapshots_seen, strict=False):
            assert set(final) <= set(held), f"{m.name}: {held} -> {final}"
            current = set(held)
            for kind, parts in m.callbacks()[n:]:
                if kind == "revoke":
                    assert set(parts) <= current, (m.name, m.callbacks())
                    current -= set(parts)
                else:  # incremental assign: nothing new for an original member
                    assert not parts, (m.name, m.callbacks())
                assert current, f"{m.name} lost every partition: {m.callbacks()}"
            assert current == set(final), (m.name, m.callbacks())
            # assignment() only shrank as well.
            snapshots = [set(held)] + [set(a) for _, a in m.assignments[k:]]
            assert all(later <= earlier for earlier, later in itertools.pairwise(snapshots)), (
                m.name,
                m.assignments,
            )
        # The new member is only given partitions (in one round or, when a member's revocation
        # came a round later, in two).
        added = members[2].callbacks()
        assert {k for k, _ in added} == {"assign"}, added
        assert sorted(p for _, ps in added for p in ps) == after[2], added
        assert not any(m.errors for m in members), gc.describe_members(members)
    finally:
        gc.stop_all(members)


# -- 3. static membership ------------------------------------------------------------------


def test_static_member_restart_keeps_its_partitions(broker, topic_name, tmp_path):
    topic, partitions = topic_name(), 6
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    common = ("confluent", broker.bootstrap, topic, group)
    a = gc.MemberProcess(tmp_path, "a", *common, session_ms=10_000, instance_id="static-a")
    b = gc.MemberProcess(tmp_path, "b", *common, session_ms=10_000, instance_id="static-b")
    members = [a, b]
    try:
        for m in members:
            m.wait_ready()
        for m in members:
            m.go()
        split = gc.wait_for_split(members, partitions)
        shown = cli_group(broker, group)
        assert shown["state"] == "Stable" and shown["members"] == "2", shown["text"]
        seen_b = len(b.callbacks())
        # Closing a static member sends no LeaveGroup: its place stays for the session.
        assert a.stop() == 0, a.describe()
        with Connection(broker.bootstrap) as conn:
            described = conn.describe_group(group)
        assert described.group_state == "Stable", described
        assert sorted(m.group_instance_id for m in described.members) == ["static-a", "static-b"]
        # It comes back under the same instance id: same partitions, no rebalance.
        again = gc.MemberProcess(tmp_path, "a2", *common, session_ms=10_000, instance_id="static-a")
        members.append(again)
        again.wait_ready()
        again.go()
        wait_until(
            lambda: again.current(), "the restarted member's assignment", context=again.describe
        )
        assert sorted(again.current()) == split[0], gc.describe_members(members)
        time.sleep(1.0)  # a rebalance, if one had started, would show by now
        assert sorted(b.current() or ()) == split[1], gc.describe_members(members)
        assert b.callbacks()[seen_b:] == [], b.callbacks()
        shown_after = cli_group(broker, group)
        assert shown_after["generation"] == shown["generation"], (
            shown["text"],
            shown_after["text"],
        )
        assert shown_after["state"] == "Stable" and shown_after["members"] == "2"
        admin_client, logs = Confluent(broker).admin()
        desc = admin_client.describe_consumer_groups([group], request_timeout=TIMEOUT)[
            group
        ].result(timeout=TIMEOUT)
        by_instance = {
            m.group_instance_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
            for m in desc.members
        }
        assert by_instance == {"static-a": split[0], "static-b": split[1]}, logs
    finally:
        gc.stop_all(members)


def test_second_instance_of_a_static_member_fences_the_first(broker, topic_name, tmp_path):
    """Two processes with one group.instance.id: the newer takes the member's place and
    its partitions; the older is told FENCED_INSTANCE_ID (fatal in librdkafka)."""
    topic, partitions = topic_name(), 2
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    common = ("confluent", broker.bootstrap, topic, group)
    old = gc.MemberProcess(tmp_path, "old", *common, session_ms=10_000, instance_id="dup")
    members = [old]
    try:
        old.wait_ready()
        old.go()
        assert gc.wait_for_split(members, partitions) == [[0, 1]]
        new = gc.MemberProcess(tmp_path, "new", *common, session_ms=10_000, instance_id="dup")
        members.append(new)
        new.wait_ready()
        new.go()
        wait_until(lambda: new.current() == [0, 1], "the new instance's partitions")
        wait_until(
            lambda: any("fenced" in e.lower() for e in old.errors),
            "the old instance to be fenced",
            context=lambda: gc.describe_members(members),
        )
        with Connection(broker.bootstrap) as conn:
            described = conn.describe_group(group)
        assert [m.group_instance_id for m in described.members] == ["dup"], described
        assert described.members[0].client_id.endswith("-new"), described
    finally:
        gc.stop_all(members)
