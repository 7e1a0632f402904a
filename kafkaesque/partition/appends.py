"""Appends to partitions (``AppendingPartitions``, the append side of
kafkaesque.partition.layer.Partitions): a client's records checked, the topic's configs
applied (``AppendPolicy``: max.message.bytes, cleanup.policy=compact, the timestamp type
and bounds, compression.type; with Kafka's defaults only the size check), the batches
written through the log, one outcome per partition. ``PolicyCache`` reads a topic's
configs at most once a second, so a produce does not pay a Redis round trip for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.config.topic_keys import LONG_MAX
from kafkaesque.errors import (
    CorruptBatch,
    HotTierUnavailable,
    InvalidRecord,
    InvalidTimestamp,
    KafkaesqueError,
    NeedsRecovery,
    RecordTooLarge,
    StorageUnavailable,
)
from kafkaesque.hot.durability import DEFAULT_TIMEOUT_MS, Durability
from kafkaesque.hot.log import Log
from kafkaesque.hot.log_types import LogAppended
from kafkaesque.hot.memory import MemoryGuard
from kafkaesque.hot.notify import Notifier
from kafkaesque.log_throttle import LogThrottle, clip
from kafkaesque.records.batch import (
    MAX_CLIENT_RECORDS_BYTES,
    BatchHeader,
    decode_records,
    offset_count,
    read_header,
    record_count,
    records_data,
    split_batches,
)
from kafkaesque.records.build import rewrite_batch
from kafkaesque.records.compression import Compression, compress
from kafkaesque.types import TopicPartition

log = logging.getLogger(__name__)
REFUSALS = LogThrottle(log)  # the batches clients send that are refused

MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # Kafka's message.max.bytes default


@dataclass(frozen=True, slots=True)
class Appended:
    """One partition's outcome of a multi-partition append."""

    error: KafkaesqueError | None = None
    base_offset: int = -1
    log_start: int = -1
    # The time (ms) the broker stamped the batches with, for a LogAppendTime topic; -1
    # for CreateTime. (A retry deduplicated by its sequence numbers keeps the time its
    # first append stored, which this does not tell.)
    log_append_time: int = -1


class TopicTraffic:
    """Records and bytes appended to (written) and fetched from (read) each topic, as
    Kafka's BrokerTopicStats: counted here on the produce and fetch paths into plain lists
    (a lookup and two additions per partition with records), read by the broker's
    metrics when they are scraped (wire/topic_metrics.py)."""

    def __init__(self) -> None:
        self.written: dict[str, list[int]] = {}  # topic -> [records, bytes]
        self.read: dict[str, list[int]] = {}

    def wrote(self, topic: str, batches: Sequence[bytes]) -> None:
        self._count(self.written, topic, batches)

    def fetched(self, topic: str, batches: Sequence[bytes]) -> None:
        self._count(self.read, topic, batches)

    @staticmethod
    def _count(table: dict[str, list[int]], topic: str, batches: Sequence[bytes]) -> None:
        counts = table.get(topic)
        if counts is None:
            counts = table[topic] = [0, 0]
        for batch in batches:
            counts[0] += record_count(batch)
            counts[1] += len(batch)


CONFIG_TTL = 1.0  # seconds a topic's cached configs are used before they are read again
NO_TIMESTAMP = -1  # a record or batch without a timestamp: never out of bounds

# compression.type's codec names; "producer" keeps each batch's own codec.
CODECS = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
# The level config of each codec that has levels (snappy has none).
LEVELS = {
    Compression.GZIP: "compression.gzip.level",
    Compression.LZ4: "compression.lz4.level",
    Compression.ZSTD: "compression.zstd.level",
}
GZIP_DEFAULT_LEVEL = -1  # Kafka's "the codec's default" (zlib's 6)


