"""Archive tests: a real PostgreSQL per session (a fresh database per test) and the
session's real redis-server (``redis_url``, flushed per test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg import PostgresServer


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> Iterator[str]:
    """A new, empty database on the session's server, dropped after the test."""
    with pg_server.database() as dsn:
        yield dsn
