"""Topics, partitions and pages: the Python face of the Lua scripts.

Layout per partition (all keys share the hash tag ``{topic:partition}``):

- ``meta``: hash with log end/start offsets, leader epoch, the open page and its fill,
  and the topic's page size, TTL and max pages (Lua cannot read the msgpack config);
- ``index``: sorted set, member = page number, score = first offset of the page;
- ``page:N``: list, one Kafka RecordBatch v2 per entry, baseOffset already patched;
- ``bidx:N``: string, 16 bytes per batch of page N (base offset, global sequence number),
  which the read script binary-searches and the archiver uses for the total order;
- ``stats``: hash, closed page number -> "records bytes max_timestamp".
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from kafkaesque.archiving import ArchivingLog
from kafkaesque.archiving import ClosedPage as ClosedPage  # re-exported: the archiver's view
from kafkaesque.records import decode_batch
from kafkaesque.scripts import Scripts

DEFAULT_PAGE_SIZE = 4096
MAX_TOPIC_NAME = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Fields of a RecordBatch v2 header
_LAST_OFFSET_DELTA = slice(23, 27)
_PRODUCER_ID = slice(43, 51)
_PRODUCER_EPOCH = slice(51, 53)
_BASE_SEQUENCE = slice(53, 57)


class LogError(Exception):
    """A request the log refuses; the message is meant for people."""


class InvalidTopic(LogError):
    pass


class InvalidConfig(LogError):
    pass


class TopicExists(LogError):
    pass


class UnknownTopic(LogError):
    """No such topic, or no such partition of it."""


class ProducerFenced(LogError):
    """An idempotent producer's batch out of sequence or from an old epoch; carries the
    Kafka error code (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, or
    UNKNOWN_PRODUCER_ID for a producer in mid-sequence this partition has no state for)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"producer sequence check failed (Kafka error {code})")
        self.code = code


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name or name in (".", ".."):
        raise InvalidTopic(f"invalid topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopic(f"topic name longer than {MAX_TOPIC_NAME} characters")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"invalid topic name {name!r}: use only letters, digits, '.', '_' and '-'"
        )


MAX_PARTITIONS = 10_000
# Page size, TTL (seconds, about 68 years) and max pages fit a 32-bit integer: the archive
# stores them as such, and Redis' EXPIRE takes any of them.
MAX_SETTING = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    partitions: int
    page_size: int = DEFAULT_PAGE_SIZE
    ttl: int = 0  # seconds a closed page is kept; 0 = no expiry
    max_pages: int = 0  # closed pages kept per partition; 0 = no limit
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    topic_id: bytes = field(default_factory=lambda: uuid.uuid4().bytes)

    def validate(self) -> None:
        check_topic_name(self.name)
        for name, value, low, high in (
            ("partitions", self.partitions, 1, MAX_PARTITIONS),
            ("page size", self.page_size, 1, MAX_SETTING),
            ("ttl", self.ttl, 0, MAX_SETTING),
            ("max pages", self.max_pages, 0, MAX_SETTING),
        ):
            if not low <= value <= high:
                raise InvalidConfig(f"{name} must be in {low}..{high}, got {value}")

    def pack(self) -> bytes:
        return msgpack.packb(
            {
                "partitions": self.partitions,
                "page_size": self.page_size,
                "ttl": self.ttl,
                "max_pages": self.max_pages,
                "created": self.created_ms,
                "id": self.topic_id,
            }
        )

    @classmethod
    def unpack(cls, name: str, data: bytes) -> TopicConfig:
        m = msgpack.unpackb(data)
        return cls(
            name=name,
            partitions=m["partitions"],
            page_size=m["page_size"],
            ttl=m["ttl"],
            max_pages=m["max_pages"],
            created_ms=m["created"],
            topic_id=m["id"],
        )


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches from the one holding the requested offset; empty at the log end."""

    batches: list[bytes]
    log_start: int
    log_end: int
    leader_epoch: int
    below_start: bool = False  # the offset was removed by retention (no archive)
    past_end: bool = False
    # The offset lies in a gap (dropped by retention before archiving): the batches start
    # at this later offset, the first one that exists.
    skipped_to: int | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    base_offsets: list[int]  # one per batch, in order
    log_start: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    log_start: int
    log_end: int
    leader_epoch: int
    pages: int
    bytes: int
    records: int  # records still held in Redis


@dataclass(frozen=True, slots=True)
class RestoredPartition:
    log_end: int  # what the archive holds: the partition continues here
    leader_epoch: int  # the last epoch known; the restored partition gets a higher one


@dataclass(frozen=True, slots=True)
class RestoredTopic:
    config: TopicConfig
    partitions: list[RestoredPartition]


class ColdStore(Protocol):
    """Where records evicted from Redis are still read from (the archive)."""

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        """Batches from the one holding ``offset`` on; [] if it is not archived."""
        ...

    async def start_offset(self, topic: str, partition: int) -> int | None:
        """The lowest archived offset, None if nothing is."""
        ...

    async def find_time(
        self, topic: str, partition: int, timestamp: int, below: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below offset ``below`` whose timestamp
        is at or after ``timestamp``; None if there is none."""
        ...

    async def dropped_ranges(self, topic: str) -> list[tuple[int, int, int]]:
        """(partition, first offset, last offset) of each gap in the topic: offsets
        retention dropped before archiving, which no store holds."""
        ...

    async def delete_topic(self, topic: str, topic_id: bytes | None, partitions: int) -> bool:
        """Delete the topic's records (of the incarnation ``topic_id`` too, and keep it from
        being archived again); True if the store had the topic."""
        ...