@dataclass(frozen=True, slots=True)
class AppendPolicy:
    """What one topic's configs ask of every batch appended to it."""

    topic: str
    max_message_bytes: int
    compact: bool = False
    log_append_time: bool = False
    # How far a CreateTime timestamp may lie before / after the broker's clock (ms).
    before_max_ms: int = LONG_MAX
    after_max_ms: int = LONG_MAX
    codec: Compression | None = None  # None: compression.type=producer, batches as sent
    level: int | None = None  # None: the codec's default
    # Derived, once: read on every append.
    bounds_timestamps: bool = field(init=False)
    keeps_batches: bool = field(init=False)  # no batch needs more than the size check

    def __post_init__(self) -> None:
        # LogAppendTime topics replace the producer's timestamps: nothing to bound.
        bounds = not self.log_append_time and (
            self.before_max_ms < LONG_MAX or self.after_max_ms < LONG_MAX
        )
        keeps = not (self.compact or self.log_append_time or self.codec is not None or bounds)
        object.__setattr__(self, "bounds_timestamps", bounds)
        object.__setattr__(self, "keeps_batches", keeps)

    @classmethod
    def of(cls, config: TopicConfig, default_max_message_bytes: int) -> AppendPolicy:
        """The policy of ``config``. Its max.message.bytes counts where the topic or the
        broker's topic defaults set it; otherwise the partition layer's own limit does
        (the broker's message.max.bytes, or none for the CLI's batches)."""
        max_bytes = default_max_message_bytes
        if config.source("max.message.bytes") != "default":
            max_bytes = config.typed("max.message.bytes")
        codec = CODECS.get(config.value("compression.type"))
        level = None
        if codec in LEVELS:
            level = config.typed(LEVELS[codec])
            if codec is Compression.GZIP and level == GZIP_DEFAULT_LEVEL:
                level = None
        return cls(
            topic=config.name,
            max_message_bytes=max_bytes,
            compact=config.compact,
            log_append_time=config.value("message.timestamp.type") == "LogAppendTime",
            before_max_ms=config.typed("message.timestamp.before.max.ms"),
            after_max_ms=config.typed("message.timestamp.after.max.ms"),
            codec=codec,
            level=level,
        )

    def check_size(self, batches: Sequence[bytes]) -> None:
        for batch in batches:
            if len(batch) > self.max_message_bytes:
                raise RecordTooLarge(
                    f"a batch of {len(batch)} bytes is larger than the {self.max_message_bytes}"
                    f" bytes max.message.bytes of topic {self.topic} allows"
                )

    def apply(self, batches: Sequence[bytes], now_ms: int) -> list[bytes]:
        """The batches as the topic stores them (stamped, recompressed), or an
        InvalidRecord / InvalidTimestamp / RecordTooLarge for the first batch the topic
        refuses: then none is appended. Call only when not ``keeps_batches``."""
        rewritten = [self._apply_one(batch, now_ms) for batch in batches]
        if self.codec is not None:
            self.check_size(rewritten)  # as Kafka: recompression may have grown a batch
        return rewritten

    def _apply_one(self, batch: bytes, now_ms: int) -> bytes:
        header = read_header(batch)
        if header.is_control:
            return batch  # a transaction marker is the broker's own: stored as written
        if self.bounds_timestamps:
            self._check_timestamps(batch, header, now_ms)
        records = None
        recompress = self.codec is not None and header.compression != self.codec
        if self.compact or recompress:
            header, data, start, end = records_data(batch, 0, MAX_CLIENT_RECORDS_BYTES)
            if self.compact:
                self._check_keys(header, data, start, end)
            if recompress and self.codec is not None:
                records = compress(self.codec, data[start:end], self.level)
        if records is None and not self.log_append_time:
            return batch
        return rewrite_batch(
            batch,
            records=records,
            compression=self.codec if records is not None else None,
            log_append_time=now_ms if self.log_append_time else None,
        )

    def _check_timestamps(self, batch: bytes, header: BatchHeader, now_ms: int) -> None:
        """The batch's first (baseTimestamp) and largest (maxTimestamp) timestamps against
        the bounds: a producer gives its records timestamps in order, so these two stand
        for all of them without decoding the records (a record older than the batch's
        first is not checked). Only a refused batch is decoded, to name its records."""
        low, high = now_ms - self.before_max_ms, now_ms + self.after_max_ms

        def outside(timestamp: int) -> bool:
            return timestamp != NO_TIMESTAMP and not low <= timestamp <= high

        bad = next((t for t in (header.base_timestamp, header.max_timestamp) if outside(t)), None)
        if bad is None:
            return
        header, data, start, end = records_data(batch, 0, MAX_CLIENT_RECORDS_BYTES)
        records = decode_records(header, data, start, end)
        raise InvalidTimestamp(
            f"Timestamp {bad} of a record for topic {self.topic} is out of"
            f" range. The timestamp should be within [{low}, {high}]",
            tuple(i for i, r in enumerate(records) if outside(r.timestamp)),
        )

    def _check_keys(self, header: BatchHeader, data: bytes, start: int, end: int) -> None:
        records = decode_records(header, data, start, end)
        keyless = tuple(i for i, r in enumerate(records) if r.key is None)
        if keyless:
            raise InvalidRecord(
                f"Compacted topic cannot accept message without key in topic {self.topic}",
                keyless,
            )


