"""Many clients at once on a broker with few Redis connections: requests wait for a free
connection instead of failing (redis-py's default pool raised at its limit), and the broker
holds more connections than the usual soft limit of open files (1024) allows."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import AsyncConnection, fetch_request, metadata_request, request
from tests.wire.conftest import Broker

# Far fewer Redis connections than clients: every request beyond 4 in flight must queue.
BROKER_ARGS = ("--redis-max-connections", "4")
CONNECTIONS = 1000
LONG_POLLS = 300


@pytest.fixture(autouse=True, scope="module")
def open_files() -> Iterator[None]:
    """This process holds the client side of every connection: its soft limit of open
    files goes up to the hard one, as the broker's does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_files_limits(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        [line] = [line for line in f if line.startswith("Max open files")]
    soft, hard = line.split()[3:5]
    return int(soft), int(hard)


async def connect_all(broker: Broker, count: int) -> list[AsyncConnection]:
    return list(await asyncio.gather(*(AsyncConnection.connect(broker.port) for _ in range(count))))


def test_the_broker_raises_its_open_files_limit(broker_factory, open_files) -> None:
    """Started with a soft limit of 256, the broker raises it to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # inherited by the broker
    try:
        broker = broker_factory()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert open_files_limits(broker.proc.pid) == (hard, hard)


def test_a_thousand_connections_are_all_answered(broker: Broker) -> None:
    async def scenario() -> None:
        connections = await connect_all(broker, CONNECTIONS)

        async def client(c: AsyncConnection) -> ErrorCode:
            versions = await c.request(
                request(18, 3, client_software_name="t", client_software_version="1")
            )
            assert versions.error_code == ErrorCode.none
            answer = await c.request(metadata_request(["load"], auto_create=True))
            [topic] = answer.topics
            return topic.error_code

        codes = await asyncio.gather(*(client(c) for c in connections))
        assert codes == [ErrorCode.none] * CONNECTIONS
        for c in connections:
            await c.close()

    asyncio.run(scenario())


def test_hundreds_of_long_polls_are_all_answered(broker: Broker) -> None:
    async def scenario() -> None:
        first = await AsyncConnection.connect(broker.port)
        await first.request(metadata_request(["polled"], auto_create=True))
        connections = await connect_all(broker, LONG_POLLS)
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
