"""Share groups' state in Redis (KIP-932): the group (members, epochs, assignment) and,
per share-partition, its start and end offsets, in-flight records with their state and
delivery count, and acquisition locks. Each step on a share-partition is one Lua script
(kafkaesque/hot/lua/share_*.lua, with share_common.lua in front), so brokers sharing the
Redis never hand one record to two members. Keys (``Keys.share_partition``) carry the
group's hash tag: a group's share-partitions, state and lock share one slot.

``snapshot`` and ``restore`` carry share-partition state to and from the archive, as
kafkaesque/hot/group_offsets.py does for committed offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any, NamedTuple, cast

from redis.asyncio import Redis

from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.state import ShareGroup
from kafkaesque.hot.group_offsets import field_partition, partition_field
from kafkaesque.hot.group_store import GroupStates
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.scripts import Script
from kafkaesque.hot.tier import HotTier
from kafkaesque.types import TopicPartition

# The running totals a share-partition's state hash keeps (share_common.lua).
TOTALS = ("accepted", "released", "rejected", "archived", "redelivered", "expired")


@cache
def _source(name: str) -> str:
    lua = files("kafkaesque.hot") / "lua"
    return (lua / "share_common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


class Prepared(NamedTuple):
    """A share-partition before a fetch reads the log (share_prepare.lua)."""

    start: int  # SPSO
    end: int  # SPEO
    next_offset: int  # where to read; -1: the in-flight records are at their limit
    lock_deadline: int  # the earliest acquisition lock's deadline (ms), -1: none
    acquired: int
    available: int  # released records, to be delivered again
    archived: int  # offsets archived so far: rejected, past the delivery limit, aborted, markers


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A share-partition's state as described and archived."""

    start: int
    end: int
    acquired: int = 0
    available: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    records: dict[int, str] = field(default_factory=dict)  # offset -> stored state


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """Every share group's share-partitions, each group at a moment of its own, taken
    from ``as_of_ms`` (Redis' clock) on."""

    as_of_ms: int
    groups: dict[str, dict[TopicPartition, PartitionState]]


@dataclass(frozen=True, slots=True)
class SharePastEnd:
    """A restored share-partition whose start was past its partition's restored log end:
    the group had records Redis lost; it starts again at the end."""

    group_id: str
    topic: str
    partition: int
    start: int
    log_end: int


