"""Redis Sentinel: ``redis+sentinel://`` URLs, following a failover, the failover epoch
bump, the archiver barrier, and what acks=all loses when the primary is killed
(docs/scale-out.md, section 4)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kafkaesque.cli import main
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import HotTierUnavailable
from kafkaesque.hot.connect import SentinelHotTier, parse_sentinel_url, redis_client
from kafkaesque.hot.failover import FailoverWatch
from kafkaesque.hot.log import Log
from kafkaesque.hot.notify import Notifier
from kafkaesque.records.batch import read_header
from kafkaesque.records.build import build_batch
from tests.cluster_servers import SentinelServers, wait_until
from tests.pg import PostgresServer
from tests.servers import free_port
from tests.wire.conftest import Broker

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)


def epoch_of(batch: bytes) -> int:
    return read_header(batch).partition_leader_epoch


def cli(url: str, *args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(main, ["--redis-url", url, *args], input=input)


def one_line_error(result: Result, code: int, fragment: str) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert fragment in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    return result.stderr


# -- URLs --------------------------------------------------------------------------------
def test_sentinel_url_forms() -> None:
    url = parse_sentinel_url(
        "redis+sentinel://h1:26380,h2/svc/3?password=p%40ss&sentinel_password=s"
    )
    assert url.sentinels == (("h1", 26380), ("h2", 26379))
    assert (url.service, url.db, url.password, url.sentinel_password) == ("svc", 3, "p@ss", "s")
    assert "p@ss" not in repr(url) and "s)" not in repr(url).replace("svc", "")
    for bad, why in [
        ("redis+sentinel://h1:26379", "no SERVICE"),
        ("redis+sentinel://h1:26379/", "no SERVICE"),
        ("redis+sentinel://h1:x/svc", "bad sentinel address"),
        ("redis+sentinel://h1:1/svc/db", "bad path"),
        ("redis+sentinel://h1:1/svc?pasword=secret", "unknown option 'pasword'"),
    ]:
        with pytest.raises(ValueError, match=why) as caught:
            parse_sentinel_url(bad)
        assert "secret" not in str(caught.value)


def test_sentinel_passwords_go_where_they_belong() -> None:
    async def scenario() -> None:
        client = redis_client("redis+sentinel://h:1/svc/2?password=a&sentinel_password=b", 8, "x")
        assert isinstance(client, SentinelHotTier)
        data = client.connection_pool.connection_kwargs
        assert (data["password"], data["db"]) == ("a", 2)
        [sentinel] = client.sentinels.sentinels
        assert sentinel.connection_pool.connection_kwargs["password"] == "b"
        assert client.connection_pool.max_connections == 8
        other = redis_client("redis+sentinel://h:1/svc", password="from-file")
        assert other.connection_pool.connection_kwargs["password"] == "from-file"
        assert other.sentinels.sentinels[0].connection_pool.connection_kwargs["password"] is None
        await client.aclose()
        await other.aclose()

    asyncio.run(scenario())


def test_cli_through_sentinel(sentinel: SentinelServers) -> None:
    assert cli(sentinel.url, "create", "via-sentinel").exit_code == 0
    produced = cli(sentinel.url, "produce", "via-sentinel", input=b"one\ntwo\n")
    assert produced.exit_code == 0, produced.output
    consumed = cli(sentinel.url, "consume", "via-sentinel")
    assert consumed.stdout_bytes == b"one\ntwo\n"
    # The data is on the primary the sentinel names.
    assert sentinel.client().master_for(sentinel.name).exists("ks:topics")


def test_bad_sentinel_urls_are_one_line(sentinel: SentinelServers) -> None:
    where = f"127.0.0.1:{sentinel.sentinel.port}"
    result = cli(f"redis+sentinel://{where}?password=hush", "topics")
    text = one_line_error(result, 2, "no SERVICE")
    assert "hush" not in text
    result = cli(f"redis+sentinel://{where}/nosuch?password=hush", "topics")
    text = one_line_error(result, 1, f"no sentinel gives a primary for 'nosuch': {where}")
    assert "monitors no 'nosuch'" in text and "hush" not in text
    port = free_port()
    result = cli(f"redis+sentinel://127.0.0.1:{port}/{sentinel.name}", "topics")
    one_line_error(result, 1, f"127.0.0.1:{port} (connection refused)")


def test_archiver_barrier_waits_for_the_replica(
    sentinel: SentinelServers, pg_server: PostgresServer
) -> None:
    """The archiver commits nothing its replicas have not acknowledged: with the replica
    stopped the chunk is rolled back; once it is back the same pages are archived."""
    from storage_pg.archiver import Archiver
    from storage_pg.pool import create_pool

    async def scenario(replica_pid: int) -> None:
        log = Log(redis_client(sentinel.url))
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("barrier", 1, page_size=2))
        await log.append("barrier", 0, [build_batch([b"x%d" % i]) for i in range(5)])
        assert await log.redis.execute_command("WAIT", 1, 4000) == 1  # the replica is in sync
        pool = await create_pool(dsn, max_size=2)
        archiver = Archiver(log, pool, idle_close_ms=None, replicas=1, replica_timeout=0.5)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            summary = await archiver.run_once()
        finally:
            os.kill(replica_pid, signal.SIGCONT)
        assert summary.rows == 0 and "durable (at 1 replica(s))" in summary.problems[0]
        archiver.replica_timeout = 4
        summary = await archiver.run_once()
        assert summary.rows == 4 and not summary.problems
        await pool.close()
        await log.redis.aclose()

    _host, port = sentinel.primary_address()
    # After the failover of an earlier test, the sentinel makes the old primary a replica
    # at its next look at it (up to 10 s).
    primary = next(p for p in sentinel.processes() if p.port == port)
    wait_until(
        lambda: primary.client().info("replication")["connected_slaves"] >= 1, 30, "a replica"
    )
    replica = next(p for p in sentinel.processes() if p.port not in (port, sentinel.sentinel.port))
    with pg_server.database() as dsn:
        asyncio.run(scenario(replica.proc.pid))


# -- following a failover, in process ----------------------------------------------------
def test_log_notifier_and_epochs_follow_a_failover(sentinel: SentinelServers) -> None:
    """Commands, the notifier's subscription and the epoch bump after SENTINEL FAILOVER:
    each partition gets one new epoch however many clients notice, starting at its end,
    before any append reaches the new primary."""

    async def scenario() -> None:
        redis = redis_client(sentinel.url)
        assert isinstance(redis, SentinelHotTier)
        log = Log(redis)
        await log.ensure_recovered()
        await log.create_topic(TopicConfig("follow", 2))
        await log.append("follow", 0, [build_batch([b"a", b"b"])])
        watches = [FailoverWatch(log), FailoverWatch(Log(redis_client(sentinel.url)))]
        assert [await w.check() for w in watches] == [0, 0]
        notifier = Notifier(redis, log.channel(""))
        notifier.start()
        await asyncio.sleep(0.3)  # subscribed
        old = sentinel.primary_address()
        await asyncio.to_thread(sentinel.failover)
        # A client whose first command is an append: the new epoch is in place before it.
        fresh = Log(redis_client(sentinel.url))
        appended = await fresh.append("follow", 0, [build_batch([b"c"])])
        assert appended.base_offsets == [2]
        read = await fresh.read("follow", 0, 2)
        assert read.leader_epoch == 1 and epoch_of(read.batches[0]) == 1
        assert await fresh.epoch_end_offset("follow", 0, 0) == (0, 2)
        # The others notice too (the watch asks the sentinel): nothing bumped twice.
        assert [await w.check() for w in watches] == [0, 0]
        assert await log.leader_epochs("follow", [0, 1]) == [1, 1]
        # Long polls wake up: the subscription moved to the new primary.
        waiter = notifier.waiter({"follow"})
        deadline = time.monotonic() + 10
        while not waiter.done() and time.monotonic() < deadline:
            await redis.publish(log.channel("follow"), "0:3")
            await asyncio.sleep(0.1)
        assert waiter.done(), "the notifier did not follow the failover"
        assert sentinel.primary_address() != old
        await notifier.stop()
        for client in (fresh, *(w.log for w in watches)):
            await client.redis.aclose()

    asyncio.run(scenario())


# -- a broker and a Kafka client while the primary is killed -----------------------------
def _produce_through_a_kill(
    tmp_path: Path, insync: int, lagging: bool, alone: float = 0
) -> tuple[int, int, int, int]:
    """Produce (idempotent, acks=all) with a consumer following, SIGKILL the primary
    midway (``lagging``: after a second in which the replica was stopped and its link
    cut); the promoted replica gets a replica of its own ``alone`` seconds later. Returns
    (acknowledged, acknowledged but lost, lost ones the follower had read, duplicates).
    A producer that fails (its acknowledged records are gone) is replaced, as an
    application would. The consumer that followed throughout ends with exactly the
    records a fresh one reads: no offset it read holds another record after the
    failover."""
    servers = SentinelServers(tmp_path / "sentinel")
    broker = Broker(servers.url, tmp_path / "broker", ["--min-insync-replicas", str(insync)])
    topic = "failover"
    producers: list[Producer] = []
    try:
        broker.cli("create", topic)
        common = {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"}
        fatal: list[str] = []

        def new_producer() -> Producer:
            def error(err: KafkaError) -> None:
                if err.fatal():
                    fatal.append(err.str())

            settings = {"enable.idempotence": True, "acks": "all", "linger.ms": 2}
            if alone:  # records time out while no replica is there: the producer bumps
                settings["message.timeout.ms"] = int(alone * 1000 / 2)  # its epoch
            return Producer(common | settings | {"error_cb": error})

        producer = new_producer()
        producers.append(producer)
        consumer = Consumer(
            common | {"group.id": "follower", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
        )
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        acked: list[bytes] = []
        seen: dict[int, bytes] = {}  # by offset, as the follower read them last
        ever_seen: set[bytes] = set()

        def delivered(err: object, message: object) -> None:
            if err is None:
                acked.append(message.value())  # type: ignore[attr-defined]

        def follow(timeout: float = 0) -> int:
            got = 0
            for message in consumer.consume(1000, timeout):
                if message.error() is None:
                    seen[message.offset()] = message.value()
                    ever_seen.add(message.value())
                    got += 1
            return got

        killed_at = promoted_at = replaced_at = ready_at = None
        stopped = False
        old = servers.primary_address()
        i = 0
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            # Alone: records are sent for 1.5 s after the promotion, then none until the
            # new replica is in sync; each of them times out while the primary is alone
            # (the producer bumps its epoch, sending again those not timed out yet), and
            # none is about to time out when appends resume.
            quiet = (
                alone
                and promoted_at is not None
                and elapsed > promoted_at + 1.5
                and (ready_at is None or elapsed < ready_at + 0.5)
            )
            try:
                if not quiet:
                    producer.produce(topic, b"%d" % i, on_delivery=delivered)
            except KafkaException as exc:  # fatal: acknowledged records were lost
                assert exc.args[0].code() == KafkaError._FATAL, exc
                try:
                    producer.poll(0)  # delivery reports, and the fatal error's reason
                except KafkaException as why:
                    fatal.append(why.args[0].str())
                producer = new_producer()  # as an application would
                producers.append(producer)
                continue
            producer.poll(0)
            follow()
            i += 1
            time.sleep(0.002)
            elapsed = time.monotonic() - started
            if lagging and not stopped and elapsed > 1:
                stopped = True
                os.kill(servers.replica.proc.pid, signal.SIGSTOP)
                # Cut off: what the primary writes from now on never reaches it (what it
                # had sent is in the replica's socket buffer, read after SIGCONT).
                servers.primary.client().execute_command("CLIENT", "KILL", "TYPE", "replica")
            if killed_at is None and elapsed > 2:
                if alone:  # nothing in flight at the kill: only the lone primary is tested
                    assert producer.flush(10) == 0
                killed_at = elapsed
                servers.primary.kill()
                if lagging:
                    os.kill(servers.replica.proc.pid, signal.SIGCONT)
            if promoted_at is None and killed_at is not None and servers.primary_address() != old:
                promoted_at = elapsed
            if promoted_at is not None and replaced_at is None and elapsed > promoted_at + alone:
                # A new replica, so that WAIT 1 can be met again.
                replaced_at = elapsed
                servers.add_replica(tmp_path / "replica2")
            if replaced_at is not None and ready_at is None:
                link = servers.replica.client().info("replication").get("slave0", {})
                ready_at = elapsed if link.get("state") == "online" else None
            if ready_at is not None and elapsed > ready_at + 3:
                break
            assert elapsed < 30 + alone, "no failover"
        assert producer.flush(60) == 0
        for old_producer in producers[:-1]:
            old_producer.flush(0)
        fresh = Consumer(common | {"group.id": "fresh", "enable.auto.commit": False})
        low, high = fresh.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        deadline = time.monotonic() + 30
        while (not seen or max(seen) < high - 1) and time.monotonic() < deadline:
            follow(0.5)
        fresh.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        final: dict[int, bytes] = {}
        while len(final) < high - low and time.monotonic() < deadline:
            for message in fresh.consume(1000, 0.5):
                assert message.error() is None, message.error()
                final[message.offset()] = message.value()
        consumer.close()
        fresh.close()
        assert len(final) == high - low
        # No offset the follower read holds another record now.
        assert {o: v for o, v in seen.items() if o in final} == {
            o: final[o] for o in seen if o in final
        }
        values = list(final.values())
        lost = set(acked) - set(values)
        print(f"fatal producer errors: {fatal}")
        return len(acked), len(lost), len(lost & ever_seen), len(values) - len(set(values))
    finally:
        # A producer that met a fatal error is never freed: closed here, or its threads
        # would go on connecting to this broker's port after it stopped.
        for each in producers:
            with contextlib.suppress(KafkaException):
                each.purge()
                each.close()
        broker.stop()
        servers.stop()
        assert "Traceback" not in broker.stderr(), broker.stderr()


@pytest.mark.parametrize(
    ("insync", "lagging", "alone"),
    [(1, True, 0), (2, True, 0), (2, False, 0), (2, False, 4)],
    ids=["wait-off-lagging", "wait-on-lagging", "wait-on-in-sync", "wait-on-no-replica-for-4s"],
)
def test_acknowledged_records_through_a_killed_primary(
    tmp_path: Path, insync: int, lagging: bool, alone: float
) -> None:
    """With WAIT (--min-insync-replicas 2) nothing acknowledged is lost, and nothing is
    written twice: also while the promoted primary has no replica for longer than the
    producer's message timeout, so that it gives up on records and bumps its epoch
    (appends are refused before they are made, NOT_ENOUGH_REPLICAS). Without WAIT, what
    the replica had not received is lost: here the second it was cut off (without a lag,
    none was lost in the runs made while writing this: the replica had it all)."""
    acked, lost, read, duplicates = _produce_through_a_kill(tmp_path, insync, lagging, alone)
    print(f"min-insync-replicas {insync}, lagging {lagging}: {acked} acknowledged, {lost} lost")
    assert acked > 100
    if insync == 2:
        assert lost == 0 and duplicates == 0
    elif lagging:
        # Lost, and read before: the follower truncated (new epoch) and read the records
        # now at those offsets, as the check in _produce_through_a_kill shows.
        assert lost > 0 and read > 0


def test_unreachable_sentinel_is_retriable() -> None:
    async def scenario() -> None:
        redis = redis_client(f"redis+sentinel://127.0.0.1:{free_port()}/svc")
        with pytest.raises(HotTierUnavailable, match="connection refused"):
            await redis.get("x")
        await redis.aclose()

    asyncio.run(scenario())
