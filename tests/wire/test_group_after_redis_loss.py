"""After Redis loses its data, a consumer in a group (subscribe) is told as one with
assign() is: it never reads again, silently, an offset that now holds another record.

A running, archiving broker; 1,050 records archived, the next ones only in Redis; a group
consumer reads them and commits (its position, with the leader epoch of the records:
KIP-320), and the archiver copies the commit. Redis is flushed: the broker restores the
partition at 1,050 with a higher leader epoch, and the group with its committed offset; new
records take offsets 1,050 on. Either the consumer goes on across the loss (its group comes
back with its members: it is fenced by the new epoch and checks its position, rather than
join again and start over from a commit that lags it), or it had stopped and a new member
of its group starts. Each client, set to raise instead of resetting, must
report an error or never return a record at an offset its group returned before with
another value. Restoring the committed offset set back to the restored log end failed
every "restarted" case: each client read 1,050 on again without a word; restoring the
group without its members fails "lagging" whenever the member's heartbeat reaches the
empty group before its fetch is fenced (it starts again at 1,040).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import asyncpg
import pytest
import redis

from tests.pg import PostgresServer
from tests.storage.test_served import archive_pass, wait_until
from tests.wire.common import FAST_GROUP_ARGS
from tests.wire.conftest import Broker, broker_of_its_own, check_log

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

ARCHIVED = 1050
TIMEOUT = 60.0
# Members heartbeat every HEARTBEAT_MS (all in threads of their own, aiokafka too) within
# SESSION_MS sessions. A member that left before the loss comes back with its group, so a
# new member's join waits until its session ends.
SESSION_MS, HEARTBEAT_MS = 3000, 200


class Seen:
    """What one consumer returned, (offset, value) in order, and the errors it reported."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes]] = []
        self.errors: list[str] = []

    def changed(self) -> list[int]:
        """Offsets returned twice with different values."""
        first: dict[int, bytes] = {}
        changed = []
        for offset, value in self.records:
            if first.setdefault(offset, value) != value:
                changed.append(offset)
        return changed


class Confluent:
    """librdkafka in a group: subscribe, auto.offset.reset=error, commits synchronously."""

    def __init__(self, bootstrap: str, topic: str, group: str, seen: Seen) -> None:
        self.seen = seen
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "logger": logging.getLogger("librdkafka"),
            }
        )
        self.consumer.subscribe([topic])

    def poll(self) -> None:
        message = self.consumer.poll(0.2)
        if message is None:
            return
        if message.error() is not None:
            self.seen.errors.append(f"error: {message.error()}")
        else:
            self.seen.records.append((message.offset(), message.value()))

    def commit(self) -> None:
        self.consumer.commit(asynchronous=False)

    def pause(self, paused: bool) -> None:
        """Stop or go on fetching (heartbeats go on)."""
        switch = self.consumer.pause if paused else self.consumer.resume
        switch(self.consumer.assignment())

    def close(self) -> None:
        self.consumer.close()


class KafkaPython:
    """kafka-python in a group: subscribe, auto_offset_reset=none, commits synchronously."""

    def __init__(self, bootstrap: str, topic: str, group: str, seen: Seen) -> None:
        self.seen = seen
        self.consumer = kafka.KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="none",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )

    def poll(self) -> None:
        try:
            batches = self.consumer.poll(timeout_ms=200)
        except kafka.errors.KafkaError as exc:
            self.seen.errors.append(f"error: {exc!r}")
            return
        for records in batches.values():
            self.seen.records += [(r.offset, r.value) for r in records]

    def commit(self) -> None:
        self.consumer.commit()

    def pause(self, paused: bool) -> None:
        switch = self.consumer.pause if paused else self.consumer.resume
        switch(*self.consumer.assignment())

    def close(self) -> None:
        self.consumer.close()


class AioKafka:
    """aiokafka in a group: subscribe, auto_offset_reset=none, commits synchronously. Its
    event loop runs in a thread of its own, as in an application, so that it heartbeats
    between polls too."""

    def __init__(self, bootstrap: str, topic: str, group: str, seen: Seen) -> None:
        self.seen = seen
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> Any:
            consumer = aiokafka.AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="none",
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
            )
            await consumer.start()
            return consumer

        self.consumer = self.run(start())

    def run(self, step: Coroutine[Any, Any, Any]) -> Any:
        """Run ``step`` on the client's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(step, self.loop).result(TIMEOUT)

    def poll(self) -> None:
        try:
            batches = self.run(self.consumer.getmany(timeout_ms=200))
        except aiokafka.errors.KafkaError as exc:
            self.seen.errors.append(f"error: {exc!r}")
            return
        for records in batches.values():
            self.seen.records += [(r.offset, r.value) for r in records]

    def commit(self) -> None:
        self.run(self.consumer.commit())

    def pause(self, paused: bool) -> None:
        async def switch() -> None:  # aiokafka wants its loop running
            change = self.consumer.pause if paused else self.consumer.resume
            change(*self.consumer.assignment())

        self.run(switch())

    def close(self) -> None:
        try:
            self.run(self.consumer.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()


CLIENTS: dict[str, Callable[[str, str, str, Seen], Any]] = {
    "confluent": Confluent,
    "kafka-python": KafkaPython,
    "aiokafka": AioKafka,
}


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT) == 0


def poll_until(client: Any, seen: Seen, done: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        client.poll()
    return True


def start_at_zero(bootstrap: str, topic: str, group: str) -> None:
    """Commit offset 0 for the group (standalone), where its members start."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()


