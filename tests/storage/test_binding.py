"""An archive is joined only to its own Redis: one of another cluster is refused by every
command that would use it, and by the broker, and neither side is changed."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
import redis

from kafkaesque.cli.base import Context
from kafkaesque.hot.embedded import EmbeddedRedis
from tests.cli_in_turn import CommandsInTurn
from tests.servers import free_port
from tests.storage.common import bare_env
from tests.storage.test_served import REPO, cli, ok

MISMATCH = "belong to different clusters; refusing to join them"


def archive_snapshot(dsn: str) -> list[list[tuple]]:
    """Everything the archive holds that a wrong join could change."""

    async def read() -> list[list[tuple]]:
        conn = await asyncpg.connect(dsn)
        try:
            return [
                [tuple(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY 1, 2")]
                for table in ("record", "partition_state", "deleted_topic")
            ] + [
                [tuple(r) for r in await conn.fetch(query)]
                for query in (
                    "SELECT name, partitions FROM topic ORDER BY name",
                    "SELECT topic, partition, archived_through FROM archive_progress ORDER BY 1, 2",
                    "SELECT id FROM cluster",
                )
            ]
        finally:
            await conn.close()

    return asyncio.run(read())


def redis_snapshot(url: str) -> dict[bytes, bytes]:
    client = redis.Redis.from_url(url)
    return {key: client.dump(key) for key in sorted(client.keys("ks:*"))}


def one_error_line(result: subprocess.CompletedProcess[bytes], fragment: str) -> None:
    assert result.returncode == 1, result.stderr.decode()
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("Error: ") and fragment in line, line


@pytest.fixture
def turn(tmp_path: Path) -> Iterator[CommandsInTurn]:
    """One CLI process for the test's commands but the first (tests/cli_in_turn.py)."""
    with CommandsInTurn(bare_env(tmp_path), REPO) as process:
        yield process


def test_a_redis_of_another_cluster_is_refused(
    redis_url: str, pg_dsn: str, tmp_path: Path, turn: CommandsInTurn
) -> None:
    def paired(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return turn.run("--redis-url", redis_url, "--pg-dsn", pg_dsn, *args, input=input)

    def alone(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return turn.run("--redis-url", redis_url, *args, input=input)

    # Cluster A: a topic archived into the database.
    ok(cli(redis_url, tmp_path, "create", "a-topic", "--page-size", "10", pg_dsn=pg_dsn))
    ok(paired("produce", "a-topic", input=b"a\n" * 25))
    ok(paired("archive", "--once"))
    # The same Redis, emptied and used afresh without the archive: another cluster.
    redis.Redis.from_url(redis_url).flushall()
    ok(alone("create", "b-topic", "--page-size", "10"))
    ok(alone("produce", "b-topic", input=b"b\n" * 25))
    archive_before = archive_snapshot(pg_dsn)
    redis_before = redis_snapshot(redis_url)

    # Every command that would read, restore, archive or delete through the pair refuses.
    one_error_line(paired("consume", "b-topic"), MISMATCH)
    one_error_line(paired("archive", "--once"), MISMATCH)
    one_error_line(paired("delete", "b-topic"), MISMATCH)
    one_error_line(paired("create", "c-topic"), MISMATCH)
    # So does the broker, before it listens.
    port = free_port()
    served = paired("serve", "--listen", f"127.0.0.1:{port}")
    one_error_line(served, MISMATCH)

    assert archive_snapshot(pg_dsn) == archive_before
    # Redis got an id of its own (the check names it), and nothing else.
    after = redis_snapshot(redis_url)
    own_id = redis.Redis.from_url(redis_url).get("ks:cluster_id")
    assert own_id is not None and (own_id.decode(),) not in archive_before[-1]
    after.pop(b"ks:cluster_id")
    assert after == redis_before
    # Alone, each side still works.
    assert ok(alone("consume", "b-topic")) == "b\n" * 25


def test_an_empty_redis_takes_the_archive_it_is_given(
    redis_url: str, pg_dsn: str, tmp_path: Path, turn: CommandsInTurn
) -> None:
    """Redis without data (new, or it lost its data) given an archive explicitly: restored
    from it, with its cluster id, so the pair is one cluster again."""

    def paired(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return turn.run("--redis-url", redis_url, "--pg-dsn", pg_dsn, *args, input=input)

    ok(cli(redis_url, tmp_path, "create", "t", "--page-size", "5", pg_dsn=pg_dsn))
    ok(paired("produce", "t", input=b"x\n" * 12))
    ok(paired("archive"))
    (cluster,) = archive_snapshot(pg_dsn)[-1]
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.set("ks:cluster_id", "set-by-a-broker-meanwhile")  # no data: not a cluster yet
    assert ok(paired("topics")) == "t\n"
    assert client.get("ks:cluster_id").decode() == cluster[0]
    ok(paired("archive"))


def test_an_explicit_redis_never_takes_the_embedded_archive(redis_url: str, tmp_path: Path) -> None:
    """With --redis-url, the commands that need an archive want it named; the others run
    without one (see also tests/test_isolation.py, with a real embedded archive)."""
    for args in (["archive"], ["serve", "--listen", f"127.0.0.1:{free_port()}"]):
        result = cli(redis_url, tmp_path, *args)
        assert result.returncode == 2, result.stderr.decode()
        (line,) = result.stderr.decode().splitlines()
        assert "with --redis-url the archive must be given too (--pg-dsn" in line
    assert not (tmp_path / "pg").exists()
    # Naming the embedded Redis by its socket is using the embedded default.
    home = tmp_path / "h"
    assert Context(EmbeddedRedis(home).url, str(home)).archive_dsn(start=False) is None
    assert Context(EmbeddedRedis(home).url, str(home)).embedded_redis()
    assert not Context(redis_url, str(home)).embedded_redis()
