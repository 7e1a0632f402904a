"""Topics, partitions and pages: the Python face of the Lua scripts.

Layout per partition (all keys share the hash tag ``{topic:partition}``):

- ``meta``: hash with log end/start offsets, leader epoch, the open page and its fill,
  and the topic's page size, TTL and max pages (Lua cannot read the msgpack config);
- ``index``: sorted set, member = page number, score = first offset of the page;
- ``page:N``: list, one Kafka RecordBatch v2 per entry, baseOffset already patched;
- ``bidx:N``: string, 16 bytes per batch of page N (base offset, global sequence number),
  which the read script binary-searches and the archiver uses for the total order;
- ``stats``: hash, closed page number -> "records bytes".
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgpack
from redis.asyncio import Redis
from redis.exceptions import ResponseError

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
    Kafka error code (OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_PRODUCER_EPOCH)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"producer sequence check failed (Kafka error {code})")
        self.code = code


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
        for name, value, low in (
            ("partitions", self.partitions, 1),
            ("page size", self.page_size, 1),
            ("ttl", self.ttl, 0),
            ("max pages", self.max_pages, 0),
        ):
            if value < low:
                raise InvalidConfig(f"{name} must be at least {low}, got {value}")
        if self.partitions > 10_000:
            raise InvalidConfig("at most 10000 partitions per topic")

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
    below_start: bool = False  # the offset was removed by retention
    past_end: bool = False


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


def _raise_log_error(exc: ResponseError) -> None:
    """Turn a Lua error_reply ("CODE message") into the matching LogError."""
    code, _, message = str(exc).partition(" ")
    if code == "UNKNOWN_TOPIC_OR_PARTITION":
        raise UnknownTopic(message) from None
    if code == "TOPIC_EXISTS":
        raise TopicExists(message) from None
    raise exc


class Log:
    """Topics and partitions kept in one Redis database."""

    def __init__(self, redis: Redis, namespace: str = "ks") -> None:
        self.redis = redis
        self.ns = namespace
        self.scripts = Scripts(redis)
        self._topics_key = f"{namespace}:topics"
        self._gseq_key = f"{namespace}:gseq"

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
        try:
            await self.scripts.create(
                keys=[self._topics_key, self._config_key(config.name), *metas],
                args=[config.name, config.pack(), config.page_size, config.ttl, config.max_pages],
            )
        except ResponseError as exc:
            _raise_log_error(exc)
        return config

    async def topic(self, name: str) -> TopicConfig:
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
        return sorted(n.decode() for n in await self.redis.smembers(self._topics_key))

    async def delete_topic(self, name: str) -> None:
        config = await self.topic(name)
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
        again; a gap or an old epoch raises ProducerFenced and writes nothing."""
        args: list[object] = [self._prefix(topic, partition), self.channel(topic)]
        for batch in batches:
            args += (
                int.from_bytes(batch[_LAST_OFFSET_DELTA], "big", signed=True) + 1,
                int.from_bytes(batch[_PRODUCER_ID], "big", signed=True),
                int.from_bytes(batch[_PRODUCER_EPOCH], "big", signed=True),
                int.from_bytes(batch[_BASE_SEQUENCE], "big", signed=True),
                batch,
            )
        meta, index, stats, producers = self._keys(topic, partition)
        try:
            code, *result = await self.scripts.append(
                keys=[meta, index, stats, self._gseq_key, producers], args=args
            )
        except ResponseError as exc:
            _raise_log_error(exc)
            raise  # unreachable: keeps type checkers honest
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
        the first batch comes even when it alone exceeds them."""
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
        return ReadResult(batches, start, end, epoch, status == 1, status == 2)

    async def state(self, topic: str, partition: int) -> PartitionState:
        """Apply retention, then report offsets, pages and bytes held."""
        try:
            values = await self.scripts.state(
                keys=self._keys(topic, partition), args=[self._prefix(topic, partition)]
            )
        except ResponseError as exc:
            _raise_log_error(exc)
            raise
        return PartitionState(*values)

    async def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (ms) still in
        Redis, or None when there is none (ListOffsets by time)."""
        await self.state(topic, partition)  # raises UnknownTopic; applies retention
        batch = await self.scripts.find_time(
            keys=[self._keys(topic, partition)[1]], args=[self._prefix(topic, partition), timestamp]
        )
        if batch is None:
            return None
        for record in decode_batch(batch):
            if record.timestamp >= timestamp:
                return record.offset, record.timestamp
        return None

    async def new_producer_id(self) -> int:
        """A producer id no other producer of this Redis has had."""
        return await self.redis.incr(f"{self.ns}:producer_ids")