class StorageUnavailable(LogError):
    """A store the request needs (the archive) cannot be reached right now; retry later."""


class NeedsRecovery(LogError):
    """Redis has lost its data; appends wait until the archive restored the offsets."""


def _after(offset: int, first: int) -> int | None:
    """``first`` when the data resumes after a gap beginning at ``offset``, else None."""
    return first if first > offset else None


def _raise_log_error(exc: ResponseError) -> None:
    """Turn a Lua error_reply ("CODE message") into the matching LogError."""
    code, _, message = str(exc).partition(" ")
    if code == "UNKNOWN_TOPIC_OR_PARTITION":
        raise UnknownTopic(message) from None
    if code == "TOPIC_EXISTS":
        raise TopicExists(message) from None
    if code == "NEEDS_RECOVERY":
        raise NeedsRecovery(message) from None
    raise exc


class Log(ArchivingLog):
    """Topics and partitions kept in one Redis database (the archiver's side of it, in
    kafkaesque.archiving, is mixed in).

    ``cold`` serves offsets Redis no longer holds (the archive). ``recover`` is called when
    Redis turns out to have lost its data, before any append; it must restore the offsets
    from the archive (``restore``). Without one, the log starts afresh.
    """

    def __init__(
        self,
        redis: Redis,
        namespace: str = "ks",
        cold: ColdStore | None = None,
        recover: Callable[[Log], Awaitable[None]] | None = None,
    ) -> None:
        self.redis = redis
        self.ns = namespace
        self.cold = cold
        self.recover = recover
        self.scripts = Scripts(redis)
        self._topics_key = f"{namespace}:topics"
        self._gseq_key = f"{namespace}:gseq"
        self._producer_ids_key = f"{namespace}:producer_ids"
        # Present while Redis holds its data; a flush or a restart without persistence
        # removes it, and then appends wait for recovery.
        self._marker_key = f"{namespace}:incarnation"
        self._archiving_key = f"{namespace}:archiving"

    # -- keys ---------------------------------------------------------------------
    def _config_key(self, topic: str) -> str:
        return f"{self.ns}:topic:{topic}"

    def _prefix(self, topic: str, partition: int) -> str:
        return f"{self.ns}:{{{topic}:{partition}}}:"

    def _keys(self, topic: str, partition: int) -> list[str]:
        p = self._prefix(topic, partition)
        return [p + "meta", p + "index", p + "stats", p + "producers"]

    def channel(self, topic: str) -> str:
        """Pub/sub channel that carries "partition log_end" after every append."""
        return f"{self.ns}:appended:{topic}"

    # -- topics -------------------------------------------------------------------
    async def create_topic(self, config: TopicConfig) -> TopicConfig:
        config.validate()
        metas = [self._keys(config.name, p)[0] for p in range(config.partitions)]
        await self._call(
            self.scripts.create,
            keys=[self._topics_key, self._config_key(config.name), self._marker_key, *metas],
            args=[config.name, config.pack(), config.page_size, config.ttl, config.max_pages],
        )
        return config

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a script that refuses to write while Redis has lost its data: recover first
        (restore from the archive, or start afresh without one), then run it again."""
        for attempt in range(2):
            try:
                return await script(keys=keys, args=args)
            except ResponseError as exc:
                if attempt == 0 and str(exc).startswith("NEEDS_RECOVERY"):
                    await self.ensure_recovered()
                    continue
                _raise_log_error(exc)
        raise AssertionError("unreachable")

    async def needs_recovery(self) -> bool:
        return not await self.redis.exists(self._marker_key)

    async def ensure_recovered(self) -> None:
        """If Redis lost its data, restore offsets (through ``recover``) before appends."""
        if await self.needs_recovery():
            if self.recover is not None:
                await self.recover(self)
            await self.redis.set(self._marker_key, uuid.uuid4().hex, nx=True)

    async def topic(self, name: str) -> TopicConfig:
        data = await self.redis.get(self._config_key(name))
        if data is None and self.recover is not None and await self.needs_recovery():
            # Redis lost its data: the archive may know the topic (restored here).
            await self.ensure_recovered()
            data = await self.redis.get(self._config_key(name))
        if data is None:
            raise UnknownTopic(f"no such topic: {name}")
        return TopicConfig.unpack(name, data)

    async def add_partitions(self, name: str, count: int) -> TopicConfig:
        """Grow a topic to ``count`` partitions (never shrink, as in Kafka)."""
        while True:
            raw = await self.redis.get(self._config_key(name))
            if raw is None:
                raise UnknownTopic(f"no such topic: {name}")
            config = TopicConfig.unpack(name, raw)
            if count <= config.partitions:
                raise InvalidConfig(
                    f"topic {name} has {config.partitions} partitions; the new count must be larger"
                )
            grown = dataclasses.replace(config, partitions=count)
            grown.validate()
            metas = [self._keys(name, p)[0] for p in range(config.partitions, count)]
            try:
                await self.scripts.partitions(
                    keys=[self._config_key(name), *metas],
                    args=[raw, grown.pack(), grown.page_size, grown.ttl, grown.max_pages],
                )
                return grown
            except ResponseError as exc:
                if not str(exc).startswith("CONFLICT"):
                    _raise_log_error(exc)
                    raise
                # Another client changed the topic between our read and write: read again.

    async def list_topics(self) -> list[str]:
        if self.recover is not None:
            await self.ensure_recovered()  # after a loss of Redis' data, list what is restored
        return sorted(n.decode() for n in await self.redis.smembers(self._topics_key))

    async def delete_topic(self, name: str) -> None:
        """Delete the topic and its records, the archived ones first: if the archive cannot
        be reached, nothing is deleted. A topic only the archive still has (deleted while
        no archive was attached) is deleted from it."""
        try:
            config = await self.topic(name)
        except UnknownTopic:
            if self.cold is None or not await self.cold.delete_topic(name, None, 0):
                raise
            return
        if self.cold is not None:
            await self.cold.delete_topic(name, config.topic_id, config.partitions)
        keys = [k for p in range(config.partitions) for k in self._keys(name, p)]
        prefixes = [self._prefix(name, p) for p in range(config.partitions)]
        try:
            await self.scripts.delete(
                keys=[self._topics_key, self._config_key(name), *keys], args=[name, *prefixes]
            )
        except ResponseError as exc:
            _raise_log_error(exc)

    # -- partitions ---------------------------------------------------------------
    async def append(self, topic: str, partition: int, batches: Sequence[bytes]) -> Appended:
        """Append checked RecordBatch v2 batches atomically; returns their base offsets.

        Batches of idempotent producers (producer id >= 0) are sequence-checked: a retry of
        one of a producer's last five batches returns its original offset and is not written
        again; a gap, an old epoch or an unknown producer in mid-sequence (its state was
        lost) raises ProducerFenced and writes nothing."""
        args: list[object] = [self._prefix(topic, partition), self.channel(topic), _now_ms()]
        for batch in batches:
            args += (
                int.from_bytes(batch[_LAST_OFFSET_DELTA], "big", signed=True) + 1,
                int.from_bytes(batch[_PRODUCER_ID], "big", signed=True),
                int.from_bytes(batch[_PRODUCER_EPOCH], "big", signed=True),
                int.from_bytes(batch[_BASE_SEQUENCE], "big", signed=True),
                batch,
            )
        meta, index, stats, producers = self._keys(topic, partition)
        keys = [
            meta,
            index,
            stats,
            self._gseq_key,
            producers,
            self._archiving_key,
            self._marker_key,
        ]
        code, *result = await self._call(self.scripts.append, keys, args)
        if code:
            raise ProducerFenced(code)
        return Appended(result[1:], result[0])

    async def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1 << 20,
        max_records: int = 1 << 31,
        min_one: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset`` within the limits; with ``min_one``
        the first batch comes even when it alone exceeds them.

        Below Redis' oldest offset the archive (``cold``) answers; an offset no store holds
        lies in a gap (dropped by retention before archiving) and the read goes on from the
        next offset that exists, as Kafka's readers do across a compacted log's gaps.
        Without an archive such an offset is ``below_start`` (Kafka's retention)."""
        status, start, end, epoch, batches = await self._read_redis(
            topic, partition, offset, max_bytes, max_records, min_one
        )
        if status != 1 or self.cold is None:
            return ReadResult(batches, start, end, epoch, status == 1, status == 2)
        # Tiered storage: offsets Redis no longer holds are read from the archive.
        cold_start = await self.cold.start_offset(topic, partition)
        earliest = start if cold_start is None else min(start, cold_start)
        batches = await self.cold.read(topic, partition, offset, max_bytes)
        if batches:
            first = int.from_bytes(batches[0][:8], "big")
            return ReadResult(batches, earliest, end, epoch, skipped_to=_after(offset, first))
        # Nothing at or after the offset is archived: the gap runs up to Redis' oldest.
        for _ in range(8):  # retention may move the start between two calls
            status, start, end, epoch, batches = await self._read_redis(
                topic, partition, start, max_bytes, max_records, min_one
            )
            if status != 1:
                break
        return ReadResult(
            batches, min(earliest, start), end, epoch, status == 1, status == 2, start
        )

    async def _read_redis(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_records: int,
        min_one: bool,
    ) -> tuple[int, int, int, int, list[bytes]]:
        """read.lua: (status, log start, log end, leader epoch, batches)."""
        meta, index, *_ = self._keys(topic, partition)
        try:
            status, start, end, epoch, *batches = await self.scripts.read(
                keys=[meta, index],
                args=[
                    self._prefix(topic, partition),
                    offset,
                    max_bytes,
                    max_records,
                    1 if min_one else 0,
                ],
            )
        except ResponseError as exc:
            _raise_log_error(exc)
            raise
        return status, start, end, epoch, batches

    async def earliest_offset(self, topic: str, partition: int) -> int:
        """The first offset still readable: in the archive if there is one, else in Redis."""
        start = (await self.state(topic, partition)).log_start
        if self.cold is not None:
            cold_start = await self.cold.start_offset(topic, partition)
            if cold_start is not None:
                return min(start, cold_start)
        return start

    async def state(self, topic: str, partition: int) -> PartitionState:
        """Apply retention, then report offsets, pages and bytes held."""
        meta, index, stats, _ = self._keys(topic, partition)
        try:
            values = await self.scripts.state(
                keys=[meta, index, stats, self._archiving_key],
                args=[self._prefix(topic, partition)],
            )
        except ResponseError as exc:
            _raise_log_error(exc)
            raise
        return PartitionState(*values)

    async def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (ms), in the
        archive below Redis' oldest offset first; None when there is none (ListOffsets by
        time)."""
        state = await self.state(topic, partition)  # raises UnknownTopic; applies retention
        if self.cold is not None:
            cold_start = await self.cold.start_offset(topic, partition)
            if cold_start is not None and cold_start < state.log_start:
                found = await self.cold.find_time(topic, partition, timestamp, state.log_start)
                if found is not None:
                    return found
        meta, index, stats, _ = self._keys(topic, partition)
        batch = await self.scripts.find_time(
            keys=[index, meta, stats], args=[self._prefix(topic, partition), timestamp]
        )
        if batch is None:
            return None
        for record in decode_batch(batch):
            if record.timestamp >= timestamp:
                return record.offset, record.timestamp
        return None

    async def leader_epochs(self, topic: str, partitions: int) -> list[int]:
        """The current leader epoch of each partition (one round trip)."""
        return await self._meta_values(topic, range(partitions), "epoch")

    async def log_ends(self, topic: str, partitions: Iterable[int]) -> list[int]:
        """The log end offset of each of ``partitions`` (one round trip, no retention)."""
        return await self._meta_values(topic, partitions, "end")

    async def _meta_values(self, topic: str, partitions: Iterable[int], name: str) -> list[int]:
        pipe = self.redis.pipeline(transaction=False)
        for p in partitions:
            pipe.hget(self._keys(topic, p)[0], name)
        return [int(v or 0) for v in await pipe.execute()]

    async def epoch_end_offset(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest epoch <= ``epoch`` this partition had, the
        offset where it ended), or (-1, -1) for an epoch newer than the current one or an
        undefined (negative) one."""
        state = await self.state(topic, partition)
        if epoch == state.leader_epoch:
            return epoch, state.log_end
        if epoch > state.leader_epoch or epoch < 0:
            return -1, -1
        raw = await self.redis.hgetall(self._prefix(topic, partition) + "epochs")
        history = sorted([(0, 0)] + [(int(e), int(start)) for e, start in raw.items()])
        known = max(e for e, _ in history if e <= epoch)
        end = min((start for e, start in history if e > epoch), default=state.log_end)
        return known, end

    async def new_producer_id(self) -> int:
        """A producer id no other producer of this Redis has had, before or after a loss of
        its data: ids follow the clock (1,024 per millisecond, more when asked faster)."""
        floor = _now_ms() << 10
        return await self.scripts.producer_id(keys=[self._producer_ids_key], args=[floor])

    def _fail(self, exc: ResponseError) -> None:
        _raise_log_error(exc)

    def _unknown(self, topic: str, partition: int) -> UnknownTopic:
        return UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")

    def _partitions_of(self, name: str, raw: bytes) -> int:
        return TopicConfig.unpack(name, raw).partitions

    async def sequence_counter(self) -> int:
        """The highest global sequence number assigned so far."""
        return int(await self.redis.get(self._gseq_key) or 0)

    async def restore(
        self, topics: list[RestoredTopic], sequence_floor: int, producer_id_floor: int
    ) -> None:
        """Bring Redis back to what the archive holds after it lost data (see restore.lua),
        raise the counters past every id the archive has seen, switch archiving on, and set
        the marker."""
        for t in topics:
            c = t.config
            keys = [k for p in range(len(t.partitions)) for k in self._keys(c.name, p)[:3]]
            args: list[Any] = [c.name, c.pack(), c.page_size, c.ttl, c.max_pages]
            for p in t.partitions:
                args += (p.log_end, p.leader_epoch)
            await self.scripts.restore(
                keys=[self._topics_key, self._config_key(c.name), *keys], args=args
            )
        for key, floor in (
            (self._gseq_key, sequence_floor),
            (self._producer_ids_key, producer_id_floor),
        ):
            current = int(await self.redis.get(key) or 0)
            if current < floor:
                await self.redis.incrby(key, floor - current)
        # Restored from an archive: archiving is on before the first append can close a page.
        await self.enable_archiving()
        await self.redis.set(self._marker_key, uuid.uuid4().hex, nx=True)
