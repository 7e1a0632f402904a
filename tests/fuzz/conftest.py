"""The fuzz tests run against a broker process of their own, archiving to a PostgreSQL
database (names reach the archive: a NUL byte is no text to it), one per module;
Hypothesis keeps its files in a temporary directory (see tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.pg import PostgresServer
from tests.servers import RedisServer
from tests.wire.conftest import Broker, broker, broker_factory

__all__ = ["broker", "broker_factory", "module_broker"]


@pytest.fixture(scope="module")
def module_broker(
    redis_server: RedisServer,
    pg_server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Broker]:
    """The module's ``BROKER_ARGS``, on an empty Redis and a new archive database."""
    redis.Redis.from_url(redis_server.url).flushall()
    with pg_server.database() as dsn:
        server = Broker(
            redis_server.url,
            tmp_path_factory.mktemp("broker"),
            getattr(request.module, "BROKER_ARGS", ()),
            dsn,
        )
        try:
            yield server
        finally:
            status = server.stop()
            assert "Traceback" not in server.stderr(), server.stderr()[-4000:]
            assert status in (0, -15), f"exit status {status} on SIGTERM"
