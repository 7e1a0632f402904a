"""The hot tier's connection pool across a restart of Redis: the connections left idle in
the pool were closed by the old server; none of them may fail a command afterwards (a
broker answered KAFKA_STORAGE_ERROR to a request seconds after Redis was back)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from kafkaesque.hot.connect import redis_client
from tests.servers import RedisServer

CONNECTIONS = 8


def test_idle_connections_closed_by_a_restart_are_replaced_unseen(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(tmp_path / "redis")

    async def scenario() -> None:
        client = redis_client(server.url)
        try:
            # Commands held open together: the pool keeps that many connections.
            await asyncio.gather(*(client.blpop(["none"], 0.1) for _ in range(CONNECTIONS)))
            server.stop()
            server.start()
            await asyncio.sleep(0.2)  # the client's loop reads each connection's close
            caplog.clear()
            # Every idle connection is handed out again, at once.
            answers = await asyncio.gather(
                *(client.blpop(["none"], 0.1) for _ in range(CONNECTIONS)),
                return_exceptions=True,
            )
            assert answers == [None] * CONNECTIONS
            assert "cannot reach Redis" not in caplog.text
        finally:
            await client.aclose()

    caplog.set_level(logging.DEBUG, logger="kafkaesque")
    try:
        asyncio.run(scenario())
    finally:
        server.stop()
