"""The workload: real Kafka clients (confluent-kafka) sending unique values and polling
them while the nemesis works, every op logged into a History (tests/jepsen/history.py).

Workers are threads, each acting as one Jepsen process at a time: it runs one op, logs
its invocation and completion, and when an op ends ``info`` (unknown outcome) it throws
its client away and continues as a new process with a new client.

- send workers: an idempotent producer (acks=all), 1-3 sends per op to random
  partitions, then a flush: ``ok`` with each send's offset, ``info`` on any error.
- txn workers: a transactional producer and a read_committed consumer of every
  partition; an op polls (half the time) and sends 1-3 values in one transaction, then
  commits (``ok``) or aborts on purpose (``fail``, after its records reached the log).
- assign consumers: now and then assign a random set of partitions (from the earliest
  offset or where they were), logged as ``assign``, then poll.
- subscribe consumers: one consumer group; each rebalance is logged as ``assign``.

At the end, ``final_read`` reads every partition from the earliest offset to its end
through a fresh consumer (offsets below Redis' first come from the PostgreSQL archive).
"""

from __future__ import annotations

import itertools
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from tests.jepsen.history import FAIL, INFO, OK, History, Op

TOPIC = "jepsen"
GROUP = "jepsen"
# librdkafka's own log (timeouts, reconnects: expected under faults) goes here; the runner
# sends it to clients.log.
CLIENT_LOG = logging.getLogger("kafkaesque.jepsen.clients")
# Outside a run (clients that outlive it, still reconnecting while they are freed) the
# lines go nowhere, rather than to stderr through logging's last resort.
CLIENT_LOG.addHandler(logging.NullHandler())
CLIENT_LOG.propagate = False
LOG = logging.getLogger("kafkaesque.jepsen")


@dataclass(frozen=True)
class WorkloadSettings:
    partitions: int = 4
    senders: int = 3
    txn_workers: int = 1
    assign_consumers: int = 2
    subscribe_consumers: int = 1
    max_sends: int = 3  # sends per op, 1..max
    abort_ratio: float = 0.25  # of transactions, aborted on purpose
    op_interval: float = 0.01  # pause between one worker's ops: keep the CPU modest
    request_timeout_ms: int = 3000
    message_timeout_ms: int = 30000  # a send's outcome is unknown after this
    txn_timeout_ms: int = 10000
    poll_seconds: float = 0.3
    # librdkafka debug contexts for the consumers (e.g. "fetch"), logged to clients.log:
    # what a consumer fetched and dropped, to tell a broker's answer from the client's doing.
    client_debug: str = ""


def client_config(bootstrap: str, settings: WorkloadSettings) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOG,
        "broker.address.family": "v4",
        "socket.timeout.ms": settings.request_timeout_ms,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 5000,
    }


class Ids:
    """Process numbers and unique values shared by every worker."""

    def __init__(self) -> None:
        self._processes = itertools.count()
        self._values = itertools.count()
        self._lock = threading.Lock()

    def process(self) -> int:
        with self._lock:
            return next(self._processes)

    def value(self) -> int:
        with self._lock:
            return next(self._values)


