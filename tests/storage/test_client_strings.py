"""Strings clients choose reach the archive and come back from it byte for byte: NUL
(which a PostgreSQL text value cannot hold), other control characters, non-BMP characters.

The strings that reach PostgreSQL: a group's id and its offsets' metadata
(``group_offset``), header keys (``record.headers``), and the values of the topic configs
that take any text (``topic.configs``). Topic names are Kafka's legal characters only;
client ids, group instance ids, transactional ids and SCRAM user names stay in Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.records.batch import decode_batch
from storage_pg import Archiver, create_pool, recover
from storage_pg import group_offsets as archived
from storage_pg.cold import ArchiveReader, _headers
from storage_pg.schema import MIGRATIONS, SCHEMA_VERSION, ensure_schema
from tests.kafka_client import Connection
from tests.storage.common import make_log, produce
from tests.wire.conftest import Broker

THROTTLED = "leader.replication.throttled.replicas"  # a config that takes any text


async def _archive_and_restore(log: Log, pool: asyncpg.Pool) -> None:
    """One archiver pass (it must archive everything), Redis loses its data, recovery."""
    summary = await Archiver(log, pool, idle_close_ms=0).run_once()
    assert summary.problems == []
    await log.redis.flushall()
    assert await recover(log, pool)


def test_nul_in_offset_metadata_and_group_id_is_archived_and_restored(
    redis_url: str, pg_dsn: str
) -> None:
    """One commit with metadata "Hello\\0world!" used to fail every archiver pass's COPY
    (invalid byte sequence 0x00): no group's offsets were archived from then on."""

    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        groups = GroupCoordinator(log)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=5))
        await produce(log, "t", 0, [b"x"] * 10)
        await groups.admin.commit("plain", -1, "", None, {("t", 0): (3, "meta", 2)})
        await groups.admin.commit("nul", -1, "", None, {("t", 0): (5, "Hello\0world!", 2)})
        await groups.admin.commit("g\0\x01\U0001f600", -1, "", None, {("t", 0): (7, "\0", -1)})

        await Archiver(log, pool, idle_close_ms=None).run_once()
        async with pool.acquire() as conn:
            saved = await archived.load(conn)
        assert sorted(saved) == ["g\0\x01\U0001f600", "nul", "plain"]
        assert saved["nul"][("t", 0)].metadata == "Hello\0world!"

        await log.redis.flushall()
        assert await recover(log, pool)
        assert sorted(await groups.admin.list_groups()) == ["g\0\x01\U0001f600", "nul", "plain"]
        nul = (await groups.admin.committed("nul"))[("t", 0)]
        assert (nul.offset, nul.metadata, nul.leader_epoch) == (5, "Hello\0world!", 2)
        odd = (await groups.admin.committed("g\0\x01\U0001f600"))[("t", 0)]
        assert (odd.offset, odd.metadata) == (7, "\0")
        assert (await groups.admin.committed("plain"))[("t", 0)].metadata == "meta"
        await pool.close()

    asyncio.run(scenario())


def test_nul_in_a_topic_config_value_is_archived_and_restored(redis_url: str, pg_dsn: str) -> None:
    """A config value holding NUL used to fail the topic upsert (jsonb refuses \\u0000),
    and with it every pass."""

    async def scenario() -> None:
        pool = await create_pool(pg_dsn)
        log = make_log(redis_url)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, configs={THROTTLED: "0:1\0,*"}))
        await produce(log, "t", 0, [b"x"])
        await _archive_and_restore(log, pool)
        assert (await log.topic("t")).configs[THROTTLED] == "0:1\0,*"
        await pool.close()

    asyncio.run(scenario())


def test_migration_8_keeps_the_offsets_archived_as_text(pg_dsn: str) -> None:
    """An archive of schema 7 (group ids and metadata as text) converts to bytea with the
    same strings."""

    async def scenario() -> None:
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(
                "CREATE TABLE schema_version (version int PRIMARY KEY,"
                " applied timestamptz NOT NULL DEFAULT now())"
            )
            for version, migration in enumerate(MIGRATIONS[:7], 1):
                await conn.execute(migration)
                await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
            await conn.execute(
                "INSERT INTO group_offset VALUES ($1, 't', 0, 42, $2, 1000, 3)",
                "gr\u00fcppe \U0001f600",
                "m\u00e9ta\x01",
            )
            assert await ensure_schema(conn) == SCHEMA_VERSION
            assert await archived.load(conn) == {
                "gr\u00fcppe \U0001f600": {
                    ("t", 0): archived.CommittedOffset(42, "m\u00e9ta\x01", 1000, 3)
                }
            }
        finally:
            await conn.close()

    asyncio.run(scenario())


