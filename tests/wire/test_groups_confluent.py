"""confluent-kafka (librdkafka) consumer groups against the server: members sharing
partitions, a member killed, restarts resuming from committed offsets, a broker restart,
cooperative-sticky, static membership and the admin client."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.kafka_client import Connection
from tests.wire import conftest as wire_conftest
from tests.wire import groups_common as gc

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient  # noqa: E402

TIMEOUT = 30.0


BROKER_ARGS = gc.FAST_GROUP_ARGS  # the module's server: short group delays


class Logs:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def error_cb(self, err) -> None:
        self.lines.append(f"error_cb: {err}")

    def log(self, level: int, fmt: str, *args) -> None:  # a logging.Logger look-alike
        self.lines.append(fmt % args if args else fmt)

    def __str__(self) -> str:
        return "\n".join(self.lines[-60:])


def consumer(bootstrap: str, group: str, logs: Logs, **config) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "wire-tests-confluent",
            "broker.address.family": "v4",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": gc.SESSION_MS,
            "heartbeat.interval.ms": gc.HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
            "error_cb": logs.error_cb,
            "logger": logs,
            **config,
        }
    )


def admin(bootstrap: str) -> tuple[AdminClient, Logs]:
    logs = Logs()
    client = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "error_cb": logs.error_cb,
            "logger": logs,
        }
    )
    return client, logs


def consume_values(c: Consumer, count: int, logs: Logs) -> list[gc.Record]:
    """Poll until ``count`` records came; returns them (fails on an error)."""
    got = gc.Collector(count)
    while wanted := got.wanted():
        for msg in c.consume(wanted, 0.2):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                pytest.fail(f"consume error {msg.error()}; librdkafka log:\n{logs}")
            got.records.append((msg.partition(), msg.offset(), msg.value().decode()))
    return got.result(f"; log:\n{logs}")


def nothing_more(c: Consumer, seconds: float = 0.5) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for msg in c.consume(100, 0.1):
            assert msg.error() is not None, f"unexpected record {msg.value()!r}"


def consume_and_commit(
    c: Consumer, topic: str, count: int, logs: Logs
) -> tuple[list[gc.Record], dict[int, int]]:
    """Subscribe, consume ``count`` records and commit (synchronously) the positions after
    them; returns the records and those positions."""
    c.subscribe([topic])
    got = consume_values(c, count, logs)
    positions = gc.positions_after(got)
    c.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False
    )
    return got, positions


# -- 1. a restarted consumer resumes from the committed offsets ----------------------------


def test_restarted_consumer_resumes_from_committed_offsets(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"

    def first_consumer(count: int) -> tuple[list[gc.Record], dict[int, int]]:
        logs = Logs()
        c = consumer(broker.bootstrap, group, logs)
        try:
            half, positions = consume_and_commit(c, topic, count, logs)
            stored = c.committed([TopicPartition(topic, p) for p in positions], timeout=TIMEOUT)
            return half, {tp.partition: tp.offset for tp in stored}
        finally:
            c.close()

    def second_consumer(count: int) -> list[gc.Record]:
        logs = Logs()
        c = consumer(broker.bootstrap, group, logs)
        try:
            c.subscribe([topic])
            rest = consume_values(c, count, logs)
            nothing_more(c)
            return rest
        finally:
            c.close()

    gc.check_restart_resumes(broker.bootstrap, topic, first_consumer, second_consumer)


# -- 2. a broker restarted under a live group ----------------------------------------------


def test_broker_restart_keeps_committed_offsets_and_the_cli(
    broker_factory, topic_name, monkeypatch
):
    first = broker_factory(*gc.FAST_GROUP_ARGS)
    topic, partitions, total = topic_name(), 3, 600
    group = f"g-{topic}"
    gc.create_topic(first.bootstrap, topic, partitions)
    ends = gc.produce_numbered(first.bootstrap, topic, partitions, 0, total)
    logs = Logs()
    live = consumer(first.bootstrap, group, logs, **{"session.timeout.ms": 15_000})
    second = None
    try:
        got, positions = consume_and_commit(live, topic, total // 2, logs)
        expected = {p: positions.get(p, -1) for p in range(partitions)}
        assert gc.committed(first.bootstrap, group, topic, partitions) == expected
        before = gc.cli_group(first, group)
        assert before["state"] == "Stable" and before["members"] == "1", before["text"]

        # SIGTERM the broker under the live member; a new one on the same port and Redis.
        assert first.stop() == 0, first.stderr()
        monkeypatch.setattr(wire_conftest, "free_port", lambda: first.port)
        second = broker_factory(*gc.FAST_GROUP_ARGS)
        monkeypatch.undo()
        assert second.bootstrap == first.bootstrap

        assert gc.committed(second.bootstrap, group, topic, partitions) == expected
        # The live consumer gets the same committed offsets from the new broker.
        stored = live.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT
        )
        assert {tp.partition: tp.offset for tp in stored if tp.offset >= 0} == positions, logs
        # The group survived with its member and generation: no rebalance was needed.
        after = gc.cli_group(second, group)
        assert (after["state"], after["members"], after["generation"]) == (
            "Stable",
            "1",
            before["generation"],
        ), f"{after['text']}\nlibrdkafka log:\n{logs}"
    finally:
        live.close()  # no auto commit: leaves the group, commits nothing

    # A new consumer resumes at the committed offsets.
    logs2 = Logs()
    resumed = consumer(second.bootstrap, group, logs2)
    try:
        resumed.subscribe([topic])
        rest = consume_values(resumed, total - len(got), logs2)
        nothing_more(resumed, 0.3)
        assert {v for _, _, v in rest} == {gc.value_of(i) for i in range(total)} - {
            v for _, _, v in got
        }

        # The CLI shows the committed offsets and the lag; it will not reset an active group.
        shown = gc.cli_group(second, group)
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
        assert gc.committed(second.bootstrap, group, topic, partitions) == expected
    finally:
        resumed.close()

    # Once the members left, the reset works; `groups` lists the group.
    done = second.cli("group", group, topic, "--reset-offsets", "earliest")
    assert done.returncode == 0
    assert gc.committed(second.bootstrap, group, topic, partitions) == dict.fromkeys(
        range(partitions), 0
    )
    shown = gc.cli_group(second, group)
    assert shown["state"] == "Empty" and shown["members"] == "0", shown["text"]
    assert all(
        shown["rows"][topic, p] == ("0", str(ends[p]), str(ends[p])) for p in range(partitions)
    ), shown["text"]
    assert group in second.cli("groups").stdout.decode().split()


# -- 3. cooperative-sticky rebalances incrementally -----------------------------------------


def test_cooperative_sticky_only_revokes(broker, topic_name, tmp_path):
    topic, partitions = topic_name(), 6
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
    gc.produce_numbered(broker.bootstrap, topic, partitions, 0, 3000)
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


# -- 4. static membership ------------------------------------------------------------------


def test_static_member_restart_keeps_its_partitions(broker, topic_name, tmp_path):
    topic, partitions = topic_name(), 6
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
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
        shown = gc.cli_group(broker, group)
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
        gc.wait_until(
            lambda: again.current(), "the restarted member's assignment", context=again.describe
        )
        assert sorted(again.current()) == split[0], gc.describe_members(members)
        time.sleep(1.0)  # a rebalance, if one had started, would show by now
        assert sorted(b.current() or ()) == split[1], gc.describe_members(members)
        assert b.callbacks()[seen_b:] == [], b.callbacks()
        shown_after = gc.cli_group(broker, group)
        assert shown_after["generation"] == shown["generation"], (
            shown["text"],
            shown_after["text"],
        )
        assert shown_after["state"] == "Stable" and shown_after["members"] == "2"
        admin_client, logs = admin(broker.bootstrap)
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


# -- 5. the admin client ----------------------------------------------------------------------


def test_admin_list_describe_delete_groups(broker, topic_name, tmp_path):
    from confluent_kafka import ConsumerGroupTopicPartitions

    topic, partitions = topic_name(), 3
    group = f"g-{topic}"
    client, logs = admin(broker.bootstrap)
    members = gc.two_committed_members(broker, tmp_path, topic, group, "confluent", partitions)
    with members as (split, ends):
        listed = client.list_consumer_groups(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
        assert not listed.errors, listed.errors
        found = [g for g in listed.valid if g.group_id == group]
        assert len(found) == 1 and not found[0].is_simple_consumer_group, f"{found}\n{logs}"

        desc = client.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(
            timeout=TIMEOUT
        )
        assert desc.state == ConsumerGroupState.STABLE, desc
        assert desc.partition_assignor == "range"
        assert not desc.is_simple_consumer_group
        assert desc.coordinator.id == 0
        assigned = sorted(
            sorted(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members
        )
        assert assigned == sorted(split), desc.members
        assert {m.client_id for m in desc.members} == {"confluent-a", "confluent-b"}

        offsets = client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT
        )[group].result(timeout=TIMEOUT)
        assert {
            tp.partition: tp.offset for tp in offsets.topic_partitions if tp.topic == topic
        } == (ends)

        refused = client.delete_consumer_groups([group], request_timeout=TIMEOUT)[group]
        with pytest.raises(KafkaException) as exc:
            refused.result(timeout=TIMEOUT)
        assert exc.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, exc.value
    desc = client.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(
        timeout=TIMEOUT
    )
    assert desc.state == ConsumerGroupState.EMPTY and not desc.members, desc
    client.delete_consumer_groups([group], request_timeout=TIMEOUT)[group].result(timeout=TIMEOUT)
    listed = client.list_consumer_groups(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
    assert group not in {g.group_id for g in listed.valid}
    assert group not in broker.cli("groups").stdout.decode().split()
    assert gc.committed(broker.bootstrap, group, topic, partitions) == dict.fromkeys(
        range(partitions), -1
    )