class PolicyCache:
    """Each topic's AppendPolicy, read with ``Log.topic`` at most once per ``ttl`` seconds
    (concurrent appends share one read); ``forget`` makes the next append read it again.
    An unknown topic is not remembered: its appends keep failing with UnknownTopic until
    it is created, and then succeed at once."""

    def __init__(self, log: Log, max_message_bytes: int, ttl: float = CONFIG_TTL) -> None:
        self.log = log
        self.max_message_bytes = max_message_bytes
        self.ttl = ttl
        self._policies: dict[str, tuple[float, AppendPolicy]] = {}
        self._reads: dict[str, asyncio.Task[AppendPolicy]] = {}

    def cached(self, topic: str) -> AppendPolicy | None:
        """The topic's policy if read less than ``ttl`` ago (no await: the hot path)."""
        entry = self._policies.get(topic)
        if entry is not None and entry[0] > time.monotonic():
            return entry[1]
        return None

    async def get(self, topic: str) -> AppendPolicy:
        """The topic's policy; raises UnknownTopic (or a Redis error) as Log.topic does."""
        policy = self.cached(topic)
        if policy is not None:
            return policy
        read = self._reads.get(topic)
        if read is None:
            read = asyncio.ensure_future(self._read(topic))
            self._reads[topic] = read
            read.add_done_callback(lambda task: self._read_done(topic, task))
        # Shielded: one caller giving up (a closed connection) does not fail the others.
        return await asyncio.shield(read)

    def forget(self, topic: str) -> None:
        """Read the topic's configs again on its next append (they were just changed)."""
        self._policies.pop(topic, None)
        self._reads.pop(topic, None)  # a read under way may predate the change

    async def _read(self, topic: str) -> AppendPolicy:
        policy = AppendPolicy.of(await self.log.topic(topic), self.max_message_bytes)
        if self._reads.get(topic) is asyncio.current_task():  # not forgotten meanwhile
            self._policies[topic] = (time.monotonic() + self.ttl, policy)
        return policy

    def _read_done(self, topic: str, task: asyncio.Task[AppendPolicy]) -> None:
        if self._reads.get(topic) is task:
            del self._reads[topic]
        if not task.cancelled():
            task.exception()  # retrieved: the waiters got it (or have all gone)