# --- the property: any string, every field ------------------------------------------------

# Any text (no lone surrogates: Kafka's strings are UTF-8), and often the characters that
# have broken things: NUL, other controls, line separators, non-BMP.
ODD = "\0\x01\x1f\x7f\x80\u2028\ufeff\uffff\U0001f600\U0010ffff\\\"'{}[],:é"
TEXT = st.one_of(st.text(max_size=40), st.text(alphabet=ODD, max_size=12))


@dataclass
class Env:
    runner: asyncio.Runner
    pool: asyncpg.Pool
    log: Log


@pytest.fixture
def env(redis_url: str, pg_dsn: str) -> Iterator[Env]:
    with asyncio.Runner() as runner:
        pool = runner.run(create_pool(pg_dsn))
        log = make_log(redis_url)
        try:
            yield Env(runner, pool, log)
        finally:
            runner.run(pool.close())
            runner.run(log.redis.aclose())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(group_id=TEXT.filter(bool), metadata=TEXT, header_key=TEXT, config=TEXT)
def test_client_strings_round_trip_through_the_archive(
    env: Env, group_id: str, metadata: str, header_key: str, config: str
) -> None:
    """Each string goes to the archive (an archiver pass), Redis loses its data, and the
    restore (or a cold read) gives it back unchanged."""

    async def example() -> None:
        log, pool = env.log, env.pool
        async with pool.acquire() as conn:  # a fresh archive for every example
            await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        await log.redis.flushall()
        groups = GroupCoordinator(log)
        await log.enable_archiving()
        await log.create_topic(TopicConfig("t", 1, page_size=1, configs={THROTTLED: config}))
        configs = (await log.topic("t")).configs
        await produce(log, "t", 0, [b"v"], headers=[[(header_key, b"h"), ("k", None)]])
        await groups.admin.commit(group_id, -1, "", None, {("t", 0): (1, metadata, 4)})

        await _archive_and_restore(log, pool)
        assert (await log.topic("t")).configs == configs
        committed = (await groups.admin.committed(group_id))[("t", 0)]
        assert (committed.offset, committed.metadata, committed.leader_epoch) == (1, metadata, 4)
        [row] = await archived_rows_of(pool)
        assert row == [(header_key, b"h"), ("k", None)]
        [batch] = await ArchiveReader(pool).read("t", 0, 0, 1 << 20)
        [record] = decode_batch(batch)
        assert list(record.headers) == [(header_key, b"h"), ("k", None)]

    env.runner.run(example())


async def archived_rows_of(pool: asyncpg.Pool) -> list[list[tuple[str, bytes | None]]]:
    """The headers of every archived record, keys read back as cold reads read them."""
    async with pool.acquire() as conn:
        return [_headers(r[0]) for r in await conn.fetch("SELECT headers FROM record ORDER BY id")]


# --- on the wire: one kafka-python commit --------------------------------------------------


def test_kafka_python_commit_with_nul_metadata_survives_a_flush(
    redis_url: str, pg_dsn: str, tmp_path: Path
) -> None:
    """The report's reproduction: one kafka-python commit with metadata "Hello\\0world!"
    made every archiver pass fail. Archived, then Redis flushed, the first request after
    the loss (an OffsetFetch) gets the metadata back byte for byte."""
    kafka = pytest.importorskip("kafka")
    # The broker's own archiver stays out of the way (one pass at start, the next in an
    # hour): the CLI archives, and nothing restores Redis before the OffsetFetch does.
    broker = Broker(redis_url, tmp_path / "b", ["--archive-interval", "3600"], pg_dsn)
    try:
        assert broker.cli("create", "t").returncode == 0
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id="g", enable_auto_commit=False
        )
        try:
            tp = kafka.TopicPartition("t", 0)
            consumer.commit({tp: kafka.OffsetAndMetadata(0, "Hello\0world!", -1)})
        finally:
            consumer.close()
        archived_once = broker.cli("archive", "--once")
        assert archived_once.returncode == 0, archived_once.stderr.decode()

        redis.Redis.from_url(redis_url).flushall()
        with Connection(broker.bootstrap) as conn:
            assert conn.offset_fetch("g", {"t": [0]}) == {
                ("t", 0): (0, "Hello\0world!", ErrorCode.none)
            }
    finally:
        broker.stop()
    assert "Traceback" not in broker.stderr(), broker.stderr()
