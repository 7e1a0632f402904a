"""aiokafka consumer groups against the server: members sharing partitions, a member
killed, a restart resuming from committed offsets, and the admin client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from tests.wire import groups_common as gc

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient  # noqa: E402

TIMEOUT = 30.0


BROKER_ARGS = gc.FAST_GROUP_ARGS  # the module's server: short group delays


def run(coro: Coroutine[Any, Any, Any], timeout: float = 2 * TIMEOUT) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def consumer(bootstrap: str, group: str, **config) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="wire-tests-aiokafka",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=gc.SESSION_MS,
        heartbeat_interval_ms=gc.HEARTBEAT_MS,
        fetch_max_wait_ms=100,
        request_timeout_ms=int(TIMEOUT * 1000),
        **config,
    )


async def consume(c: AIOKafkaConsumer, count: int, timeout: float = TIMEOUT) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        batch = await c.getmany(timeout_ms=200, max_records=min(500, count - len(out)))
        out.extend(m for messages in batch.values() for m in messages)
    assert len(out) == count, f"got {len(out)} of {count} records"
    return out


def position_of(messages) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in messages:
        out[m.partition] = max(out.get(m.partition, 0), m.offset + 1)
    return out


def test_restarted_consumer_resumes_from_committed_offsets(broker, topic_name):
    topic, partitions, total = topic_name(), 3, 3000
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
    gc.produce_numbered(broker.bootstrap, topic, partitions, 0, total)

    async def scenario() -> tuple[list, list, dict[int, int]]:
        first = consumer(broker.bootstrap, group)
        first.subscribe([topic])
        await first.start()
        try:
            half = await consume(first, total // 2)
            positions = position_of(half)
            await first.commit({TopicPartition(topic, p): o for p, o in positions.items()})
            for p, o in positions.items():
                assert await first.committed(TopicPartition(topic, p)) == o
        finally:
            await first.stop()
        second = consumer(broker.bootstrap, group)
        second.subscribe([topic])
        await second.start()
        try:
            rest = await consume(second, total - len(half))
            extra = await second.getmany(timeout_ms=500)
            assert not any(extra.values()), "more records than produced"
        finally:
            await second.stop()
        return half, rest, positions

    half, rest, positions = run(scenario())
    before = {m.value.decode() for m in half}
    after = [m.value.decode() for m in rest]
    assert not before & set(after), "records consumed again after the restart"
    assert before | set(after) == {gc.value_of(i) for i in range(total)}
    assert len(after) == len(set(after))
    for p in range(partitions):
        offsets = [m.offset for m in rest if m.partition == p]
        if offsets:
            assert min(offsets) == positions.get(p, 0), (p, positions)


def test_admin_list_describe_offsets(broker, topic_name, tmp_path):
    topic, partitions = topic_name(), 3
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
    ends = gc.produce_numbered(broker.bootstrap, topic, partitions, 0, 300)
    members = gc.start_members(tmp_path, ["a", "b"], "aiokafka", broker.bootstrap, topic, group)

    async def scenario(split: list[list[int]]) -> None:
        client = AIOKafkaAdminClient(
            bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT * 1000)
        )
        await client.start()
        try:
            listed = await client.list_consumer_groups()
            assert (group, "consumer") in [tuple(g)[:2] for g in listed], listed
            [response] = await client.describe_consumer_groups([group])
            [(error, group_id, state, protocol_type, protocol, described)] = response.groups
            assert (error, group_id, state, protocol_type, protocol) == (
                0,
                group,
                "Stable",
                "consumer",
                "range",
            )
            assigned = sorted(
                gc.decode_assignment(assignment)[topic] for *_, assignment in described
            )
            assert assigned == sorted(split), described
            assert {client_id for _, client_id, *_ in described} == {"aiokafka-a", "aiokafka-b"}
            offsets = await client.list_consumer_group_offsets(group)
            assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == (
                ends
            )
        finally:
            await client.close()

    try:
        split = gc.wait_for_split(members, partitions)
        gc.wait_until(
            lambda: gc.committed(broker.bootstrap, group, topic, partitions) == ends,
            "the members to commit everything",
        )
        run(scenario(split))
    finally:
        gc.stop_all(members)