class ShareStore(GroupStates[ShareGroup]):
    """Share groups (``ks:group:{G}:share``, ``GroupStates``) and their share-partitions;
    the lock, heartbeats and configs are the group id's (``GroupRecords``)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis, keys, ":share", keys.share_groups_active, ShareGroup.unpack)
        # Calls go through the client's shared pipelined connection where it has one, as
        # the log's scripts do (kafkaesque/hot/scripts.py).
        pipelines = getattr(redis, "PIPELINES_SCRIPTS", False)
        shared = cast("HotTier", redis).pipelined() if pipelines else None
        for name in ("share_prepare", "share_acquire", "share_ack", "share_release"):
            setattr(self, name, Script(redis.register_script(_source(name)), shared))

    share_prepare: Script
    share_acquire: Script
    share_ack: Script
    share_release: Script

    # -- the group ----------------------------------------------------------------------
    async def exists_group(self, group_id: str) -> bool:
        return bool(await self.redis.exists(self.state_key(group_id)))

    async def other_kind(self, group_id: str) -> bool:
        """Whether a classic or consumer group has this id."""
        k = self.keys
        return bool(await self.redis.exists(k.group(group_id), k.group(group_id, ":consumer")))

    async def delete(self, group_id: str) -> None:
        """Delete the group and every share-partition of it (DeleteGroups); under its lock."""
        k = self.keys
        tps = await self.partitions(group_id)
        names = [name for tp in tps for name in k.share_partition(group_id, *tp)]
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(
            self.state_key(group_id),
            k.group(group_id, ":sp"),
            k.group(group_id, ":heartbeats"),
            *names,
        )
        if not k.cluster:
            pipe.srem(k.groups, group_id)
            pipe.srem(k.share_groups_active, group_id)
        await pipe.execute()
        if k.cluster:
            await self.redis.srem(k.groups, group_id)
            await self.redis.srem(k.share_groups_active, group_id)

    # -- share-partitions -----------------------------------------------------------------
    async def partitions(self, group_id: str) -> list[TopicPartition]:
        """The group's share-partitions with state, sorted."""
        raw = cast("set[bytes]", await self.redis.smembers(self.keys.group(group_id, ":sp")))
        return sorted(field_partition(m) for m in raw)

    def _keys(self, group_id: str, topic: str, partition: int) -> list[str]:
        return list(self.keys.share_partition(group_id, topic, partition))

    async def prepare(
        self,
        group_id: str,
        tp: TopicPartition,
        now_ms: int,
        config: ShareGroupConfig,
        init: int,
        log_start: int,
        log_end: int,
    ) -> Prepared:
        """share_prepare.lua: the share-partition made if new (at ``init``), expired locks
        released, and where to read next."""
        keys = [*self._keys(group_id, *tp), self.keys.group(group_id, ":sp")]
        limit, locks = config.delivery_count_limit, config.max_record_locks
        reply = await self.share_prepare(
            keys, [now_ms, limit, locks, init, log_start, log_end, partition_field(*tp)]
        )
        return Prepared(*(int(v) for v in reply))

    async def exists(self, group_id: str, tp: TopicPartition) -> bool:
        return bool(await self.redis.exists(self._keys(group_id, *tp)[0]))

    async def acquire(
        self,
        group_id: str,
        tp: TopicPartition,
        member_id: str,
        now_ms: int,
        config: ShareGroupConfig,
        max_records: int,
        batches: Sequence[tuple[int, int, bool]],
        strict: bool = False,
    ) -> list[tuple[int, int, int]]:
        """share_acquire.lua over the batches read, (first, last, acquirable) each;
        returns the acquired runs (first, last, delivery count). ``strict``: never more
        than ``max_records`` (else whole batches)."""
        lock, limit = config.record_lock_duration_ms, config.delivery_count_limit
        args: list[Any] = [member_id, now_ms, lock, limit, max_records, config.max_record_locks]
        args.append(1 if strict else 0)
        for first, last, data in batches:
            args += [first, last, 1 if data else 0]
        reply = await self.share_acquire(self._keys(group_id, *tp), args)
        values = [int(v) for v in reply]
        return [(values[i], values[i + 1], values[i + 2]) for i in range(0, len(values), 3)]

    async def acknowledge(
        self,
        group_id: str,
        tp: TopicPartition,
        member_id: str,
        now_ms: int,
        config: ShareGroupConfig,
        batches: Iterable[tuple[int, int, Sequence[int]]],
    ) -> tuple[int, str, int]:
        """share_ack.lua: (error code, message, records released); nothing changes on an
        error."""
        lock, limit = config.record_lock_duration_ms, config.delivery_count_limit
        args: list[Any] = [member_id, now_ms, lock, limit, 1 if config.renew_acknowledge else 0]
        for first, last, types in batches:
            args += [first, last, ",".join(str(t) for t in types) or "x"]
        reply = await self.share_ack(self._keys(group_id, *tp), args)
        code = int(reply[0])
        if code:
            message = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
            return code, message, 0
        return 0, "", int(reply[1])

    async def release(
        self, group_id: str, tps: Iterable[TopicPartition], member_id: str, config: ShareGroupConfig
    ) -> int:
        """share_release.lua on each share-partition: the member's records go back."""
        args = [member_id, config.delivery_count_limit]
        released = 0
        for tp in tps:
            released += int(await self.share_release(self._keys(group_id, *tp), args))
        return released

    async def states(
        self, group_id: str, tps: Iterable[TopicPartition], with_records: bool = False
    ) -> dict[TopicPartition, PartitionState]:
        """The share-partitions' states (those that have one), in one round trip."""
        tps = list(tps)
        pipe = self.redis.pipeline(transaction=not self.keys.cluster)
        for tp in tps:
            state, records, _ = self._keys(group_id, *tp)
            pipe.hgetall(state)
            if with_records:
                pipe.hgetall(records)
        replies = iter(await pipe.execute())
        out = {}
        for tp in tps:
            raw = cast("dict[bytes, bytes]", next(replies))
            stored = cast("dict[bytes, bytes]", next(replies)) if with_records else {}
            if not raw:
                continue
            values = {k.decode(): int(v) for k, v in raw.items()}
            out[tp] = PartitionState(
                values["spso"],
                values["speo"],
                values.get("acq", 0),
                values.get("avail", 0),
                {t: values.get(t, 0) for t in TOTALS},
                {int(k): v.decode() for k, v in stored.items()},
            )
        return out

    async def reset(self, group_id: str, tp: TopicPartition, offset: int) -> None:
        """AlterShareGroupOffsets: the share-partition starts afresh at ``offset``."""
        state, records, locks = self._keys(group_id, *tp)
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(records, locks)
        pipe.hset(state, mapping={"spso": offset, "speo": offset, "avail": 0, "acq": 0})
        pipe.sadd(self.keys.group(group_id, ":sp"), partition_field(*tp))
        await pipe.execute()

    async def forget(self, group_id: str, tps: Iterable[TopicPartition]) -> None:
        """DeleteShareGroupOffsets: the share-partitions' state is gone."""
        pipe = self.redis.pipeline(transaction=True)
        for tp in tps:
            pipe.delete(*self._keys(group_id, *tp))
            pipe.srem(self.keys.group(group_id, ":sp"), partition_field(*tp))
        await pipe.execute()

    # -- the archive's side -----------------------------------------------------------------
    async def share_group_ids(self) -> list[str]:
        """The group ids listed that are share groups or hold share-partitions."""
        ids = sorted(
            g.decode() for g in cast("set[bytes]", await self.redis.smembers(self.keys.groups))
        )
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for g in ids:
            pipe.exists(self.keys.group(g, ":share"), self.keys.group(g, ":sp"))
        return [g for g, n in zip(ids, await pipe.execute(), strict=True) if n]

    async def snapshot(self) -> ShareSnapshot | None:
        """Every share group's share-partitions with their in-flight records; None while
        Redis has lost its data (the marker is checked before and after)."""
        # Two commands, not a MULTI: a cluster's transactions take keyed commands only.
        marker = await self.redis.get(self.keys.incarnation)
        if marker is None:
            return None
        seconds, micros = await self.redis.time()
        groups = {}
        for group_id in await self.share_group_ids():
            groups[group_id] = await self.states(
                group_id, await self.partitions(group_id), with_records=True
            )
        if await self.redis.get(self.keys.incarnation) != marker:
            return None
        return ShareSnapshot(seconds * 1000 + micros // 1000, groups)

    async def restore(
        self,
        groups: dict[str, dict[TopicPartition, PartitionState]],
        log_ends: dict[TopicPartition, int],
    ) -> list[SharePastEnd]:
        """Give share-partitions back after Redis lost its data, as archived; returns those
        whose start was past their partition's restored log end. A record acquired then
        is AVAILABLE again, its delivery count kept (its member's answer is gone with
        Redis), as after its lock expired. A share-partition Redis already has, or of a
        partition that no longer exists, is left out; each group comes back empty (its
        members join again)."""
        past_end = []
        for group_id, partitions in groups.items():
            if await self.load(group_id) is None and not await self.other_kind(group_id):
                await self.save(ShareGroup(group_id))
            for tp, state in partitions.items():
                end = log_ends.get(tp)
                if end is None or await self.exists(group_id, tp):
                    continue
                start, stop = state.start, state.end
                if start > end:
                    past_end.append(SharePastEnd(group_id, *tp, start, end))
                start, stop = min(start, end), min(stop, end)
                records = {
                    str(o): v if v.startswith("a") else "a" + v[1:].split(" ", 1)[0]
                    for o, v in state.records.items()
                    if start <= o < stop
                }
                state_key, records_key, _ = self._keys(group_id, *tp)
                numbers: dict[str, int] = {
                    **state.totals,
                    "spso": start,
                    "speo": stop,
                    "avail": len(records),
                    "acq": 0,
                }
                pipe = self.redis.pipeline(transaction=True)
                pipe.hset(state_key, mapping=numbers)  # type: ignore[arg-type]
                if records:
                    pipe.hset(records_key, mapping=records)  # type: ignore[arg-type]
                pipe.sadd(self.keys.group(group_id, ":sp"), partition_field(*tp))
                await pipe.execute()
        return past_end