class AppendingPartitions:
    """Validated appends, for kafkaesque.partition.layer.Partitions (which sets the state
    below)."""

    log: Log
    notifier: Notifier | None
    policies: PolicyCache
    durability: Durability  # what acks=all waits for
    memory: MemoryGuard | None
    traffic: TopicTraffic | None

    async def append(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction: int | None = None,
    ) -> Appended:
        """Append whole, checked batches atomically, as the topic's configs ask (see
        above); raises a KafkaesqueError, and then appends none. With
        ``acks_all``, return once the append is as durable as ``durability`` asks;
        ``transaction``: see Log.append."""
        batches, append_time = await self._as_configured(topic, batches)
        durability = self.durability if acks_all else None
        appended = await self.log.append(
            topic, partition, batches, durability, timeout_ms, transaction
        )
        return self._appended(topic, partition, batches, appended, append_time)

    async def _as_configured(
        self, topic: str, batches: Sequence[bytes]
    ) -> tuple[Sequence[bytes], int]:
        """The batches as the topic's configs want them stored, and the log append time
        they were stamped with (-1: CreateTime); raises what refuses them."""
        policy = self.policies.cached(topic) or await self.policies.get(topic)
        policy.check_size(batches)
        append_time = -1
        if not policy.keeps_batches:
            now = int(time.time() * 1000)
            batches = policy.apply(batches, now)
            append_time = now if policy.log_append_time else -1
        if self.memory is not None:
            self.memory.check_append(sum(map(len, batches)))
        return batches, append_time

    def _appended(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        appended: LogAppended,
        append_time: int,
    ) -> Appended:
        """Wake this process' readers at once (others hear it through Redis)."""
        if self.traffic is not None:
            self.traffic.wrote(topic, batches)
        if self.notifier is not None:
            end = appended.base_offsets[-1] + offset_count(batches[-1])
            self.notifier.notify(topic, f"{partition}:{end}")  # as append.lua publishes
        return Appended(None, appended.base_offsets[0], appended.log_start, append_time)

    def forget_config(self, topic: str) -> None:
        """The topic's configs changed (AlterConfigs, deleted or created again): the next
        append reads them again instead of using the cached ones for up to a second."""
        self.policies.forget(topic)

    async def append_records(
        self,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction: int | None = None,
    ) -> Appended:
        """Check a client's records (one or more batches as sent) and append them; the
        refusal, if any, is in the result."""
        try:
            batches = _split(records)
            return await self.append(topic, partition, batches, acks_all, timeout_ms, transaction)
        except KafkaesqueError as exc:
            return _refused(topic, partition, exc)

    async def append_many(
        self,
        records: Mapping[TopicPartition, bytes | memoryview | None],
        acks_all: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        transaction: int | None = None,
    ) -> dict[TopicPartition, Appended]:
        """Append a client's records to many partitions; one outcome per partition. The
        appends go to Redis in one round trip, unless acks=all waits for durability
        (the waits cover one connection's writes: then each partition is one call)."""
        if len(records) == 1:  # no task to gather: a task costs a fifth of an append
            (((topic, partition), data),) = records.items()
            return {
                (topic, partition): await self.append_records(
                    topic, partition, data, acks_all, timeout_ms, transaction
                )
            }
        if acks_all and self.durability.waits:
            outcomes = await asyncio.gather(
                *(
                    self.append_records(t, p, data, acks_all, timeout_ms, transaction)
                    for (t, p), data in records.items()
                )
            )
            return dict(zip(records, outcomes, strict=True))
        results: dict[TopicPartition, Appended] = {}
        ready: list[tuple[str, int, Sequence[bytes], int]] = []
        for (topic, partition), data in records.items():
            try:
                batches, append_time = await self._as_configured(topic, _split(data))
            except KafkaesqueError as exc:
                results[topic, partition] = _refused(topic, partition, exc)
            else:
                ready.append((topic, partition, batches, append_time))
        try:
            replies: list[LogAppended | KafkaesqueError] = await self.log.append_many(
                [(topic, partition, batches) for topic, partition, batches, _ in ready],
                transaction,
            )
        except KafkaesqueError as exc:  # Redis is away: every partition says so
            replies = [exc] * len(ready)
        for (topic, partition, batches, append_time), reply in zip(ready, replies, strict=True):
            results[topic, partition] = (
                _refused(topic, partition, reply)
                if isinstance(reply, KafkaesqueError)
                else self._appended(topic, partition, batches, reply, append_time)
            )
        return {tp: results[tp] for tp in records}


def _split(records: bytes | memoryview | None) -> list[bytes]:
    """A client's records as batches; raises InvalidRecord for what is not."""
    if not records:
        raise CorruptBatch("no record batch")
    return split_batches(records)


def _refused(topic: str, partition: int, exc: KafkaesqueError) -> Appended:
    """A refused append as its outcome, logged as its kind deserves."""
    if isinstance(exc, InvalidRecord):  # a client's doing: it must not flood the log
        REFUSALS.client(
            "rejected batch",
            logging.INFO,
            "rejected batches",
            "rejected batch for %s[%d]: %s",
            clip(topic),
            partition,
            clip(exc),
            logger=log,
        )
    elif isinstance(exc, HotTierUnavailable):
        pass  # logged once per outage by the client
    elif isinstance(exc, StorageUnavailable | NeedsRecovery):
        # Redis lost its data and the archive cannot restore the offsets yet: retriable.
        log.warning("cannot append to %s[%d]: %s", topic, partition, exc)
    return Appended(exc)
