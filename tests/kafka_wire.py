"""An in-process broker for tests that talk to it with ``tests.kafka_client``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

from kafkaesque.hot.log import Log
from wire.broker import Broker, BrokerConfig
from wire.net.server import Server


async def run_with_broker(
    redis_url: str,
    scenario: Callable[[Server], Awaitable[None]],
    **config: Any,
) -> None:
    """Start an in-process broker on a free port, run the scenario, shut down."""
    client = redis.asyncio.Redis.from_url(redis_url)
    server = Server(Broker(Log(client), BrokerConfig(**config)), "127.0.0.1", 0)
    await server.start()
    server.broker.config.port = server.port
    try:
        await scenario(server)
    finally:
        await server.shutdown()
        await client.aclose()