class Worker(threading.Thread):
    """One slot of the workload; ``self.process`` is the Jepsen process it acts as now."""

    kind = "worker"

    def __init__(
        self,
        slot: int,
        bootstrap: str,
        history: History,
        ids: Ids,
        settings: WorkloadSettings,
        seed: int,
    ) -> None:
        super().__init__(name=f"{self.kind}-{slot}", daemon=True)
        self.slot = slot
        self.bootstrap = bootstrap
        self.history = history
        self.ids = ids
        self.settings = settings
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.process = ids.process()
        self.crashes = 0
        self.errors: list[str] = []

    def crashed(self) -> None:
        """The op ended unknown: this process is done, a new one takes over."""
        self.crashes += 1
        self.process = self.ids.process()

    def run(self) -> None:
        try:
            self.setup()
            while not self.stop.is_set():
                self.step()
                time.sleep(self.settings.op_interval)
        except Exception as exc:  # a bug in the harness: recorded, shown in the result
            LOG.exception("%s died", self.name)
            self.errors.append(f"{self.name}: {exc!r}")
        finally:
            self.teardown()

    def setup(self) -> None:
        pass

    def step(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        pass


class SendWorker(Worker):
    kind = "sender"

    def setup(self) -> None:
        self.producer: Producer | None = None
        self.fatal = threading.Event()

    def new_producer(self) -> Producer:
        self.fatal.clear()

        def error(err: KafkaError) -> None:
            if err.fatal():
                self.fatal.set()

        config = client_config(self.bootstrap, self.settings) | {
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "request.timeout.ms": self.settings.request_timeout_ms,
            "message.timeout.ms": self.settings.message_timeout_ms,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "error_cb": error,
        }
        return Producer(config)

    def step(self) -> None:
        if self.producer is None:
            self.producer = self.new_producer()
        sends = [
            (self.rng.randrange(self.settings.partitions), self.ids.value())
            for _ in range(self.rng.randint(1, self.settings.max_sends))
        ]
        invocation = self.history.invoke(self.process, "send", [["send", k, v] for k, v in sends])
        results, error = produce_all(self.producer, sends, self.settings.message_timeout_ms)
        if error is None and not self.fatal.is_set():
            self.history.complete(invocation, OK, [["send", k, [results[v], v]] for k, v in sends])
            return
        self.history.complete(invocation, INFO, error=error or "fatal producer error")
        discard(self.producer)
        self.producer = None
        self.crashed()

    def teardown(self) -> None:
        if self.producer is not None:
            discard(self.producer)


def produce_all(
    producer: Producer, sends: list[tuple[int, int]], timeout_ms: int
) -> tuple[dict[int, int | None], str | None]:
    """Produce each (partition, value), wait for every delivery report: ({value: offset
    or None}, the first error or None)."""
    results: dict[int, int | None] = {}
    errors: list[str] = []

    def delivered(err: KafkaError | None, message: Message) -> None:
        value = int(message.value())
        if err is None:
            offset = message.offset()
            results[value] = offset if offset is not None and offset >= 0 else None
        else:
            errors.append(err.name())

    try:
        for partition, value in sends:
            producer.produce(TOPIC, value=b"%d" % value, partition=partition, on_delivery=delivered)
    except (KafkaException, BufferError) as exc:
        return results, f"produce: {exc}"
    try:
        left = producer.flush(timeout_ms / 1000 + 5)
    except:  # noqa: E722
        # A transactional producer's fatal error: confluent-kafka 2.16 raises it as a
        # KafkaError, which is no exception class, so only a bare except catches it.
        return results, f"flush: {sys.exc_info()[1]}"
    if errors:
        return results, errors[0]
    if left or len(results) < len(sends):
        return results, "no delivery report"
    return results, None


def discard(producer: Producer) -> None:
    """Drop a producer whose state is unknown: queued sends are purged, in-flight ones
    may still land (their ops are ``info``)."""
    try:
        producer.purge()
        producer.flush(1)
    except (KafkaException, RuntimeError):
        pass


def read_messages(messages: list[Message]) -> tuple[dict[int, list[list[int]]], list[str]]:
    """A poll's records by partition, in order, and the errors it returned."""
    reads: dict[int, list[list[int]]] = {}
    errors = []
    for message in messages:
        if message.error() is not None:
            errors.append(message.error().name())
            continue
        try:
            value = int(message.value())
        except (TypeError, ValueError):
            errors.append(f"foreign record at {message.partition()}/{message.offset()}")
            continue
        reads.setdefault(message.partition(), []).append([message.offset(), value])
    return reads, errors


def consumer_config(bootstrap: str, settings: WorkloadSettings, group: str) -> dict[str, Any]:
    return (
        client_config(bootstrap, settings)
        | {
            "group.id": group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
        }
        | ({"debug": settings.client_debug} if settings.client_debug else {})
    )


class TxnWorker(Worker):
    kind = "txn"

    def setup(self) -> None:
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        # One transactional id per slot: a new producer fences the old one and aborts its
        # open transaction, instead of leaving it to block read_committed readers.
        self.txn_id = f"jepsen-txn-{self.slot}"
        self.init_retries = 0

    def start_clients(self) -> None:
        config = client_config(self.bootstrap, self.settings) | {
            "transactional.id": self.txn_id,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
            "request.timeout.ms": self.settings.request_timeout_ms,
            # librdkafka's rule: a record times out no later than its transaction.
            "message.timeout.ms": self.settings.txn_timeout_ms,
            "transaction.timeout.ms": self.settings.txn_timeout_ms,
        }
        producer = Producer(config)
        producer.init_transactions(60)
        self.producer = producer
        if self.consumer is None:
            group = f"jepsen-txn-reader-{self.slot}"
            self.consumer = Consumer(consumer_config(self.bootstrap, self.settings, group))
        self.reassign()

    def reassign(self) -> None:
        """Read every partition from its end; logged so the checker forgets positions."""
        assert self.consumer is not None
        keys = list(range(self.settings.partitions))
        invocation = self.history.invoke(self.process, "assign", keys)
        self.consumer.assign([TopicPartition(TOPIC, k, OFFSET_END) for k in keys])
        self.history.complete(invocation, OK)

    def step(self) -> None:
        if self.producer is None:
            try:
                self.start_clients()
            except KafkaException as exc:
                # The coordinator is away (a fault): not the harness' error, try again.
                LOG.info("%s: init_transactions: %s", self.name, exc)
                self.init_retries += 1
                self.producer = None
                time.sleep(1)
                return
        assert self.producer is not None and self.consumer is not None
        poll = self.rng.random() < 0.5
        sends = [
            (self.rng.randrange(self.settings.partitions), self.ids.value())
            for _ in range(self.rng.randint(1, self.settings.max_sends))
        ]
        invoked: list[list[Any]] = [["poll"]] if poll else []
        invoked += [["send", k, v] for k, v in sends]
        invocation = self.history.invoke(self.process, "txn", invoked)
        done: list[list[Any]] = []
        try:
            self.producer.begin_transaction()
            if poll:
                messages = self.consumer.consume(100, self.settings.poll_seconds)
                reads, _ = read_messages(messages)
                done.append(["poll", reads])
            results, error = produce_all(self.producer, sends, self.settings.txn_timeout_ms)
            if error is not None:
                # Most delivery errors inside a transaction are abortable: then the
                # abort settles it (fail), else the outcome is unknown (info).
                self.abort_or_crash(invocation, error)
                return
            done += [["send", k, [results.get(v), v]] for k, v in sends]
            if self.rng.random() < self.settings.abort_ratio:
                self.producer.abort_transaction(30)
                self.history.complete(invocation, FAIL, done, error="aborted on purpose")
                self.reassign()  # its polls did not happen: the consumer moved on anyway
                return
            self.producer.commit_transaction(30)
        except KafkaException as exc:
            self.failed(invocation, exc)
            return
        self.history.complete(invocation, OK, done)

    def failed(self, invocation: Op, exc: KafkaException) -> None:
        """A transaction that raised: aborted if the client says it must be and can
        still abort it (``fail``), else unknown (``info``) and the clients are replaced."""
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        text = str(error or exc)
        if error is not None and error.txn_requires_abort():
            self.abort_or_crash(invocation, text)
        else:
            self.crash(invocation, text)

    def abort_or_crash(self, invocation: Op, text: str) -> None:
        assert self.producer is not None
        try:
            self.producer.abort_transaction(30)
        except KafkaException as exc:
            self.crash(invocation, f"{text}; abort: {exc}")
        else:
            self.history.complete(invocation, FAIL, error=text)
            self.reassign()

    def crash(self, invocation: Op, text: str) -> None:
        assert self.producer is not None
        self.history.complete(invocation, INFO, error=text)
        discard(self.producer)
        self.producer = None
        self.crashed()

    def teardown(self) -> None:
        if self.producer is not None:
            discard(self.producer)
        # A last producer under the same id ends (aborts) a transaction left open.
        try:
            config = client_config(self.bootstrap, self.settings) | {
                "transactional.id": self.txn_id,
                "transaction.timeout.ms": self.settings.txn_timeout_ms,
            }
            Producer(config).init_transactions(30)
        except KafkaException as exc:
            self.errors.append(f"fencing at the end: {exc}")
        if self.consumer is not None:
            self.consumer.close()


class AssignConsumer(Worker):
    kind = "assign"

    def setup(self) -> None:
        self.consumer: Consumer | None = None
        self.positions: dict[int, int] = {}  # next offset per partition, as read
        self.until_reassign = 0

    def reassign(self) -> None:
        assert self.consumer is not None
        keys = sorted(
            self.rng.sample(
                range(self.settings.partitions), self.rng.randint(1, self.settings.partitions)
            )
        )
        invocation = self.history.invoke(self.process, "assign", keys)
        start = [
            TopicPartition(
                TOPIC,
                k,
                self.positions[k]
                if k in self.positions and self.rng.random() < 0.7
                else OFFSET_BEGINNING,
            )
            for k in keys
        ]
        self.consumer.assign(start)
        self.history.complete(invocation, OK)
        self.until_reassign = self.rng.randint(5, 50)

    def step(self) -> None:
        if self.consumer is None:
            group = f"jepsen-assign-{self.slot}"
            self.consumer = Consumer(consumer_config(self.bootstrap, self.settings, group))
            self.until_reassign = 0
        if self.until_reassign <= 0:
            self.reassign()
        self.until_reassign -= 1
        invocation = self.history.invoke(self.process, "poll", [["poll"]])
        try:
            messages = self.consumer.consume(200, self.settings.poll_seconds)
        except KafkaException as exc:
            self.history.complete(invocation, INFO, error=str(exc))
            self.consumer.close()
            self.consumer = None
            self.crashed()
            return
        reads, errors = read_messages(messages)
        for k, records in reads.items():
            self.positions[k] = records[-1][0] + 1
        self.history.complete(
            invocation, OK, [["poll", reads]], error=",".join(errors) if errors else None
        )

    def teardown(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


class SubscribeConsumer(Worker):
    kind = "subscribe"

    def setup(self) -> None:
        self.consumer: Consumer | None = None

    def rebalanced(self, what: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def callback(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            # Inside the poll: logged as an assign of this process, so that the checker
            # forgets where it was (it resumes from the group's committed offsets).
            keys = sorted(tp.partition for tp in partitions)
            invocation = self.history.invoke(self.process, "assign", {what: keys})
            self.history.complete(invocation, OK)

        return callback

    def step(self) -> None:
        if self.consumer is None:
            config = consumer_config(self.bootstrap, self.settings, GROUP) | {
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 500,
            }
            self.consumer = Consumer(config)
            invocation = self.history.invoke(self.process, "subscribe", [TOPIC])
            self.consumer.subscribe(
                [TOPIC], on_assign=self.rebalanced("assigned"), on_revoke=self.rebalanced("revoked")
            )
            self.history.complete(invocation, OK)
        invocation = self.history.invoke(self.process, "poll", [["poll"]])
        try:
            messages = self.consumer.consume(200, self.settings.poll_seconds)
        except KafkaException as exc:
            self.history.complete(invocation, INFO, error=str(exc))
            self.consumer.close()
            self.consumer = None
            self.crashed()
            return
        reads, errors = read_messages(messages)
        self.history.complete(
            invocation, OK, [["poll", reads]], error=",".join(errors) if errors else None
        )

    def teardown(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


class Workload:
    """Every worker of a run; ``start``, then ``stop`` (waits for the ops under way)."""

    def __init__(
        self, bootstrap: str, history: History, settings: WorkloadSettings, seed: int
    ) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.settings = settings
        self.ids = Ids()
        rng = random.Random(seed)
        kinds: list[tuple[type[Worker], int]] = [
            (SendWorker, settings.senders),
            (TxnWorker, settings.txn_workers),
            (AssignConsumer, settings.assign_consumers),
            (SubscribeConsumer, settings.subscribe_consumers),
        ]
        self.workers: list[Worker] = [
            cls(slot, bootstrap, history, self.ids, settings, rng.randrange(2**32))
            for cls, n in kinds
            for slot in range(n)
        ]

    def start(self) -> None:
        for worker in self.workers:
            worker.start()

    def stop(self, timeout: float = 90.0) -> None:
        for worker in self.workers:
            worker.stop.set()
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            worker.join(max(0.1, deadline - time.monotonic()))

    def alive(self) -> list[str]:
        return [w.name for w in self.workers if w.is_alive()]

    def errors(self) -> list[str]:
        return [e for w in self.workers for e in w.errors]

    def crashes(self) -> int:
        return sum(w.crashes for w in self.workers)

    def final_read(self, timeout: float = 120.0) -> list[int]:
        """Every partition from the earliest offset to its end (as the end is when the
        read starts, all workers stopped), as polls of a new process; then a
        ``final-read`` op listing the partitions read to the end. Returns the partitions
        not read to the end in time."""
        process = self.ids.process()
        keys = list(range(self.settings.partitions))
        config = consumer_config(self.bootstrap, self.settings, "jepsen-final")
        consumer = Consumer(config)
        try:
            ends = {}
            deadline = time.monotonic() + timeout
            for k in keys:
                while k not in ends:
                    try:
                        _, ends[k] = consumer.get_watermark_offsets(
                            TopicPartition(TOPIC, k), timeout=10
                        )
                    except KafkaException:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)
            invocation = self.history.invoke(process, "assign", keys, final=True)
            consumer.assign([TopicPartition(TOPIC, k, OFFSET_BEGINNING) for k in keys])
            self.history.complete(invocation, OK)
            done = {k for k in keys if ends[k] == 0}
            while len(done) < len(keys) and time.monotonic() < deadline:
                invocation = self.history.invoke(process, "poll", [["poll"]], final=True)
                messages = consumer.consume(500, 0.5)
                reads, errors = read_messages(messages)
                self.history.complete(
                    invocation, OK, [["poll", reads]], error=",".join(errors) if errors else None
                )
                positions = consumer.position([TopicPartition(TOPIC, k) for k in keys])
                for tp in positions:
                    if tp.offset >= 0 and tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
            invocation = self.history.invoke(process, "final-read", sorted(done), final=True)
            self.history.complete(invocation, OK)
            return sorted(set(keys) - done)
        finally:
            consumer.close()
