"""Consumer groups' committed offsets in Redis: one hash per group, "topic\\0partition" ->
msgpack [offset, metadata, commit time (ms), leader epoch].

Besides reads and writes, this is where the offsets cross to the archive: ``snapshot``
takes every group's offsets as one consistent picture (or refuses while Redis has lost its
data, so an empty Redis is never mistaken for "every group deleted"), and ``restore``
gives them back to a Redis that lost its data, as they were committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgpack
from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from kafkaesque.clock import now_ms as clock_ms
from kafkaesque.groups.state import Group
from kafkaesque.hot.keys import Keys
from kafkaesque.types import TopicPartition


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_ms: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetsSnapshot:
    """Every group's committed offsets at one moment (``as_of_ms``, Redis' clock), and each
    classic group's state (``Group.pack``: generation, members, assignment) with them."""

    as_of_ms: int
    groups: dict[str, dict[TopicPartition, CommittedOffset]]
    states: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OffsetPastEnd:
    """A restored offset past its partition's restored log end: the group read records
    Redis lost, and new records take those offsets."""

    group_id: str
    topic: str
    partition: int
    committed: int
    log_end: int


def partition_field(topic: str, partition: int) -> str:
    """A partition as a hash field or set member of a group's (offsets, share-partitions)."""
    return f"{topic}\0{partition}"  # topic names have no NUL


def field_partition(raw: bytes) -> TopicPartition:
    """The partition a ``partition_field`` names."""
    topic, _, partition = raw.decode().rpartition("\0")
    return topic, int(partition)


def _pack(offset: CommittedOffset) -> bytes:
    return msgpack.packb([offset.offset, offset.metadata, offset.commit_ms, offset.leader_epoch])


def _parse(raw: Mapping[bytes, bytes]) -> dict[TopicPartition, CommittedOffset]:
    return {field_partition(k): CommittedOffset(*msgpack.unpackb(v)) for k, v in raw.items()}


