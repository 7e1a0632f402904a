"""Shared fixtures: a real redis-server and a real PostgreSQL per session (per worker under
pytest-xdist, tests/scheduling.py; each started when a test first needs it), and logs on
fakeredis or real Redis.

Every test runs with a data directory of its own (``KAFKAESQUE_HOME``) and none of the
user's KAFKAESQUE_* settings: nothing in the suite may read or start the embedded servers of
the checkout's ``./.kafkaesque``, or reach a Redis or PostgreSQL the user configured."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import fakeredis
import pytest
import redis
import redis.asyncio

from kafkaesque.hot.embedded import EmbeddedRedis
from kafkaesque.hot.log import Log
from tests import scheduling
from tests.pg import PostgresServer
from tests.servers import RedisServer

# kio registers Hypothesis strategies when it is imported (in the suite and in every broker
# it starts), and Hypothesis then writes caches into the working directory's .hypothesis:
# keep them in a temporary directory instead, set before anything imports kio.
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="kafkaesque-hypothesis-")
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _HYPOTHESIS_HOME
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)

# The user's settings that choose where data lives; the others (KAFKAESQUE_PG_USER,
# KAFKAESQUE_PG_BIN, KAFKAESQUE_JDBC_JAR) only say how to run things and may stay.
USER_SETTINGS = (
    "KAFKAESQUE_HOME",
    "KAFKAESQUE_REDIS_URL",
    "KAFKAESQUE_PG_DSN",
    "KAFKAESQUE_LISTEN",
    "KAFKAESQUE_METRICS",
    "KAFKAESQUE_CONSOLE",
)


def _private_environment(mp: pytest.MonkeyPatch, home: Path) -> None:
    for name in USER_SETTINGS:
        mp.delenv(name, raising=False)
    mp.setenv("KAFKAESQUE_HOME", str(home))


# Markers by area, so a lane can pick or skip one (``-m cluster``, ``-m "not chaos"``).
AREAS = {
    "cluster": "Redis Cluster and Sentinel (tests/cluster/)",
    "spark": "a real Spark session (tests/spark/)",
    "chaos": "fault injection against real servers: chaos, Jepsen, power cuts (slow)",
    "clients": "real Kafka client libraries over real sockets (tests/wire/ that use one)",
}
# Directories whose tests carry an area's marker; "clients" goes by what a module uses.
AREA_DIRECTORIES = {"cluster": "cluster", "spark": "spark", "chaos": "chaos", "jepsen": "chaos"}
AREA_DIRECTORIES["power"] = "chaos"
CLIENT_LIBRARIES = (
    "confluent_kafka",
    "from kafka ",
    "import kafka\n",
    "aiokafka",
    "kafkajs",
    "kcat",
    "faust",
    "tests.wire.clients",
)


@functools.cache
def _uses_a_client(path: Path) -> bool:
    text = path.read_text()
    return any(library in text for library in CLIENT_LIBRARIES)


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in AREAS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def _mark_areas(items: list[pytest.Item]) -> None:
    for item in items:
        area = AREA_DIRECTORIES.get(item.path.parent.name)
        if area is not None:
            item.add_marker(getattr(pytest.mark, area))
        if item.path.parent.name == "wire" and _uses_a_client(item.path):
            item.add_marker(pytest.mark.clients)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``-n N --dist loadfile``: modules longest first (tests/scheduling.py)."""
    return scheduling.make_scheduler(config, log) if scheduling.applies(config) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_areas(items)
    if scheduling.applies(config) and hasattr(config, "workerinput"):
        scheduling.longest_first(items)


@pytest.fixture(scope="session", autouse=True)
def session_home() -> Iterator[Path]:
    """A data directory for session fixtures (servers started before any test's own)."""
    with data_directory() as home, pytest.MonkeyPatch.context() as mp:
        _private_environment(mp, home)
        yield home


@pytest.fixture(autouse=True)
def private_home() -> Iterator[Path]:
    """This test's own data directory; embedded servers a test started in it are stopped
    afterwards."""
    with data_directory() as home, pytest.MonkeyPatch.context() as mp:
        _private_environment(mp, home)
        yield home


@contextlib.contextmanager
def data_directory() -> Iterator[Path]:
    """A fresh data directory, removed afterwards with what ran in it stopped. Short (the
    embedded redis-server's socket lives in it) and directly under /tmp, traversable: as
    root the embedded PostgreSQL runs as another user, who must reach it (pytest's own
    directories are mode 700, which would move the cluster to /var/lib/kafkaesque)."""
    parent = Path(tempfile.mkdtemp(prefix="ks-home-"))
    parent.chmod(0o755)
    home = parent / "home"
    try:
        yield home
    finally:
        _stop_embedded(home)
        shutil.rmtree(parent, ignore_errors=True)


def _stop_embedded(home: Path) -> None:
    if (home / "pg").exists():
        from storage_pg.embedded import EmbeddedPostgres

        EmbeddedPostgres(home).stop()
        # As root the cluster lives in /var/lib/kafkaesque/clusters (home/pg links to
        # it): removed with the test's data directory, not left to pile up.
        if (home / "pg").is_symlink():
            shutil.rmtree((home / "pg").resolve(), ignore_errors=True)
    if (home / "redis.pid").exists():
        EmbeddedRedis(home).stop()


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
def pg_dsn(pg_server: PostgresServer) -> Iterator[str]:
    """A new, empty database on the session's server, dropped after the test."""
    with pg_server.database() as dsn:
        yield dsn


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
