"""The consumer group protocol (KIP-848, ConsumerGroupHeartbeat and ConsumerGroupDescribe)
against a server process: librdkafka consumers with group.protocol=consumer, and raw
requests for the wire details (member ids, epochs, fencing, reconciliation step by step,
regex subscriptions, mixed groups)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request
from tests.wire.common import (
    FAST_GROUP_ARGS,
    TIMEOUT,
    cli_group,
    create_topic,
    produce_numbered,
    value_of,
)
from tests.wire.common import wait_until as wait_for

SESSION_MS = 3000
# The module's server: short classic group delays, fast consumer-protocol heartbeats and
# sessions so a member that stops heartbeating is gone within seconds.
BROKER_ARGS = (
    *FAST_GROUP_ARGS,
    "--config",
    "group.consumer.heartbeat.interval.ms=300",
    "--config",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
)
TopicPartitions = set[tuple[str, int]]


# -- raw requests ---------------------------------------------------------------------------


class Member:
    """One consumer-protocol member over a raw connection; remembers its epoch and the
    partitions it was last given, and owns (reports) what the test says it owns."""

    def __init__(self, conn: Connection, group: str, member_id: str = "", version: int = 1):
        self.conn, self.group, self.version = conn, group, version
        self.member_id = member_id or uuid.uuid4().hex
        self.epoch = 0
        self.assigned: TopicPartitions = set()

    def beat(self, owned: TopicPartitions | None = None, epoch: int | None = None, **fields: Any):
        """A heartbeat (a join while the epoch is 0); returns the response."""
        epoch = self.epoch if epoch is None else epoch
        if epoch == 0:
            fields = {"rebalance_timeout": 10_000, **fields}
            owned = owned or set()
        resp = self.conn.request(
            request(
                68,
                self.version,
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=epoch,
                topic_partitions=None if owned is None else _by_id(self.conn, owned),
                **fields,
            )
        )
        if resp.error_code == ErrorCode.none:
            self.member_id, self.epoch = resp.member_id, resp.member_epoch
            if resp.assignment is not None:
                self.assigned = _by_name(self.conn, resp.assignment.topic_partitions)
        return resp

    def join(self, topics: list[str] | None = None, **fields: Any) -> Any:
        resp = self.beat(epoch=0, subscribed_topic_names=topics, **fields)
        assert resp.error_code == ErrorCode.none, resp
        return resp


_ids: dict[str, uuid.UUID] = {}


def topic_id(conn: Connection, topic: str) -> uuid.UUID:
    if topic not in _ids:
        (t,) = conn.request(
            request(
                3,
                12,
                topics=[{"name": topic, "topic_id": None}],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        ).topics
        _ids[topic] = t.topic_id
    return _ids[topic]


def _by_id(conn: Connection, tps: TopicPartitions) -> list[dict]:
    topics: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        topics.setdefault(t, []).append(p)
    return [{"topic_id": topic_id(conn, t), "partitions": ps} for t, ps in topics.items()]


def _by_name(conn: Connection, entries: Any) -> TopicPartitions:
    names = {v: k for k, v in _ids.items()}
    return {(names[e.topic_id], p) for e in entries for p in e.partitions}


def describe(conn: Connection, group: str, version: int = 1) -> Any:
    resp = conn.request(
        request(69, version, group_ids=[group], include_authorized_operations=False)
    )
    (described,) = resp.groups
    return described


def tps(topic: str, partitions: range | list[int]) -> TopicPartitions:
    return {(topic, p) for p in partitions}


# -- the raw tests ---------------------------------------------------------------------------


def test_api_versions_advertise_the_consumer_protocol(broker):
    with Connection(broker.bootstrap) as conn:
        keys = {k.api_key: (k.min_version, k.max_version) for k in conn.api_versions(3).api_keys}
    assert keys[68] == (0, 1) and keys[69] == (0, 1)


def test_client_member_ids_epochs_and_incremental_reconciliation(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 4)
    with Connection(broker.bootstrap) as conn:
        topic_id(conn, topic)
        a = Member(conn, group, "member-a")  # v1: the client names itself (KIP-1082)
        joined = a.join([topic])
        assert joined.member_id == "member-a" and joined.member_epoch >= 1, joined
        assert joined.heartbeat_interval.total_seconds() == pytest.approx(0.3)
        assert a.assigned == tps(topic, range(4))

        b = Member(conn, group, "member-b")
        b.join([topic])
        # b's target is half the partitions, but a still owns them all: b gets none yet.
        assert b.assigned == set() and b.epoch > a.epoch
        # a is told to revoke two (its epoch stays until it has).
        a.beat(owned=a.assigned)
        assert len(a.assigned) == 2 and a.epoch < b.epoch
        a_revoking = tps(topic, range(4)) - a.assigned
        # a has not revoked yet (still reports all four): b still gets nothing.
        a.beat(owned=a.assigned | a_revoking)
        b.beat()
        assert b.assigned == set()
        described = describe(conn, group)
        assert described.group_state == "Reconciling", described
        # a revokes; it reaches the new epoch, and b then gets the released partitions.
        a.beat(owned=a.assigned)
        assert a.epoch == b.epoch
        b.beat()
        assert b.assigned == a_revoking and not (a.assigned & b.assigned)

        described = describe(conn, group)
        assert described.error_code == ErrorCode.none
        assert (described.group_state, described.assignor_name) == ("Stable", "uniform")
        assert described.group_epoch == described.assignment_epoch == b.epoch
        members = {m.member_id: m for m in described.members}
        assert set(members) == {"member-a", "member-b"}
        for m, member in ((members["member-a"], a), (members["member-b"], b)):
            assert m.member_epoch == member.epoch and m.subscribed_topic_names == (topic,)
            shown = {(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions}
            target = {
                (t.topic_name, p)
                for t in m.target_assignment.topic_partitions
                for p in t.partitions
            }
            assert shown == target == member.assigned
        unknown = describe(conn, f"{group}-none")
        assert unknown.error_code == ErrorCode.group_id_not_found


def test_member_id_rules_fencing_leave_and_offset_commits(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 2)
    with Connection(broker.bootstrap) as conn:
        topic_id(conn, topic)
        # v1 requires a member id; v0 gets one from the broker.
        nameless = Member(conn, group, version=1)
        nameless.member_id = ""
        assert nameless.beat(epoch=0, subscribed_topic_names=[topic]).error_code == (
            ErrorCode.invalid_request
        )
        old = Member(conn, group, version=0)
        old.member_id = ""
        old.join([topic])
        assert len(old.member_id) >= 16 and old.epoch >= 1

        # A stale (or future) epoch is fenced; an unknown member is unknown.
        assert old.beat(epoch=old.epoch + 5).error_code == ErrorCode.fenced_member_epoch
        stranger = Member(conn, group, "stranger")
        assert stranger.beat(epoch=3).error_code == ErrorCode.unknown_member_id

        # OffsetCommit: the member epoch is the generation id, from v9 on (as Kafka, a
        # member of a consumer group committing with an older version is refused).
        def commit(epoch: int, member: str, version: int = 9) -> ErrorCode:
            offsets = {(topic, 0): (5, None)}
            (code,) = conn.offset_commit(group, epoch, member, offsets, version).values()
            return code

        assert commit(old.epoch, old.member_id, version=8) == ErrorCode.unsupported_version
        assert commit(old.epoch - 1, old.member_id) == ErrorCode.stale_member_epoch
        assert commit(old.epoch, "nobody") == ErrorCode.unknown_member_id
        assert commit(-1, "") == ErrorCode.unknown_member_id  # standalone: not with members
        assert commit(old.epoch, old.member_id) == ErrorCode.none
        assert conn.offset_fetch(group, {topic: [0]})[topic, 0][0] == 5

        # Leaving: epoch -1 in the answer, the member is gone, the offsets stay.
        left = old.beat(epoch=-1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1), left
        described = describe(conn, group, version=0)
        assert (described.group_state, described.members) == ("Empty", ())
        assert commit(-1, "") == ErrorCode.none  # an empty group takes standalone commits
        assert conn.offset_fetch(group, {topic: [0]})[topic, 0][0] == 5


def test_static_member_keeps_its_partitions_across_a_restart(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 4)
    with Connection(broker.bootstrap) as conn:
        topic_id(conn, topic)
        a = Member(conn, group, "static-a")
        a.join([topic], instance_id="instance-a")
        b = Member(conn, group, "b")
        b.join([topic])
        a.beat(owned=a.assigned)
        a.beat(owned=a.assigned)
        b.beat()
        kept, epoch = set(a.assigned), describe(conn, group).group_epoch
        assert b.assigned and kept and not kept & b.assigned
        # A static leave (-2) keeps the instance's partitions: no rebalance, b gets none.
        assert a.beat(epoch=-2, instance_id="instance-a").member_epoch == -2
        b.beat(owned=b.assigned)
        assert not kept & b.assigned
        # The restarted instance (a new member id) gets them back at once...
        again = Member(conn, group, "static-a-restarted")
        again.join([topic], instance_id="instance-a")
        assert again.assigned == kept
        # ...and no other member may take the instance id while it is in use.
        duplicate = Member(conn, group, "dup")
        resp = duplicate.beat(epoch=0, subscribed_topic_names=[topic], instance_id="instance-a")
        assert resp.error_code == ErrorCode.unreleased_instance_id
        described = describe(conn, group)
        assert described.group_epoch == epoch, "a static restart needs no new assignment"
        assert {m.member_id for m in described.members} == {"static-a-restarted", "b"}


def test_range_assignor_and_session_expiry(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 6)
    with Connection(broker.bootstrap) as conn:
        topic_id(conn, topic)
        a, b = Member(conn, group, "a"), Member(conn, group, "b")
        a.join([topic], server_assignor="range")
        b.join([topic], server_assignor="range")
        a.beat(owned=a.assigned)
        a.beat(owned=a.assigned)
        b.beat()
        assert (a.assigned, b.assigned) == (tps(topic, range(3)), tps(topic, range(3, 6)))
        assert describe(conn, group).assignor_name == "range"
        bad = Member(conn, group, "c").beat(
            epoch=0, subscribed_topic_names=[topic], server_assignor="sticky"
        )
        assert bad.error_code == ErrorCode.unsupported_assignor
        # b stops heartbeating: after the session timeout a gets everything.
        deadline = time.monotonic() + SESSION_MS / 1000 + 5
        while a.assigned != tps(topic, range(6)) and time.monotonic() < deadline:
            time.sleep(0.3)
            a.beat(owned=a.assigned)
        assert a.assigned == tps(topic, range(6))
        assert [m.member_id for m in describe(conn, group).members] == ["a"]


def test_two_brokers_on_one_redis_run_one_group(broker, broker_factory, topic_name):
    topic = topic_name()
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, 4)
    other = broker_factory(*BROKER_ARGS)  # the same Redis, another process
    with Connection(broker.bootstrap) as one, Connection(other.bootstrap) as two:
        topic_id(one, topic)
        a, b = Member(one, group, "a"), Member(two, group, "b")
        a.join([topic])
        b.join([topic])  # through the other broker: the same group, a new epoch
        a.beat(owned=a.assigned)
        a.beat(owned=a.assigned)
        b.beat()
        assert len(a.assigned) == len(b.assigned) == 2 and not a.assigned & b.assigned
        assert a.epoch == b.epoch
        # a's next heartbeat goes to the other broker: its epoch is known there too.
        a.conn = two
        assert a.beat().error_code == ErrorCode.none
        assert {m.member_id for m in describe(one, group).members} == {"a", "b"}


def test_regex_subscriptions_follow_new_topics(broker, topic_name):
    base = topic_name("re")
    first, other = f"{base}-one", f"{base}x-other"
    create_topic(broker.bootstrap, first, 2)
    create_topic(broker.bootstrap, other, 1)
    group = f"g-{base}"
    with Connection(broker.bootstrap) as conn:
        for t in (first, other):
            topic_id(conn, t)
        bad = Member(conn, group, "bad").beat(epoch=0, subscribed_topic_regex="(unclosed")
        assert bad.error_code == ErrorCode.invalid_regular_expression, bad
        m = Member(conn, group, "m")
        m.join(None, subscribed_topic_regex=f"{base}-.*")
        assert m.assigned == tps(first, range(2))  # the whole name must match
        assert describe(conn, group).members[0].subscribed_topic_regex == f"{base}-.*"
        second = f"{base}-two"
        create_topic(broker.bootstrap, second, 3)
        topic_id(conn, second)

        def grown() -> bool:
            m.beat(owned=m.assigned)
            return m.assigned == tps(first, range(2)) | tps(second, range(3))

        wait_for(grown, "the new matching topic in the assignment", interval=0.3)


def test_mixed_groups_are_refused_and_empty_ones_convert(broker, topic_name):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 1)
    with Connection(broker.bootstrap) as conn:
        topic_id(conn, topic)
        # A classic group with a member refuses a consumer-protocol member.
        classic = f"classic-{topic}"
        joined = conn.join_new_member(classic, [topic])
        refused = Member(conn, classic, "m").beat(epoch=0, subscribed_topic_names=[topic])
        assert refused.error_code == ErrorCode.group_id_not_found, refused
        # Once empty, it becomes a consumer group (its offsets kept).
        conn.sync_group(classic, joined.generation_id, joined.member_id, {})
        assert conn.offset_commit(
            classic, joined.generation_id, joined.member_id, {(topic, 0): (7, None)}
        ) == {(topic, 0): ErrorCode.none}
        conn.leave_group(classic, joined.member_id)
        converted = Member(conn, classic, "m")
        converted.join([topic])
        assert describe(conn, classic).group_state == "Stable"
        assert conn.offset_fetch(classic, {topic: [0]})[topic, 0][0] == 7
        # A consumer group with a member refuses classic members...
        answer = conn.join_group(classic, topics=[topic])
        assert answer.error_code == ErrorCode.inconsistent_group_protocol, answer
        # ...and gives way once empty.
        converted.beat(epoch=-1)
        again = conn.join_new_member(classic, [topic])
        assert again.error_code == ErrorCode.none
        assert describe(conn, classic).error_code == ErrorCode.group_id_not_found


def test_classic_group_apis_list_describe_and_delete_consumer_groups(broker, topic_name):
    """ListGroups (type "consumer"), DescribeGroups and DeleteGroups see KIP-848 groups, as
    kafka-consumer-groups --list / --describe / --delete expect."""
    topic = topic_name()
    create_topic(broker.bootstrap, topic, 2)
    group = f"listed-{topic}"
    with Connection(broker.bootstrap) as conn:
        topic_id(conn, topic)
        member = Member(conn, group)
        member.join([topic])

        def listed(**filters: Any) -> dict[str, tuple[str, str, str]]:
            answer = conn.request(request(16, 5, **filters))
            return {
                g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in answer.groups
            }

        assert listed()[group][0::2] == ("consumer", "consumer")
        assert group in listed(types_filter=["Consumer"])
        assert group not in listed(types_filter=["classic"])
        state = listed()[group][1]
        assert group in listed(states_filter=[state]) and group not in listed(
            states_filter=["Dead"]
        )
        [described] = conn.request(
            request(15, 5, groups=[group], include_authorized_operations=False)
        ).groups
        assert (described.error_code, described.protocol_type) == (ErrorCode.none, "consumer")
        assert [m.member_id for m in described.members] == [member.member_id]
        # The CLI's `group` shows it too (it said "no such group": it read classic only).
        shown = cli_group(broker, group)
        assert (shown["type"], shown["members"]) == ("consumer", "1")
        assert shown["member_lines"][0].startswith(member.member_id)
        # Deleting a group with a member is refused; once it left, the group goes.
        [refused] = conn.request(request(42, 2, groups_names=[group])).results
        assert refused.error_code == ErrorCode.non_empty_group
        member.beat(epoch=-1)
        [deleted] = conn.request(request(42, 2, groups_names=[group])).results
        assert deleted.error_code == ErrorCode.none
        assert group not in listed()


# -- librdkafka with group.protocol=consumer ------------------------------------------------

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition  # noqa: E402

from tests.wire.clients.confluent import Logs  # noqa: E402


def consumer(bootstrap: str, group: str, logs: Logs) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "kip848-tests",
            "broker.address.family": "v4",
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "error_cb": logs.error_cb,
            "logger": logs,
        }
    )


def commit_sync(c: Consumer, offsets: list[TopicPartition]) -> None:
    """A synchronous commit. STALE_MEMBER_EPOCH, which Kafka's broker answers too when a
    rebalance bumped the member's epoch and its heartbeat has not brought the new one back
    yet, is retried once it has (as Kafka's Java consumer does; librdkafka hands it to
    the application)."""
    for attempt in range(50):
        try:
            c.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or attempt == 49:
                raise
            time.sleep(0.1)


def test_confluent_consumers_share_partitions_and_take_over(broker, topic_name):
    topic, partitions, total = topic_name(), 6, 600
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    produce_numbered(broker.bootstrap, topic, partitions, 0, total)
    logs = [Logs() for _ in range(3)]
    consumers = [consumer(broker.bootstrap, group, lg) for lg in logs]
    seen: list[tuple[int, int, str]] = []  # (consumer, partition, value)

    def log_text() -> str:
        return "\n----\n".join(str(lg) for lg in logs)

    def poll_commit(indexes: list[int]) -> None:
        """One poll by each consumer, committing what it got synchronously."""
        for i in indexes:
            c = consumers[i]
            got = [m for m in c.consume(100, 0.2) if m.error() is None]
            for m in got:
                seen.append((i, m.partition(), m.value().decode()))
            if got:
                last: dict[int, int] = {}
                for m in got:
                    last[m.partition()] = m.offset() + 1
                commit_sync(c, [TopicPartition(topic, p, o) for p, o in last.items()])

    def assignments(indexes: list[int]) -> list[set[int]]:
        return [{tp.partition for tp in consumers[i].assignment()} for i in indexes]

    def shared(indexes: list[int]) -> bool:
        poll_commit(indexes)
        sets = assignments(indexes)
        union = set().union(*sets)
        return all(sets) and union == set(range(partitions)) and sum(map(len, sets)) == partitions

    try:
        for c in consumers:
            c.subscribe([topic])
        wait_for(
            lambda: shared([0, 1, 2]),
            "three consumers sharing 6 partitions",
            timeout=TIMEOUT,
            context=log_text,
            interval=0.01,
        )
        with Connection(broker.bootstrap) as conn:
            members = describe(conn, group).members
        assert len(members) == 3 and {m.member_type for m in members} == {1}, members
        # Consume some, then the third consumer leaves: the others take its partitions.
        target = total // 2
        wait_for(
            lambda: poll_commit([0, 1, 2]) or len(seen) >= target,
            "half the records",
            context=log_text,
            interval=0.01,
        )
        gone = assignments([2])[0]
        assert gone
        consumers[2].close()
        wait_for(
            lambda: shared([0, 1]) and gone <= set().union(*assignments([0, 1])),
            "two consumers taking over",
            context=log_text,
            interval=0.01,
        )
        wait_for(
            lambda: poll_commit([0, 1]) or len({v for _, _, v in seen}) >= total,
            "every record",
            context=log_text,
            interval=0.01,
        )
        values = [v for _, _, v in seen]
        assert sorted(values) == sorted(value_of(i) for i in range(total)), "duplicates or gaps"
        assert {i for i, _, _ in seen} == {0, 1, 2}
    finally:
        for c in consumers[:2]:
            c.close()
    with Connection(broker.bootstrap) as conn:
        assert describe(conn, group).group_state == "Empty"
        listed = conn.offset_fetch(group, {topic: list(range(partitions))})
        assert sum(offset for offset, _, _ in listed.values()) == total


def test_confluent_regex_subscription(broker, topic_name):
    base = topic_name("re")
    topics = [f"{base}-a", f"{base}-b"]
    for t in topics:
        create_topic(broker.bootstrap, t, 2)
        produce_numbered(broker.bootstrap, t, 2, 0, 10)
    create_topic(broker.bootstrap, f"{base}x", 1)  # not matched
    produce_numbered(broker.bootstrap, f"{base}x", 1, 0, 10)
    logs = Logs()
    c = consumer(broker.bootstrap, f"g-{base}", logs)
    got: list[tuple[str, str]] = []
    try:
        c.subscribe([f"^{base}-.*"])

        def all_came() -> bool:
            got.extend(
                (m.topic(), m.value().decode()) for m in c.consume(100, 0.2) if not m.error()
            )
            return len(got) >= 20

        wait_for(all_came, "both matching topics' records", context=lambda: str(logs))
        time.sleep(0.5)
        all_came()
        assert sorted(got) == sorted((t, value_of(i)) for t in topics for i in range(10))
    finally:
        c.close()


def test_confluent_regex_subscriptions_as_librdkafka_joins_them(broker, topic_name):
    """librdkafka sends its regex subscriptions joined, ``(^.*A.*)|(^.*B.*)``: matched in
    linear time (RE2, as Kafka's RE2/J), where a backtracking guard refused the pattern
    and the consumer waited for ever for an assignment."""
    base = topic_name("rx")
    wanted = {f"{base}-a", f"{base}-b"}
    for name in (*wanted, f"{base}-c"):
        create_topic(broker.bootstrap, name, 1)
    logs = Logs()
    c = consumer(broker.bootstrap, f"g-{base}", logs)
    try:
        c.subscribe([f"^.*{base}-a.*", f"^.*{base}-b.*"])

        def assigned() -> bool:
            c.poll(0.2)
            return {tp.topic for tp in c.assignment()} == wanted

        wait_for(assigned, f"an assignment of {sorted(wanted)}: {logs}", timeout=TIMEOUT)
    finally:
        c.close()
