"""Sessionless fetches answered from the connection's last answer (wire/fetch/memo.py):
whatever happened to the partitions between two fetches (appends, DeleteRecords, a topic
deleted and created again, another isolation level, other partitions asked), a
connection's answer is the one a fresh connection gets, in the request's order, while
its requests turn by one partition each time as librdkafka's do."""

from __future__ import annotations

import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.partition.read_types import Fetched, FetchRequest
from tests.kafka_client import Connection, request
from tests.wire.common import wait_until
from tests.wire.test_fetch_sessions import (
    answered,
    create,
    during,
    evalsha_calls,
    fetch,
    on_log,
    produce,
    values,
)
from wire.fetch.memo import MOST_CHANGED, FetchMemo, rotated
from wire.fetch.sessions import FINAL_EPOCH
from wire.protocol.fetch_request import parse_fetch

PARTITIONS = 12


def poll(conn: Connection, topic: str, offsets: dict[int, int], turn: int, isolation: int = 0):
    """A long poll of ``offsets``' partitions, the list turned by ``turn``; with the order
    asked."""
    order = list(offsets)
    order = order[turn % len(order) :] + order[: turn % len(order)]
    response = fetch(
        conn,
        0,
        FINAL_EPOCH,
        {topic: {p: offsets[p] for p in order}},
        max_wait_ms=50,
        min_bytes=1,
        isolation=isolation,
    )
    return response, order


def summary(response: Any) -> list[tuple[Any, ...]]:
    return [
        (
            p.partition_index,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            p.log_start_offset,
            p.records or b"",
        )
        for t in response.responses
        for p in t.partitions
    ]


def test_turned_fetches_answer_as_a_fresh_connection_would(broker, topic_name):
    topic = topic_name()
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    turn = 0

    def check(conn: Connection, what: str, isolation: int = 0) -> None:
        """Poll until the answer is a fresh connection's (an event from another process
        arrives through Redis), well within the read cache's 5 s refresh; then move the
        offsets past the records answered, as a client does."""

        def same() -> bool:
            nonlocal turn
            turn += 1
            got, order = poll(conn, topic, offsets, turn, isolation)
            assert [p for p, *_ in summary(got)] == order  # the request's order
            with Connection(broker.bootstrap) as fresh:
                want, _ = poll(fresh, topic, offsets, turn, isolation)
            if summary(got) != summary(want):
                return False
            for (_, p), data in answered(got).items():
                if data.records:
                    offsets[p] = data.high_watermark
            return True

        wait_until(same, what=what, timeout=3)

    with Connection(broker.bootstrap) as conn, Connection(broker.bootstrap) as other:
        create(conn, topic, PARTITIONS)
        check(conn, "the first fetch")
        check(conn, "a quiet fetch")
        before = evalsha_calls(broker.redis_url)
        for i in range(3):
            poll(conn, topic, offsets, i)
        assert evalsha_calls(broker.redis_url) == before  # quiet: nothing read
        produce(other, topic, 5, b"a", b"b")
        check(conn, "the append")
        assert offsets[5] == 2
        check(conn, "the fetch past it")
        deleted = other.request(
            request(
                21,
                2,
                topics=[{"name": topic, "partitions": [{"partition_index": 5, "offset": 1}]}],
                timeout=10_000,
            )
        )
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.none
        check(conn, "the DeleteRecords")
        on_log(broker.redis_url, lambda parts: parts.log.delete_records(topic, 5, 2))
        check(conn, "the DeleteRecords of another process")
        check(conn, "another isolation level", isolation=1)
        check(conn, "back to the first")
        # Other partitions asked, as many: partition 0 left out, then 11.
        del offsets[0]
        check(conn, "partition 0 left out")
        offsets[0] = 0
        del offsets[11]
        check(conn, "partition 11 left out")
        offsets[11] = 0
        on_log(broker.redis_url, lambda parts: parts.log.delete_topic(topic))
        check(conn, "the deletion")
        create(other, topic, PARTITIONS)
        check(conn, "the topic created again")
        produce(other, topic, 7, b"c")
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        check(conn, "an append to the new topic")
        assert offsets[7] == 1


def test_a_small_fetch_between_large_ones_leaves_no_answer_stale(broker, topic_name):
    """A fetch of a few partitions is read without the connection's memo, but it takes
    the appends the connection heard. The next long poll of many partitions must not be
    planned from the memo of the one before: it would answer a partition that grew
    meanwhile as it was, empty, until that partition's next append."""
    topic, other_topic = topic_name(), topic_name()
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    with Connection(broker.bootstrap) as conn, Connection(broker.bootstrap) as other:
        create(conn, topic, PARTITIONS)
        create(conn, other_topic, 1)
        poll(conn, topic, offsets, 0)
        poll(conn, topic, offsets, 1)  # kept: partition 5 empty at offset 0
        produce(other, topic, 5, b"a")
        time.sleep(0.3)  # heard by conn's read cache
        poll(conn, other_topic, {0: 0}, 0)  # a small fetch on the same connection
        got, _ = poll(conn, topic, offsets, 2)
        p5 = next(s for s in summary(got) if s[0] == 5)
        assert p5[2] == 1 and p5[5], p5


