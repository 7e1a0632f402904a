"""The wire mode's records (produce, consume): a confluent-kafka Producer sending the
direct mode's parsed lines (``WireLineProducer``), and a Consumer whose records print as
the direct mode prints them (``consume``). Loaded only in wire mode."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from kafkaesque.cli.consume_start import BEGINNING, END, LAST, OFFSET, Start
from kafkaesque.cli.line_producer import BadLine, LineProducer, LineRecord
from kafkaesque.cli.wire_client import (
    POLL,
    TIMEOUT,
    UNREACHABLE,
    WireClient,
    WireFailure,
    describe_error,
)
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.records.batch import with_base_offset
from kafkaesque.records.build import build_batch
from kafkaesque.types import TopicPartition as TP

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log

# What the coordinator of a consumer's group.id answers: no matter without --group (the
# client needs a group.id, and librdkafka looks its coordinator up even when assigning).
_GROUP_ONLY = {"GROUP_AUTHORIZATION_FAILED", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}


def producer(client: WireClient, compression: str, batch_size: int) -> Producer:
    """A confluent-kafka Producer with the client's settings (murmur2 partitions for keys)."""
    config = {
        "partitioner": "murmur2_random",  # Kafka's Java clients', as the direct mode
        "compression.type": compression,
        "batch.num.messages": batch_size,
        **client.config,
    }
    config.setdefault("message.timeout.ms", int(TIMEOUT * 1000))
    return Producer(config)


def consume(
    client: WireClient,
    topics: Sequence[str],
    pattern: str | None,
    partition: int | None,
    start: Start | None,
    *,
    group: str | None,
    follow: bool,
    max_records: int | None,
    fetch_size: int,
    isolation: str,
    formatter: Callable[[str, int, bytes, int], list[bytes]],
    line_end: bytes,
    out: BinaryIO,
    stopped: Callable[[], bool],
) -> None:
    """Print the records (see produce_consume.consume): ``start`` says where a
    partition starts on the first assignment (None: the committed offset, else the log
    start)."""
    config = {
        # A member gone without leaving holds its partitions for a session: the CLI's
        # members take the direct mode's 10 s, not Kafka's 45 s (the command config may
        # say otherwise).
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
        **client.config,
        "group.id": group or "kafkaesque-cli",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
    }
    consumer = Consumer(config)
    assigned: set[TP] = set()
    at_end: set[TP] = set()
    first = [True]
    ready = [group is None]

    def place(tps: list[Any], explicit: bool) -> list[Any]:
        for tp in tps:
            if start is None:
                if explicit:
                    tp.offset = OFFSET_BEGINNING
                continue
            tp.offset = _offset(consumer, tp, start)
        return tps

    try:
        if group is None:
            names = _topics(client, topics, pattern)
            tps = []
            for t in names:
                count = client.partition_count(t)
                parts = [partition] if partition is not None else range(count)
                tps += [TopicPartition(t, p) for p in parts]
            if not tps and not follow:
                raise WireFailure(f"no topic matches --pattern {pattern}")
            consumer.assign(place(tps, True))
            assigned.update((tp.topic, tp.partition) for tp in tps)
        else:
            for t in topics:
                client.partition_count(t)  # an unknown topic is an error, not a wait
            wanted = list(topics) + ([f"^{pattern}$"] if pattern is not None else [])

            def on_assign(c: Any, tps: list[Any]) -> None:
                if first[0]:
                    place(tps, False)
                    first[0] = False
                c.assign(tps)
                assigned.clear()
                assigned.update((tp.topic, tp.partition) for tp in tps)
                at_end.difference_update(assigned)
                ready[0] = True

            def on_revoke(c: Any, tps: list[Any]) -> None:
                c.unassign()
                assigned.clear()

            consumer.subscribe(wanted, on_assign=on_assign, on_revoke=on_revoke)
        printed = 0
        while not stopped():
            if not follow and ready[0] and assigned <= at_end:
                break
            want = fetch_size
            if max_records is not None:
                want = min(want, max_records - printed)
            messages = consumer.consume(num_messages=want, timeout=POLL * 5)
            client.check()
            lines: list[bytes] = []
            commits: dict[TP, int] = {}
            for m in cast(list[Any], messages):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add((m.topic(), m.partition()))
                    elif err.name() in UNREACHABLE:
                        pass
                    elif group is None and err.name() in _GROUP_ONLY:
                        pass  # the client's own group.id, never joined nor committed
                    else:
                        raise WireFailure(describe_error(err, client.bootstrap))
                    continue
                tp = (m.topic(), m.partition())
                at_end.discard(tp)
                lines += formatter(tp[0], tp[1], _batch(m), 0)
                commits[tp] = m.offset() + 1
            if lines:
                out.write(line_end.join(lines))
                out.write(line_end)
                out.flush()
                printed += len(lines)
            if group is not None and commits:
                _commit(consumer, commits)
            if max_records is not None and printed >= max_records:
                break
    except KafkaException as exc:
        raise client.failed(exc) from None
    finally:
        consumer.close()  # leaves the group: its others rebalance at once


