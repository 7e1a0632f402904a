"""Shared fixtures: a real redis-server and a real PostgreSQL per session (each started when a
test first needs it), and logs on fakeredis or real Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import fakeredis
import pytest
import redis
import redis.asyncio

from kafkaesque.log import Log
from tests.pg import PostgresServer
from tests.servers import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL for the session (started on first use)."""
    server = PostgresServer()
    yield server
    server.destroy()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A real Redis, emptied for this test."""
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture(params=["fakeredis", "redis-server"])
def make_log(request: pytest.FixtureRequest) -> Callable[[], Log]:
    """Builds a Log inside the running event loop, on fakeredis or on a real server."""
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        return lambda: Log(fakeredis.FakeAsyncRedis(server=server))
    url = request.getfixturevalue("redis_url")
    return lambda: Log(redis.asyncio.Redis.from_url(url))
