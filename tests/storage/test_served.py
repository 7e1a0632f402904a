"""The archive as users meet it: the `kafkaesque archive` command, `consume` and a Kafka
client (confluent-kafka) reading offsets Redis no longer holds, a Redis flush under a
running broker, and a broker whose PostgreSQL went away."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from kafkaesque.hot.connect import open_log
from tests.cli_in_turn import CommandsInTurn
from tests.pg import PostgresServer
from tests.servers import free_port
from tests.storage.common import bare_env
from tests.wire.conftest import REPO, Broker

confluent_kafka = pytest.importorskip("confluent_kafka")
AdminClient = pytest.importorskip("confluent_kafka.admin").AdminClient

WORDS = [b"word-%05d" % i for i in range(3000)]


def cli(
    redis_url: str, home: Path, *args: str, input: bytes | None = None, pg_dsn: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", redis_url]
    command += ["--pg-dsn", pg_dsn] if pg_dsn else []
    return subprocess.run(
        [*command, *args],
        cwd=REPO,
        input=input,
        capture_output=True,
        timeout=120,
        env=bare_env(home),
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def test_archive_command_and_consume_below_redis(
    redis_url: str, pg_dsn: str, tmp_path: Path
) -> None:
    """The first command by `python -m kafkaesque`, the others in turn by one CLI process
    (tests/cli_in_turn.py): each command its own Redis and archive connections."""
    with CommandsInTurn(bare_env(tmp_path), REPO) as turn:
        commands_below_redis(redis_url, pg_dsn, tmp_path, turn)


def commands_below_redis(redis_url: str, pg_dsn: str, tmp_path: Path, turn: CommandsInTurn) -> None:
    def run(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return turn.run("--redis-url", redis_url, "--pg-dsn", pg_dsn, *args, input=input)

    def unreachable_run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return turn.run("--redis-url", redis_url, "--pg-dsn", unreachable, *args)

    create = ("create", "words", "--page-size", "100", "--max-pages", "1")
    ok(cli(redis_url, tmp_path, *create, pg_dsn=pg_dsn))  # a CLI process of its own
    lines = b"\n".join(WORDS) + b"\n"
    ok(run("produce", "--batch-size", "100", "words", input=lines))
    archived = run("archive")
    # 30 pages of 100 records, each closed as it filled.
    assert archived.returncode == 0, archived.stderr.decode()
    assert "archived 3000 records (30 pages" in archived.stderr.decode()
    ok(run("produce", "--batch-size", "100", "words", input=b"late\n" * 200))
    ok(run("archive", "--once"))

    describe = ok(run("describe", "words"))
    log_start = int(describe.strip().splitlines()[-1].split()[1])
    assert log_start >= 3000  # max pages dropped what was archived
    # A group rewinds into the archive, not only to Redis' oldest offset.
    rewound = ok(run("group", "ge", "words", "--reset-offsets", "earliest", "--execute"))
    assert rewound.strip().splitlines()[-1].split() == ["ge", "words", "0", "0"]
    rewound = ok(run("group", "ge", "words", "--reset-offsets", "7", "--execute"))
    assert rewound.strip().splitlines()[-1].split() == ["ge", "words", "0", "7"]
    # consume reads the archive below Redis' oldest offset, in order, byte for byte.
    assert ok(run("consume", "words")).encode() == lines + b"late\n" * 200
    first = ok(run("consume", "words", "--partition", "0", "--offset", "5", "--max-records", "1"))
    assert first == "word-00005\n"
    records = [
        json.loads(line) for line in ok(run("consume", "words", "--format", "json")).splitlines()
    ]
    assert [r["offset"] for r in records] == list(range(3200))

    status = ok(run("archive", "--status"))
    assert "watermark: 3200" in status
    assert status.splitlines()[-1].split()[:4] == ["words", "0", "3200", "3200"]

    # An unreachable archive is an error, not a consume that quietly starts at Redis' start.
    unreachable = f"postgresql://kafkaesque@127.0.0.1:{free_port()}/kafkaesque"
    failed = unreachable_run("consume", "words")
    assert failed.returncode == 1 and failed.stdout == b""
    (message,) = failed.stderr.decode().strip().splitlines()  # one line, no warnings
    assert "the archive is unreachable" in message
    failed = unreachable_run("create", "typo")
    assert failed.returncode == 1 and b"unreachable" in failed.stderr
    assert ok(run("topics")) == "words\n"  # nothing was created

    # Redis loses its data: every command restores the topics from the archive first.
    redis.Redis.from_url(redis_url).flushall()
    assert ok(run("topics")) == "words\n"
    assert "end_offset" in ok(run("describe", "words"))
    ok(run("produce", "words", input=b"after\n"))
    assert ok(run("consume", "words")).encode() == lines + b"late\n" * 200 + b"after\n"

    # Deleting a topic deletes its archived records too; not at all if the archive is away.
    failed = unreachable_run("delete", "words")
    assert failed.returncode == 1 and b"words was not deleted" in failed.stderr
    assert ok(run("topics")) == "words\n"
    ok(run("delete", "words"))
    assert "words" not in ok(run("archive", "--status"))
    ok(run("create", "words"))
    assert ok(run("consume", "words")) == ""


def test_archive_command_errors(redis_url: str, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    result = cli(redis_url, tmp_path, "archive", "--pg-dsn", f"postgresql://u@127.0.0.1:{port}/x")
    assert result.returncode == 1
    assert result.stderr.decode().startswith("Error: cannot reach PostgreSQL")
    assert "Traceback" not in result.stderr.decode()
    result = cli(redis_url, tmp_path, "archive", "--interval", "0")
    assert result.returncode == 2 and "--interval" in result.stderr.decode()


def test_archive_status_before_the_first_pass_explains_itself(
    redis_url: str, pg_dsn: str, tmp_path: Path
) -> None:
    status = ok(cli(redis_url, tmp_path, "archive", "--status", pg_dsn=pg_dsn))
    assert status == "no archive yet: nothing was archived to this database\n"
    ok(cli(redis_url, tmp_path, "create", "quiet", pg_dsn=pg_dsn))
    archived = cli(redis_url, tmp_path, "archive", pg_dsn=pg_dsn)
    assert archived.returncode == 0
    assert archived.stderr.decode().startswith(
        "archived 0 records (0 pages, 0.0 MB) from 0 partitions in "
    )
    status = ok(cli(redis_url, tmp_path, "archive", "--status", pg_dsn=pg_dsn))
    assert status.splitlines()[0] == (
        "watermark: 0 (nothing archived yet: a running `kafkaesque serve` archives every "
        "10 s, `kafkaesque archive` once; only closed pages are archived)"
    )


@pytest.fixture
def archiving_broker(redis_url: str, pg_dsn: str, tmp_path: Path) -> Iterator[Callable[[], Broker]]:
    """Starts brokers archiving every 0.2 s to the test's database; all stopped after the
    test, with no Traceback logged."""
    started: list[Broker] = []

    def start_archiving() -> Broker:
        broker = Broker(
            redis_url, tmp_path / f"b{len(started)}", ["--archive-interval", "0.2"], pg_dsn
        )
        started.append(broker)
        return broker

    yield start_archiving
    for broker in started:
        broker.stop()
        assert "Traceback" not in broker.stderr(), broker.stderr()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, key=b"k%d" % i)
        if i % 500 == 499:
            producer.flush(30)
    assert producer.flush(30) == 0


def consume_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record of partition 0 from offset 0, by a real client."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.key(), message.value()))
        low, _ = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0))
        assert low == 0  # ListOffsets earliest: the archive's first offset
    finally:
        consumer.close()
    return got


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.1)


def redis_start(redis_url: str, topic: str) -> int:
    return int(redis.Redis.from_url(redis_url).hget(f"ks:{{{topic}:0}}:meta", "start") or 0)


def test_client_reads_archived_offsets_and_offsets_survive_a_flush(
    redis_url: str, pg_dsn: str, archiving_broker: Callable[[], Broker]
) -> None:
    broker = archiving_broker()
    ok_result = broker.cli("create", "t", "--page-size", "100", "--max-pages", "1")
    assert ok_result.returncode == 0
    produce(broker.bootstrap, "t", WORDS)
    # The broker's own archiver drains the closed pages; max pages then drops them.
    wait_until(lambda: redis_start(redis_url, "t") >= 2000, "Redis dropped archived pages")

    got = consume_all(broker.bootstrap, "t", len(WORDS))
    assert got == [(i, b"k%d" % i, w) for i, w in enumerate(WORDS)]

    # Redis loses everything: the next append restores the offsets from the archive and
    # continues after the archived ones, at a higher leader epoch; nothing is reused.
    through = archived_through(pg_dsn, "t")
    redis.Redis.from_url(redis_url).flushall()
    produce(broker.bootstrap, "t", [b"after"])
    meta = redis.Redis.from_url(redis_url).hgetall("ks:{t:0}:meta")
    assert int(meta[b"end"]) == through + 1
    assert int(meta[b"epoch"]) >= 1
    lines = broker.cli("consume", "t", "--format", "offset").stdout.decode().splitlines()
    assert lines[-1] == f"0\t{through}\tafter"
    assert len(lines) == through + 1  # the archived history, then the new record


def test_broker_serves_hot_data_while_postgres_is_down(
    redis_url: str, pg_dsn: str, pg_server: PostgresServer, archiving_broker: Callable[[], Broker]
) -> None:
    broker = archiving_broker()
    assert broker.cli("create", "hot", "--page-size", "100").returncode == 0
    produce(broker.bootstrap, "hot", WORDS[:500])
    pg_server.stop()
    try:
        produce(broker.bootstrap, "hot", WORDS[500:1000])
        got = consume_all(broker.bootstrap, "hot", 1000)
        assert [value for _, _, value in got] == WORDS[:1000]
        time.sleep(1)  # a few archiver passes fail meanwhile, and are retried
        assert broker.alive()
        assert "cannot reach PostgreSQL" in broker.stderr()
        # A topic cannot be deleted meanwhile: its archived records would stay behind.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        future = admin.delete_topics(["hot"], request_timeout=10)["hot"]
        with pytest.raises(confluent_kafka.KafkaException) as failed:
            future.result(timeout=30)
        assert failed.value.args[0].code() == confluent_kafka.KafkaError.KAFKA_STORAGE_ERROR
        assert b"hot" in broker.cli("topics").stdout
    finally:
        pg_server.start()
    # Back: the archiver catches up with what was produced meanwhile (all but the open
    # page, which stays in Redis until it fills or idles).
    wait_until(lambda: archived_through(pg_dsn, "hot") >= 900, "the archive caught up")


def archive_pass(redis_url: str, pg_dsn: str, topic: str) -> int:
    """One archiver pass as `archive --once --idle-close 0.001` makes it (open pages
    close), in this process rather than a CLI's; then ``archived_through``."""
    from storage_pg.archiver import Archiver
    from storage_pg.pool import create_pool

    async def run() -> None:
        log = open_log(redis_url)
        pool = await create_pool(pg_dsn, max_size=4)
        try:
            summary = await Archiver(log, pool, idle_close_ms=1).run_once()
            assert not summary.problems, summary.problems
        finally:
            await pool.close()
            await log.stores.close()

    asyncio.run(run())
    return archived_through(pg_dsn, topic)


def archived_through(pg_dsn: str, topic: str) -> int:
    """The next offset to archive of ``topic``'s partition 0, as `archive --status` shows
    it (read in this process rather than by a CLI)."""
    from storage_pg.cold import status
    from storage_pg.pool import create_pool

    async def run() -> int:
        pool = await create_pool(pg_dsn, max_size=1)
        try:
            state = await status(pool)
        finally:
            await pool.close()
        found = (p for p in state.partitions if (p.topic, p.partition) == (topic, 0))
        return next((p.archived_through for p in found), 0)

    return asyncio.run(run())
