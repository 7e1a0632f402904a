"""aiokafka against the server, where it differs from the other libraries (shared
scenarios: test_clients.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.wire.common import BASE_TIMESTAMP, TIMEOUT, Rec

pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.wire.clients.aiokafka import AioKafka, run


def test_follow_new_records(broker, topic_name):
    """A consumer waiting at the end gets records produced later (long-polling fetch)."""
    client = AioKafka(broker)
    topic = topic_name()
    client.create_topic(topic, 1)

    async def scenario() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            **client.common(), group_id=None, enable_auto_commit=False, fetch_max_wait_ms=5000
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            assert not await consumer.getmany(timeout_ms=200)
            waiting = asyncio.ensure_future(consumer.getone())
            await asyncio.sleep(0.3)
            await client.produce_async(topic, [Rec(0, 0, BASE_TIMESTAMP, None, b"late")])
            first = await asyncio.wait_for(waiting, TIMEOUT)
            return [first.value]
        finally:
            await consumer.stop()

    assert run(scenario()) == [b"late"]