class OffsetStore:
    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def write(self, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        values: dict[FieldT, EncodableT] = {
            partition_field(t, p): _pack(o) for (t, p), o in offsets.items()
        }
        if values:
            await self.redis.hset(self.keys.group(group_id, ":offsets"), mapping=values)

    async def read(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        raw = await self.redis.hgetall(self.keys.group(group_id, ":offsets"))
        return _parse(cast("dict[bytes, bytes]", raw))  # replies are bytes

    async def delete(self, group_id: str, partitions: list[TopicPartition]) -> None:
        if partitions:
            fields = [partition_field(t, p) for t, p in partitions]
            await self.redis.hdel(self.keys.group(group_id, ":offsets"), *fields)

    async def forget_topic(self, topic: str, group_ids: list[str]) -> int:
        """Drop the groups' offsets of a topic; returns how many were dropped."""
        dropped = 0
        prefix = f"{topic}\0".encode()
        for group_id in group_ids:
            key = self.keys.group(group_id, ":offsets")
            fields = cast("list[bytes]", await self.redis.hkeys(key))  # replies are bytes
            stale = [k for k in fields if k.startswith(prefix)]
            if stale:
                dropped += await self.redis.hdel(key, *stale)
        return dropped

    async def snapshot(self) -> OffsetsSnapshot | None:
        """Every group's offsets, read in one MULTI with the incarnation marker checked on
        both sides; None while Redis has lost its data (recovery has not run yet). On a
        cluster each group's offsets are read at a moment of their own (one HGETALL each,
        see ``_snapshot_per_group``)."""
        if self.keys.cluster:
            return await self._snapshot_per_group()
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.keys.incarnation)
        pipe.smembers(self.keys.groups)
        marker, members = await pipe.execute()
        if marker is None:
            return None
        group_ids = sorted(g.decode() for g in members)
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.keys.incarnation)
        pipe.time()
        pipe.smembers(self.keys.groups)
        for group_id in group_ids:
            pipe.hgetall(self.keys.group(group_id, ":offsets"))
            pipe.get(self.keys.group(group_id))
        again, (seconds, micros), now_members, *replies = await pipe.execute()
        if again != marker:
            return None
        # A group created between the two reads is taken at the next snapshot; one deleted
        # between them is left out now.
        present = {g.decode() for g in now_members}
        groups, states = {}, {}
        for group_id, raw, state in zip(group_ids, replies[::2], replies[1::2], strict=True):
            if group_id in present:
                groups[group_id] = _parse(raw)
                if state is not None:
                    states[group_id] = state
        return OffsetsSnapshot(seconds * 1000 + micros // 1000, groups, states)

    async def _snapshot_per_group(self) -> OffsetsSnapshot | None:
        """The cluster's snapshot: groups are in slots of their own, so no MULTI holds
        them all. The promise is "each group at one moment" instead of "every group at
        one moment"; ``as_of_ms`` is the catalog's time before the first read (the
        earliest), and the incarnation marker is checked before and after the walk."""
        # (Two reads, not a MULTI: redis-py's cluster transactions fail on SMEMBERS.)
        marker = await self.redis.get(self.keys.incarnation)
        if marker is None:
            return None
        seconds, micros = await self.redis.time()
        # Replies are bytes: the client does not decode them (here and below).
        members = cast("set[bytes]", await self.redis.smembers(self.keys.groups))
        group_ids = sorted(g.decode() for g in members)
        groups, states = {}, {}
        for group_id in group_ids:
            pipe = self.redis.pipeline(transaction=True)  # one slot: the group's
            pipe.hgetall(self.keys.group(group_id, ":offsets"))
            pipe.get(self.keys.group(group_id))
            raw, state = await pipe.execute()
            groups[group_id] = _parse(raw)
            if state is not None:
                states[group_id] = state
        now_members = cast("set[bytes]", await self.redis.smembers(self.keys.groups))
        again = await self.redis.get(self.keys.incarnation)
        if again != marker:
            return None
        present = {g.decode() for g in now_members}  # the index is a superset: see indexed
        groups = {g: offsets for g, offsets in groups.items() if g in present}
        states = {g: state for g, state in states.items() if g in present}
        return OffsetsSnapshot(seconds * 1000 + micros // 1000, groups, states)

    async def restore(
        self,
        groups: Mapping[str, Mapping[TopicPartition, CommittedOffset]],
        log_ends: Mapping[TopicPartition, int],
        states: Mapping[str, bytes] | None = None,
        now_ms: int | None = None,
    ) -> list[OffsetPastEnd]:
        """Give groups back their offsets after Redis lost its data; return those past
        their partition's restored log end. An offset Redis already has (a member committed
        since) wins; offsets of partitions that no longer exist are dropped.

        A group comes back in its archived state (``states``: generation, members and
        their assignment), as Kafka's coordinator loads a group after a failover: its
        members go on heartbeating and fetching, so the new leader epoch fences their
        fetches and they check their own positions (KIP-320), where a group lost with
        Redis made them join again and start over from the archived commits, which lag
        their positions, reading again, silently, offsets that now hold other records.
        Each member's session starts at ``now_ms`` (the clock's now): one that does not
        come back expires.
        A group Redis already has, or one without a usable state, comes back empty.

        An offset past the restored log end is kept as committed, with its leader epoch,
        as Kafka keeps one past an unclean leader's log end: the group read records that
        were lost, and new records take their offsets. Its consumers find out as in Kafka:
        while the new log ends below the offset a fetch there is OFFSET_OUT_OF_RANGE;
        OffsetForLeaderEpoch for the committed epoch answers the restored end, below the
        offset, so a client that validates a committed position (Java; KIP-320) sees the
        truncation; a consumer still running across the loss is fenced by the new epoch
        and validates its own position. Set back to the log end, the offset would hide all
        of it: every group consumer would read again, silently, offsets that now hold
        other records. (What the offset cannot tell: once new records passed it, a member
        starting anew with librdkafka, kafka-python or aiokafka, which start at a committed
        offset without validating it, goes on from it and does not read the new records
        below it.)"""
        past_end = []
        cluster = self.keys.cluster
        states = states or {}
        now = clock_ms() if now_ms is None else now_ms
        pipe = self.redis.pipeline(transaction=True)
        # Groups with a state and no offsets (members that never committed) come back too.
        no_offsets: dict[TopicPartition, CommittedOffset] = {}
        every = {**dict.fromkeys(states, no_offsets), **groups}
        for group_id, offsets in every.items():
            group = _restorable(group_id, states.get(group_id))
            index = [self.keys.groups, self.keys.groups_active] if group.members else []
            if cluster:  # one MULTI per group (its slot), listed first: see indexed
                await indexed(self.redis, group_id, index or [self.keys.groups], [])
                pipe = self.redis.pipeline(transaction=True)
            for (topic, partition), o in sorted(offsets.items()):
                end = log_ends.get((topic, partition))
                if end is None:
                    continue
                if o.offset > end:
                    past_end.append(OffsetPastEnd(group_id, topic, partition, o.offset, end))
                pipe.hsetnx(
                    self.keys.group(group_id, ":offsets"),
                    partition_field(topic, partition),
                    _pack(o),
                )
            if group.members:
                # Sessions start now (a member without a heartbeat would never expire).
                pipe.hset(
                    self.keys.group(group_id, ":heartbeats"),
                    mapping=dict.fromkeys(group.members, now),
                )
            pipe.set(self.keys.group(group_id), group.pack(), nx=True)
            if cluster:
                await pipe.execute()
            else:
                for key in index or [self.keys.groups]:
                    pipe.sadd(key, group_id)
        if not cluster:
            await pipe.execute()
        return past_end


def _restorable(group_id: str, state: bytes | None) -> Group:
    """The archived state of a group to restore, or an empty group if there is none or it
    cannot be read (an older format): losing the members only makes them join again."""
    if state is not None:
        try:
            group = Group.unpack(state)
        except (ValueError, TypeError, KeyError, msgpack.UnpackException):
            group = None
        if group is not None and group.group_id == group_id:
            return group
    return Group(group_id)


async def pending_transactional(redis: Redis, keys: Keys, group_id: str) -> set[TopicPartition]:
    """The group's partitions with offsets pending on an open transaction (staged by
    TxnOffsetCommit, kafkaesque.txn.offsets, as "transactional id NUL topic NUL
    partition"): the group and those offsets are kept from expiry, as in Kafka."""
    pending = set()
    # Replies are bytes: the client does not decode them.
    fields = cast("list[bytes]", await redis.hkeys(keys.group_txn_offsets(group_id)))
    for raw in fields:
        _, topic, partition = pending_field(raw)
        pending.add((topic, partition))
    return pending


def pending_field_name(transactional_id: str, topic: str, partition: int) -> str:
    """The field of an offset ``transactional_id`` holds pending (``pending_field``)."""
    return f"{transactional_id}\0{topic}\0{partition}"


def pending_field(raw: bytes) -> tuple[str, str, int]:
    """A pending offset's field: (transactional id, topic, partition). A transactional id
    may hold NUL; a topic name cannot."""
    transactional_id, topic, partition = raw.decode().rsplit("\0", 2)
    return transactional_id, topic, int(partition)


async def indexed(redis: Redis, group_id: str, added: list[str], removed: list[str]) -> None:
    """On a cluster the index sets (groups, groups:active, groups:consumer) are in the
    catalog's slot, apart from a group's keys, so no MULTI holds both. The rule instead:
    the index is a superset. A group is added *before* the write that makes it exist or
    have members and removed *after* the one that removes them: a reader of the index meets
    at worst a group that is gone (skipped, as ``tick_all`` skips it), never misses one."""
    if not added and not removed:
        return
    pipe = redis.pipeline(transaction=True)
    for key in added:
        pipe.sadd(key, group_id)
    for key in removed:
        pipe.srem(key, group_id)
    await pipe.execute()


async def save_group(
    redis: Redis,
    keys: Keys,
    group_id: str,
    state: tuple[str, bytes],
    active: str,
    has_members: bool,
    *,
    more: Callable[[Any], None] | None = None,
    event: int | None = None,
) -> None:
    """Write a group's ``state`` (key, value) with its index sets (``groups`` and the
    ``active`` set while it has members), in one MULTI on one Redis; on a cluster the sets
    are kept a superset around it (``indexed``). ``more`` adds commands on the group's own
    keys to the MULTI; ``event`` is published on the group's channel."""
    added = [keys.groups, active] if has_members else [keys.groups]
    removed = [] if has_members else [active]
    if keys.cluster:
        await indexed(redis, group_id, added, [])
    pipe = redis.pipeline(transaction=True)
    pipe.set(*state)
    if not keys.cluster:
        for key in added:
            pipe.sadd(key, group_id)
        for key in removed:
            pipe.srem(key, group_id)
    if not has_members:
        pipe.delete(keys.group(group_id, ":heartbeats"))
    if more is not None:
        more(pipe)
    if event is not None and not keys.cluster:
        pipe.publish(keys.group_events(group_id), event)
    await pipe.execute()
    if keys.cluster:  # a cluster client pipelines no PUBLISH: sent after the MULTI
        if event is not None:
            await redis.publish(keys.group_events(group_id), event)
        await indexed(redis, group_id, [], removed)