def _commit(consumer: Consumer, commits: dict[TP, int]) -> None:
    offsets = [TopicPartition(t, p, o) for (t, p), o in commits.items()]
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        # A rebalance took the partitions meanwhile: their next owner reads on.
        rebalanced = ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID")
        if not isinstance(err, KafkaError) or err.name() not in rebalanced:
            raise


def _topics(client: WireClient, topics: Sequence[str], pattern: str | None) -> list[str]:
    names = list(dict.fromkeys(topics))
    if pattern is not None:
        regex = re.compile(pattern)
        every = sorted(client.metadata().topics)
        names += [n for n in every if regex.fullmatch(n) and n not in names]
    return names


def _offset(consumer: Consumer, tp: Any, start: Start) -> int:
    """The start option's offset of a partition (OFFSET_BEGINNING/END: the client's)."""
    if start.kind == OFFSET:
        return start.value
    if start.kind == BEGINNING:
        return OFFSET_BEGINNING
    if start.kind == END:
        return OFFSET_END
    if start.kind == LAST:
        low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT)
        return cast(int, max(low, high - start.value))
    found = consumer.offsets_for_times(
        [TopicPartition(tp.topic, tp.partition, start.value)], timeout=TIMEOUT
    )
    offset = found[0].offset
    return OFFSET_END if offset < 0 else cast(int, offset)


def _batch(message: Any) -> bytes:
    """A consumed message as a batch of one at its offset: the direct mode's formatters
    print it."""
    _, timestamp = message.timestamp()
    headers = message.headers() or []
    batch = build_batch(
        [message.value()],
        [message.key()],
        timestamps=[max(timestamp, 0)],
        headers=[headers] if headers else None,
    )
    return with_base_offset(batch, message.offset())


class WireLineProducer(LineProducer):
    """The direct mode's line parsing (keys, headers, null markers, JSON), each record
    sent by a confluent-kafka Producer (murmur2 partitions for keys, as Kafka's clients)."""

    def __init__(self, client: WireClient, topic: str, partitions: int, **options: Any) -> None:
        compression = options.pop("compression_name")
        # No Log: the records go over the wire (only the line parsing is used).
        super().__init__(cast("Log", None), TopicConfig(topic, partitions), **options)
        self.client = client
        self.topic = topic
        self.sender = producer(client, compression, self.batch_size)
        self.error: KafkaError | None = None

    def _delivered(self, err: KafkaError | None, message: Any) -> None:
        if err is not None and self.error is None:
            self.error = err

    async def send(self, lines: list[bytes]) -> int:
        try:
            if self.plain:
                records = [LineRecord(None, line, []) for line in lines]
            else:
                records = self._records(lines)
        except BadLine as exc:
            self._send(exc.records)
            exc.sent = len(exc.records)
            raise
        finally:
            self._lines += len(lines)
        self._send(records)
        return len(records)

    def _send(self, records: Iterable[LineRecord]) -> None:
        for r in records:
            options: dict[str, Any] = {}
            partition = r.partition if r.partition is not None else self.partition
            if partition is not None:
                options["partition"] = partition
            if r.timestamp is not None:
                options["timestamp"] = r.timestamp
            if r.headers:
                options["headers"] = r.headers
            while True:
                try:
                    self.sender.produce(
                        self.topic, r.value, r.key, on_delivery=self._delivered, **options
                    )
                    break
                except BufferError:  # the queue is full: let it drain
                    self.sender.poll(POLL)
                    self._check()
                except KafkaException as exc:
                    raise self.client.failed(exc) from None
            self.sender.poll(0)
        self.flush()

    def flush(self) -> None:
        while self.sender.flush(POLL) > 0:
            self._check()
        self._check()

    def _check(self) -> None:
        self.client.check()
        if self.error is not None:
            raise WireFailure(describe_error(self.error, self.client.bootstrap))
