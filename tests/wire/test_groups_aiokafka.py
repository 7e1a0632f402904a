"""aiokafka consumer groups against the server: members sharing partitions, a member
killed, a restart resuming from committed offsets, and the admin client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import decode_assignment
from tests.wire import groups_common as gc

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient  # noqa: E402

TIMEOUT = 30.0
CLIENT_ID = "wire-tests-aiokafka"

BROKER_ARGS = gc.FAST_GROUP_ARGS  # the module's server: short group delays


def run(coro: Coroutine[Any, Any, Any], timeout: float = 2 * TIMEOUT) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


@contextlib.asynccontextmanager
async def subscribed(bootstrap: str, group: str, topic: str) -> AsyncIterator[AIOKafkaConsumer]:
    """A started consumer of the group subscribed to the topic, stopped on leaving."""
    c = AIOKafkaConsumer(**gc.kafka_python_options(bootstrap, group, CLIENT_ID))
    c.subscribe([topic])
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def consume(c: AIOKafkaConsumer, count: int) -> list[gc.Record]:
    got = gc.Collector(count)
    while wanted := got.wanted():
        got.records += gc.records_of(await c.getmany(timeout_ms=200, max_records=wanted))
    return got.result()


def test_restarted_consumer_resumes_from_committed_offsets(broker, topic_name):
    topic = topic_name()
    group = f"g-{topic}"

    async def first_consumer(count: int) -> tuple[list[gc.Record], dict[int, int]]:
        async with subscribed(broker.bootstrap, group, topic) as first:
            half = await consume(first, count)
            positions = gc.positions_after(half)
            await first.commit({TopicPartition(topic, p): o for p, o in positions.items()})
            return half, {p: await first.committed(TopicPartition(topic, p)) for p in positions}

    async def second_consumer(count: int) -> list[gc.Record]:
        async with subscribed(broker.bootstrap, group, topic) as second:
            rest = await consume(second, count)
            extra = await second.getmany(timeout_ms=500)
            assert not any(extra.values()), "more records than produced"
            return rest

    gc.check_restart_resumes(
        broker.bootstrap,
        topic,
        lambda count: run(first_consumer(count)),
        lambda count: run(second_consumer(count)),
    )


def test_admin_list_describe_offsets(broker, topic_name, tmp_path):
    topic = topic_name()
    group = f"g-{topic}"

    async def scenario(split: list[list[int]], ends: dict[int, int]) -> None:
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
                ErrorCode.none,
                group,
                "Stable",
                "consumer",
                "range",
            )
            assigned = sorted(decode_assignment(assignment)[topic] for *_, assignment in described)
            assert assigned == sorted(split), described
            assert {client_id for _, client_id, *_ in described} == {"aiokafka-a", "aiokafka-b"}
            offsets = await client.list_consumer_group_offsets(group)
            assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == (
                ends
            )
        finally:
            await client.close()

    with gc.two_committed_members(broker, tmp_path, topic, group, "aiokafka") as (split, ends):
        run(scenario(split, ends))
