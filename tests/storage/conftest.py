"""Archive tests: a real PostgreSQL per session (a fresh database per test) and the
session's real redis-server (``redis_url``, flushed per test)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from tests.pg import PostgresServer


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    yield server
    server.destroy()


async def _admin(server: PostgresServer, sql: str) -> None:
    conn = await asyncpg.connect(server.dsn())
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> Iterator[str]:
    """A new, empty database on the session's server, dropped after the test."""
    if pg_server.proc is None:  # a test stopped it and failed before starting it again
        pg_server.start()
    name = f"t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_server, f"CREATE DATABASE {name}"))
    yield pg_server.dsn(name)
    if pg_server.proc is None:
        pg_server.start()
    asyncio.run(_admin(pg_server, f"DROP DATABASE {name} WITH (FORCE)"))
