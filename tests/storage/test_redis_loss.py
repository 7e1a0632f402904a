"""After Redis loses its data under a running, archiving broker: what Kafka clients see.

The scenario of issue 22: 1,050 records produced and archived (pages of 200), 30 more only
in Redis' open page; a consumer reads to offset 1079 and pauses; Redis is flushed; the
broker restores the partition from the archive at offset 1050 with a higher leader epoch,
and 200 new records get offsets 1050-1249; the consumer resumes. Offsets 1050-1079 now hold
other records than the ones it read, so it must be told (KIP-320), never go on at 1080.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from kafkaesque.clock import now_ms
from kafkaesque.records.batch import decode_batch, read_header, split_batches
from storage_pg.recovery import restore_epoch_floor
from tests.kafka_client import Connection
from tests.pg import PostgresServer
from tests.storage.test_served import (  # noqa: F401
    archive_pass,
    archived_through,
    archiving_broker,
    wait_until,
)
from tests.wire.common import stored_batches
from tests.wire.conftest import Broker, broker_of_its_own, check_log

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

ARCHIVED, UNARCHIVED, NEW = 1050, 30, 200
OLD = [b"old-%04d" % i for i in range(ARCHIVED + UNARCHIVED)]
FRESH = [b"new-%04d" % i for i in range(NEW)]
TIMEOUT = 60.0


@dataclass
class Seen:
    """What one consumer reported: records as (offset, value), and the errors and warnings
    that tell it about the truncation."""

    records: list[tuple[int, bytes]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)


class Capture(logging.Handler):
    """Warnings a client logs (its resets), into ``errors``."""

    def __init__(self, seen: Seen, logger: str) -> None:
        super().__init__(logging.INFO)
        self.seen, self.logger = seen, logging.getLogger(logger)
        self.level_before = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.logs.append(record.getMessage())

    def close(self) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)
        super().close()


class Confluent:
    """librdkafka: auto.offset.reset earliest, latest or error."""

    def __init__(self, bootstrap: str, topic: str, reset: str, seen: Seen) -> None:
        self.seen = seen
        librdkafka_log = logging.getLogger(f"librdkafka.{id(self)}")
        self.capture = Capture(seen, librdkafka_log.name)
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"g-{topic}",
                "enable.auto.commit": False,
                "auto.offset.reset": reset,
                "logger": librdkafka_log,
            }
        )
        self.consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])

    def poll(self) -> None:
        message = self.consumer.poll(0.2)
        if message is None:
            return
        if message.error() is not None:
            self.seen.errors.append(f"error: {message.error()}")
        else:
            self.seen.records.append((message.offset(), message.value()))

    def close(self) -> None:
        self.consumer.close()
        self.capture.close()


class KafkaPython:
    """kafka-python: auto_offset_reset earliest, latest or none (raises)."""

    def __init__(self, bootstrap: str, topic: str, reset: str, seen: Seen) -> None:
        self.seen = seen
        self.capture = Capture(seen, "kafka")
        self.consumer = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset=reset
        )
        tp = kafka.TopicPartition(topic, 0)
        self.consumer.assign([tp])
        self.consumer.seek(tp, 0)

    def poll(self) -> None:
        try:
            batches = self.consumer.poll(timeout_ms=200)
        except kafka.errors.KafkaError as exc:
            self.seen.errors.append(f"error: {exc!r}")
            return
        for records in batches.values():
            self.seen.records += [(r.offset, r.value) for r in records]

    def close(self) -> None:
        self.consumer.close()
        self.capture.close()


class AioKafka:
    """aiokafka: auto_offset_reset earliest, latest or none (raises)."""

    def __init__(self, bootstrap: str, topic: str, reset: str, seen: Seen) -> None:
        self.seen = seen
        self.capture = Capture(seen, "aiokafka")
        self.loop = asyncio.new_event_loop()
        tp = aiokafka.TopicPartition(topic, 0)

        async def start() -> None:
            self.consumer = aiokafka.AIOKafkaConsumer(
                bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset=reset
            )
            await self.consumer.start()
            self.consumer.assign([tp])
            self.consumer.seek(tp, 0)

        self.loop.run_until_complete(start())

    def poll(self) -> None:
        try:
            batches = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=200))
        except aiokafka.errors.KafkaError as exc:
            self.seen.errors.append(f"error: {exc!r}")
            return
        for records in batches.values():
            self.seen.records += [(r.offset, r.value) for r in records]

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()
        self.capture.close()


CLIENTS: dict[str, Callable[[str, str, str, Seen], Any]] = {
    "confluent": Confluent,
    "kafka-python": KafkaPython,
    "aiokafka": AioKafka,
}
# The "raise instead of reset" setting of each client.
ERROR_RESET = {"confluent": "error", "kafka-python": "none", "aiokafka": "none"}


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT) == 0


def poll_until(client: Any, seen: Seen, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done():
        assert time.monotonic() < deadline, f"gave up: {seen.errors[-5:]} {seen.records[-3:]}"
        client.poll()


@pytest.fixture(scope="module")
def loss_broker(
    pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Broker, str]]:
    """One archiving broker for the consumer tests, on a redis-server and an archive
    database of their own (each test its own topic, and Redis flushed under the broker
    again and again), and its archive's DSN. Its own archiver passes as it starts, then
    not for an hour: `archive_pass` archives, never skipping a partition for a pass of
    the broker's under way, and no pass of the broker's idle-closes a page."""
    options = ["--archive-interval", "3600"]
    with broker_of_its_own(tmp_path_factory.mktemp("loss"), pg_server, options) as both:
        yield both


@pytest.fixture
def before_the_loss(
    loss_broker: tuple[Broker, str], request: pytest.FixtureRequest
) -> tuple[Broker, str]:
    """The module's broker and a topic of this test's holding 1,050 archived records and
    30 only in Redis."""
    broker, dsn = loss_broker
    topic = "lost-" + request.node.callspec.id
    broker.cli("create", topic, "--page-size", "200")
    produce(broker.bootstrap, topic, OLD[:ARCHIVED])

    # Close and archive the half-full page too, so exactly 1,050 records are archived (a
    # pass skips the partition while another archiver is at it: again, then).
    def archive_all() -> bool:
        return archive_pass(broker.redis_url, dsn, topic) == ARCHIVED

    wait_until(archive_all, "1,050 records archived", TIMEOUT)
    produce(broker.bootstrap, topic, OLD[ARCHIVED:])
    return broker, topic


@pytest.mark.parametrize("client_name", list(CLIENTS))
@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_consumer_is_told_when_offsets_it_read_were_lost(
    before_the_loss: tuple[Broker, str], client_name: str, reset: str
) -> None:
    broker, topic = before_the_loss
    logged = broker.stderr_size()
    seen = Seen()
    setting = ERROR_RESET[client_name] if reset == "error" else reset
    client = CLIENTS[client_name](broker.bootstrap, topic, setting, seen)
    try:
        poll_until(client, seen, lambda: any(o == len(OLD) - 1 for o, _ in seen.records))
        assert seen.records == list(enumerate(OLD)) and seen.errors == []
        read_before, logs_before = len(seen.records), len(seen.logs)

        floor = restore_epoch_floor(now_ms())
        redis.Redis.from_url(broker.redis_url).flushall()
        produce(broker.bootstrap, topic, FRESH)
        # The restore raised the epoch (from 0 to above the minutes since 2020) and the new
        # records, in Redis from 1050 on, carry it.
        with Connection(broker.bootstrap) as conn:
            fresh = split_batches(conn.fetch(topic, 0, ARCHIVED).records)
        [epoch] = {read_header(b).partition_leader_epoch for b in fresh}
        assert epoch > floor
        batches = stored_batches(broker.bootstrap, topic, 0)
        stored = [(r.offset, r.value) for b in batches for r in decode_batch(b)]
        assert stored == list(enumerate(OLD[:ARCHIVED] + FRESH))

        expected = EXPECTED[client_name, reset]

        def told() -> list[str]:
            logs = seen.logs[logs_before:]
            return seen.errors + [m for m in logs if "runcat" in m or "reset" in m]

        if expected is None:  # an error, and nothing read past it
            poll_until(client, seen, lambda: seen.errors)
        else:
            last = ARCHIVED + NEW - 1 if expected < ARCHIVED + NEW else None
            poll_until(client, seen, lambda: seen.records[-1][0] == last if last else told())
            for _ in range(5):  # nothing more comes
                client.poll()
    finally:
        client.close()
    after = seen.records[read_before:]
    log_now = list(enumerate(OLD[:ARCHIVED] + FRESH))
    assert after == ([] if expected is None else log_now[expected:])
    if expected is None:
        assert any(phrase in seen.errors[0] for phrase in ERROR_TEXT), seen.errors
    elif expected < ARCHIVED:  # the reset is logged (the rewind to the divergence point is not)
        assert told(), seen.logs[logs_before:]
    check_log(broker, logged, topic)


# The first offset each consumer reads after the loss (None: it raises / reports an error).
# Clients that check leader epochs (librdkafka, kafka-python) go back to where the records
# they read diverge, 1050, whatever their reset policy, as Kafka's Java consumer does;
# aiokafka sends no epochs: the broker answers OFFSET_OUT_OF_RANGE once on its connection,
# so it resets by its policy.
EXPECTED = {
    ("confluent", "earliest"): ARCHIVED,
    ("confluent", "latest"): ARCHIVED,
    ("confluent", "error"): None,
    ("kafka-python", "earliest"): ARCHIVED,
    ("kafka-python", "latest"): ARCHIVED,
    ("kafka-python", "error"): None,
    ("aiokafka", "earliest"): 0,
    ("aiokafka", "latest"): ARCHIVED + NEW,
    ("aiokafka", "error"): None,
}
ERROR_TEXT = ("Partition log truncation detected", "LogTruncationError", "OffsetOutOfRangeError")


def test_idempotent_producer_goes_on_across_the_loss(
    redis_url: str,
    pg_dsn: str,
    archiving_broker: Callable[[], Broker],  # noqa: F811 (the fixture imported above)
) -> None:
    """An idempotent producer producing all along while Redis is flushed: the partition's
    producer state is gone, its next batches get UNKNOWN_PRODUCER_ID, and librdkafka
    recovers by itself (KIP-360): no fatal error, and every record it reports delivered is in
    the log exactly once, at the offset reported, except those delivered before the loss and
    not yet archived (Redis lost them; the report counts them)."""
    broker = archiving_broker()
    topic = "idem"
    broker.cli("create", topic, "--page-size", "200")
    delivered: dict[bytes, int] = {}
    failed: list[str] = []
    errors: list[Any] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            delivered[message.value()] = message.offset()

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "error_cb": errors.append,
        }
    )
    stop = threading.Event()

    def produce_all_along() -> None:
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic, b"r-%07d" % i, partition=0, on_delivery=on_delivery)
                i += 1
            except BufferError:  # the local queue is full: wait for deliveries
                pass
            producer.poll(0 if i % 100 else 0.01)

    thread = threading.Thread(target=produce_all_along)
    thread.start()
    try:
        # Some of it archived, some not: the loss takes those not archived yet.
        wait_until(lambda: archived_through(pg_dsn, topic) >= 2000, "2,000 archived", TIMEOUT)
        redis.Redis.from_url(redis_url).flushall()
        count_at_flush = len(delivered)
        wait_until(lambda: len(delivered) >= count_at_flush + 3000, "3,000 more", TIMEOUT)
    finally:
        stop.set()
        thread.join()
    assert producer.flush(TIMEOUT) == 0
    assert not [e for e in errors if e.fatal()], errors
    assert failed == []

    # Where the restore's epoch (the newest: epoch -> its first offset) began.
    epochs = redis.Redis.from_url(redis_url).hgetall(f"ks:{{{topic}:0}}:epochs")
    restored_at = int(epochs[max(epochs, key=int)])
    records = [
        (r.offset, r.value)
        for b in stored_batches(broker.bootstrap, topic, 0)
        for r in decode_batch(b)
    ]
    assert [o for o, _ in records] == list(range(len(records)))  # each offset once, no gap
    log = {value: offset for offset, value in records}
    assert len(log) == len(records)  # no record twice
    lost = {v: o for v, o in delivered.items() if log.get(v) != o}
    # Only records delivered before the loss at or past the archived end were lost.
    assert all(o >= restored_at for o in lost.values()), sorted(lost.values())[:5]
    assert all(v not in log for v in lost)
    assert set(log) <= set(delivered)  # nothing in the log the producer did not see delivered
    print(f"delivered {len(delivered)}, restored at {restored_at}, lost {len(lost)}")
