"""Many clients at once on a broker with few Redis connections: requests wait for a free
connection instead of failing (redis-py's default pool raised at its limit)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.kafka_client import AsyncConnection, fetch_request, metadata_request, request
from tests.wire.conftest import Broker

# Far fewer Redis connections than clients: every request beyond 4 in flight must queue.
BROKER_ARGS = ("--redis-max-connections", "4")


async def connect_all(broker: Broker, count: int) -> list[AsyncConnection]:
    return list(await asyncio.gather(*(AsyncConnection.connect(broker.port) for _ in range(count))))


def test_hundreds_of_connections_are_all_answered(broker: Broker) -> None:
    async def scenario() -> None:
        connections = await connect_all(broker, 300)

        async def client(c: AsyncConnection) -> ErrorCode:
            versions = await c.request(
                request(18, 3, client_software_name="t", client_software_version="1")
            )
            assert versions.error_code == ErrorCode.none
            answer = await c.request(metadata_request(["load"], auto_create=True))
            [topic] = answer.topics
            return topic.error_code

        codes = await asyncio.gather(*(client(c) for c in connections))
        assert codes == [ErrorCode.none] * 300
        for c in connections:
            await c.close()

    asyncio.run(scenario())


def test_hundreds_of_long_polls_are_all_answered(broker: Broker) -> None:
    async def scenario() -> None:
        first = await AsyncConnection.connect(broker.port)
        await first.request(metadata_request(["polled"], auto_create=True))
        connections = await connect_all(broker, 200)
        # Each waits at the log end for a second: all are in flight together.
        polls = await asyncio.gather(
            *(c.request(fetch_request("polled", {0: 0}, max_wait_ms=1000)) for c in connections)
        )
        for answer in polls:
            [partition] = answer.responses[0].partitions
            assert partition.error_code == ErrorCode.none and partition.high_watermark == 0
        for c in [first, *connections]:
            await c.close()

    asyncio.run(scenario())