def archived_commit(pg_dsn: str, group: str) -> int | None:
    """The group's committed offset of partition 0 in the archive."""

    async def query() -> int | None:
        conn = await asyncpg.connect(pg_dsn)
        try:
            if await conn.fetchval("SELECT to_regclass('group_offset')") is None:
                return None
            return await conn.fetchval(
                'SELECT "offset" FROM group_offset WHERE group_id = $1', group.encode()
            )
        finally:
            await conn.close()

    return asyncio.run(query())


# (mode, new records after the loss): "running", the consumer goes on across the loss;
# "lagging", the same with its last commit (1,040) below the restored end: it read 60 more
# records than it committed, 50 of them lost; "restarted", it stopped and a new member of
# its group starts after the loss. 10 new records end below the committed offset (1,100),
# 200 above it.
SCENARIOS = [("running", 200), ("lagging", 200), ("restarted", 10), ("restarted", 200)]


@pytest.fixture(scope="module")
def loss_broker(
    pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Broker, str]]:
    """One broker archiving every 0.2 s, whose groups form in 0.2 s (not 3), on a
    redis-server and an archive database of their own: each test its own topic and group,
    and Redis flushed under the broker again and again. With its archive's DSN."""
    options = ["--archive-interval", "0.2", *FAST_GROUP_ARGS]
    with broker_of_its_own(tmp_path_factory.mktemp("loss"), pg_server, options) as both:
        yield both


@pytest.mark.parametrize(("mode", "fresh"), SCENARIOS, ids=[f"{m}-{n}" for m, n in SCENARIOS])
@pytest.mark.parametrize("client_name", list(CLIENTS))
def test_group_consumer_is_told_when_offsets_it_read_were_lost(
    loss_broker: tuple[Broker, str],
    request: pytest.FixtureRequest,
    client_name: str,
    mode: str,
    fresh: int,
) -> None:
    broker, pg_dsn = loss_broker
    redis_url, logged = broker.redis_url, broker.stderr_size()
    case = request.node.callspec.id
    topic, group = f"lost-{case}", f"g-{case}"
    broker.cli("create", topic, "--page-size", "200")
    old = [b"old-%04d" % i for i in range(ARCHIVED + 50)]
    produce(broker.bootstrap, topic, old[:1040])

    def archive_all() -> bool:
        return archive_pass(redis_url, pg_dsn, topic) == ARCHIVED

    start_at_zero(broker.bootstrap, topic, group)  # the clients raise rather than reset
    seen = Seen()
    client: Any = CLIENTS[client_name](broker.bootstrap, topic, group, seen)
    try:
        assert poll_until(client, seen, lambda: len(seen.records) == 1040)
        client.commit()  # 1040, with the records' leader epoch
        produce(broker.bootstrap, topic, old[1040:ARCHIVED])
        wait_until(archive_all, "1,050 records archived", TIMEOUT)
        produce(broker.bootstrap, topic, old[ARCHIVED:])  # only in Redis
        assert poll_until(client, seen, lambda: len(seen.records) == len(old))
        assert seen.records == list(enumerate(old)) and seen.errors == []
        if mode != "lagging":
            client.commit()  # 1100: all it read
        committed = 1040 if mode == "lagging" else len(old)
        wait_until(lambda: archived_commit(pg_dsn, group) == committed, "commit archived", TIMEOUT)
        if mode == "restarted":
            client.close()
            client = None

        if mode == "lagging":
            # Its heartbeats, not its fetches, meet the restored group first: a group
            # restored empty makes it join again and start over at 1,040.
            client.pause(True)
        redis.Redis.from_url(redis_url).flushall()
        produce(broker.bootstrap, topic, [b"new-%04d" % i for i in range(fresh)])
        if client is None:  # a new member of the group
            client = CLIENTS[client_name](broker.bootstrap, topic, group, seen)
        else:
            # Heartbeats, 6 at least.
            poll_until(client, seen, lambda: False, timeout=6 * HEARTBEAT_MS / 1000)
            client.pause(False)
        last = ARCHIVED + fresh - 1
        poll_until(
            client,
            seen,
            lambda: bool(seen.errors) or any(o == last for o, _ in seen.records[len(old) :]),
            timeout=30,
        )
        for _ in range(10):  # whatever else comes
            client.poll()
    finally:
        if client is not None:
            client.close()
    changed = seen.changed()
    after = seen.records[len(old) :]
    print(f"{client_name} {mode} {fresh}: read {after[:2]}..{after[-1:]}; told {seen.errors[:1]}")
    assert seen.errors or not changed, f"read again, silently, changed offsets {changed[:5]}.."
    check_log(broker, logged, case)