def test_a_partition_left_out_while_it_grew_is_answered_with_its_records(broker, topic_name):
    """An append heard while a long poll waits on other partitions is not read by that
    poll; the next fetch that asks for the partition reads it, not the connection's
    cache of its answer before (stale until the cache's refresh, seconds later)."""
    topic = topic_name()
    both = {topic: {0: 0, 1: 0}}
    with Connection(broker.bootstrap) as conn, Connection(broker.bootstrap) as other:
        create(other, topic, 2)
        fetch(conn, 0, FINAL_EPOCH, both, max_wait_ms=100, min_bytes=1)  # both cached
        during(
            lambda: fetch(conn, 0, FINAL_EPOCH, {topic: {0: 0}}, max_wait_ms=1500, min_bytes=1),
            lambda: produce(other, topic, 1, b"x"),
        )
        got = answered(fetch(conn, 0, FINAL_EPOCH, both, max_wait_ms=500, min_bytes=1))
        assert (got[topic, 1].high_watermark, values(got[topic, 1])) == (1, [b"x"])


def entries(version: int, offsets: list[tuple[int, int]]) -> bytes:
    """A Fetch v12 request body of topic "t" with these (partition, offset) entries."""
    body = struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1)
    body += bytes([2, 2]) + b"t" + bytes([len(offsets) + 1])
    for p, o in offsets:
        body += struct.pack(">iiqiqiB", p, -1, o, -1, -1, 1 << 20, 0)
    return body + b"\0" + b"\1" + b"\1" + b"\0"  # tags; no forgotten topics; rack ""; tags


def test_a_plan_follows_the_turned_request_and_its_changed_entries():
    version = 12
    first = [(p, 0) for p in range(10)]
    body, _ = parse_fetch(entries(version, first), 0, version)
    memo = FetchMemo(version)
    reqs = memo.requests("t", body.topics[0])
    answers = [Fetched(None, 0, 0, [], last_stable=0) for _ in reqs]
    answers[4] = Fetched(None, 3, 0, [b"x"], last_stable=3)  # records: answered anew
    memo.keep(["t"], body, [reqs], [answers], [[bytes([p]) for p in range(10)]])
    # Turned by 3, partition 8 asked from another offset.
    turned = first[3:] + first[:3]
    turned[5] = (8, 2)
    body, _ = parse_fetch(entries(version, turned), 0, version)
    plan = memo.plan(["t"], body)
    assert plan is not None
    (t,) = plan.topics
    assert [r.partition for r in t.requests] == [p for p, _ in turned]
    assert t.requests[5] == FetchRequest("t", 8, 2, 1 << 20)
    assert sorted(plan.changed()) == [1, 5]  # partition 4 (unsettled) and 8
    assert t.pieces[0] == bytes([3]) and plan.position("t", 3) == 0
    assert plan.last(plan.position("t", 4)) is answers[4]
    t.commit()
    # Turned again: positions follow.
    again = turned[1:] + turned[:1]
    body, _ = parse_fetch(entries(version, again), 0, version)
    plan = memo.plan(["t"], body)
    assert plan is not None and plan.position("t", 3) == 9 and plan.changed() == [0]
    # Another partition in an entry's place, another topic, another isolation: no plan.
    other = [*again[:-1], (10, 0)]
    assert memo.plan(["t"], parse_fetch(entries(version, other), 0, version)[0]) is None
    assert memo.plan(["u"], parse_fetch(entries(version, again), 0, version)[0]) is None
    committed = parse_fetch(entries(version, again), 0, version)[0]
    committed.isolation_level = 1
    assert memo.plan(["t"], committed) is None


def test_rotated_finds_the_turn_and_the_changed_entries():
    size = 4
    last = b"".join(struct.pack(">i", i) for i in range(100))
    assert rotated(last, last, size) == (0, [])
    turned = last[7 * size :] + last[: 7 * size]
    assert rotated(last, turned, size) == (7, [])
    changed = bytearray(turned)
    for i in (0, 1, 2, 50, 99):  # the first entries too
        changed[i * size : (i + 1) * size] = struct.pack(">i", 1000 + i)
    assert rotated(last, bytes(changed), size) == (7, [0, 1, 2, 50, 99])
    many = bytearray(turned)
    for i in range(MOST_CHANGED + 1):
        many[i * size : (i + 1) * size] = struct.pack(">i", 1000 + i)
    assert rotated(last, bytes(many), size) is None
    assert rotated(last, last[:-size], size) is None
