"""A group's stored state: the classic group's msgpack value, its save and its per-group
lock, and what a group id keeps beside it whichever protocol it speaks.

This module owns how a group (kafkaesque/groups/state.py ``Group``) lives in Redis: one
value per group, read with ``load`` and written with ``save`` (with the group lists, in
one MULTI: kafkaesque/hot/group_offsets.py ``save_group``), every read-modify-write under a
short per-group lock (``lock``) whose timeout frees it if a process dies holding it; the
members' heartbeats (a hash beside the value, cheap to write), the group's dynamic
configs, the index sets (``groups``, ``groups:active``) and a group's deletion. The group
coordinator (groups/coordinator.py, the protocol's rounds) and its offsets and admin side
(kafkaesque/groups/admin.py) share one ``GroupStore``; a save announces the change on the
store's ``notifier``, so waiting requests, in this process or another, wake up. The
KIP-848 consumer groups' store (kafkaesque/hot/consumer_group_store.py) and the share
groups' (kafkaesque/hot/share_store.py) share ``GroupRecords``: the lock, heartbeats and
configs are one per group id; both keep their group's state with ``GroupStates``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar, cast

from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError, LockNotOwnedError
from redis.typing import EncodableT, FieldT

from kafkaesque.errors import HotTierUnavailable
from kafkaesque.groups.state import Group
from kafkaesque.hot.group_offsets import OffsetStore, indexed, save_group
from kafkaesque.hot.keys import Keys
from kafkaesque.hot.notify import Notifier
from kafkaesque.hot.txn_offsets import StagedOffsets

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


def decoded_configs(raw: Any) -> dict[str, str]:
    """A configs hash as read: name -> value."""
    # Replies are bytes: the client does not decode them.
    return {k.decode(): v.decode() for k, v in cast("dict[bytes, bytes]", raw).items()}


def decoded_heartbeats(raw: Any) -> dict[str, int]:
    """A heartbeats hash as read: member id -> last heartbeat (ms)."""
    return {k.decode(): int(v) for k, v in cast("dict[bytes, bytes]", raw).items()}


class GroupRecords:
    """What a group id keeps whichever protocol it speaks: its lock, its members'
    heartbeats (member id -> last heartbeat, ms) and its dynamic configs."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    def lock(self, group_id: str) -> Any:
        return group_lock(self.redis, self.keys, group_id)

    async def heartbeat(self, group_id: str, member_id: str, now_ms: int) -> None:
        await self.redis.hset(self.keys.group(group_id, ":heartbeats"), member_id, now_ms)

    async def heartbeats(self, group_id: str) -> dict[str, int]:
        return decoded_heartbeats(
            await self.redis.hgetall(self.keys.group(group_id, ":heartbeats"))
        )

    async def forget_heartbeats(self, group_id: str, member_ids: list[str]) -> None:
        await self.redis.hdel(self.keys.group(group_id, ":heartbeats"), *member_ids)

    async def configs(self, group_id: str) -> dict[str, str]:
        """The group's dynamic configs (name -> value); kept whether or not it exists."""
        return decoded_configs(await self.redis.hgetall(self.keys.group_configs(group_id)))

    async def listed_records(
        self, listed: str, state_part: str, with_configs: bool = False
    ) -> list[tuple[str, bytes | None, dict[str, int], dict[str, str]]]:
        """The groups in the set ``listed``, by id, in one round trip: each (id, its state
        at ``Keys.group(id, state_part)`` as stored, None if gone, its heartbeats, its
        configs if ``with_configs``, else empty)."""
        # Replies are bytes: the client does not decode them.
        group_ids = sorted(
            g.decode() for g in cast("set[bytes]", await self.redis.smembers(listed))
        )
        if not group_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for g in group_ids:
            pipe.get(self.keys.group(g, state_part))
            pipe.hgetall(self.keys.group(g, ":heartbeats"))
            if with_configs:
                pipe.hgetall(self.keys.group_configs(g))
        replies = iter(await pipe.execute())
        return [
            (
                g,
                next(replies),
                decoded_heartbeats(next(replies)),
                decoded_configs(next(replies)) if with_configs else {},
            )
            for g in group_ids
        ]


class StoredGroup(Protocol):
    """A KIP-848 consumer group or a share group, as ``GroupStates`` keeps it."""

    @property
    def group_id(self) -> str: ...

    @property
    def members(self) -> Mapping[str, Any]: ...

    def pack(self) -> bytes: ...


StateT = TypeVar("StateT", bound=StoredGroup)


class ActiveState(NamedTuple, Generic[StateT]):
    """A group listed active, read in ``GroupStates.active``: None if it is gone."""

    group_id: str
    group: StateT | None
    heartbeats: dict[str, int]
    configs: dict[str, str]


class GroupStates(GroupRecords, abc.ABC, Generic[StateT]):
    """One kind of group's state: a msgpack value at ``Keys.group(id, part)``, saved with
    the group lists (and listed in ``active`` while it has members) in one MULTI
    (``save_group``), read back with ``unpack``."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        part: str,
        active: str,
        unpack: Callable[[bytes], StateT],
    ) -> None:
        super().__init__(redis, keys)
        self._part, self._active, self._unpack = part, active, unpack

    def state_key(self, group_id: str) -> str:
        return self.keys.group(group_id, self._part)

    async def load(self, group_id: str) -> StateT | None:
        # Replies are bytes: the client does not decode them.
        raw = cast("bytes | None", await self.redis.get(self.state_key(group_id)))
        return None if raw is None else self._unpack(raw)

    async def load_many(self, group_ids: list[str]) -> dict[str, StateT]:
        """Of ``group_ids``, the groups of this kind there are."""
        if not group_ids:
            return {}
        keys = [self.state_key(g) for g in group_ids]
        # Groups are in slots of their own on a cluster: one GET per slot there.
        mget = self.redis.mget_nonatomic if self.keys.cluster else self.redis.mget  # type: ignore[attr-defined]
        raws = await mget(keys)
        return {
            g: self._unpack(raw) for g, raw in zip(group_ids, raws, strict=True) if raw is not None
        }

    async def save(self, group: StateT, heartbeat: tuple[str, int] | None = None) -> None:
        """The group, listed (its offsets archived with the rest), and in the same MULTI
        ``heartbeat`` (member id, ms) if given."""
        gid, k = group.group_id, self.keys

        def beat(pipe: Any) -> None:
            if heartbeat is not None:
                pipe.hset(k.group(gid, ":heartbeats"), *heartbeat)

        state = (self.state_key(gid), group.pack())
        await save_group(self.redis, k, gid, state, self._active, bool(group.members), more=beat)

    @abc.abstractmethod
    async def delete(self, group_id: str) -> None:
        """Delete the group and what its kind keeps beside its state (DeleteGroups); under
        its lock."""

    async def unlist(self, group_id: str) -> None:
        """No longer list the group as active (it is gone)."""
        await self.redis.srem(self._active, group_id)

    async def active(self) -> list[ActiveState[StateT]]:
        """Every group of this kind listed active, with its heartbeats and configs, in one
        round trip, by id."""
        return [
            ActiveState(g, None if raw is None else self._unpack(raw), beats, configs)
            for g, raw, beats, configs in await self.listed_records(
                self._active, self._part, with_configs=True
            )
        ]


class ActiveGroup(NamedTuple):
    """A group listed active, read in ``GroupStore.active``: None if it is gone."""

    group_id: str
    group: Group | None
    heartbeats: dict[str, int]


class GroupStore(GroupRecords):
    """Load, save and lock classic groups, and what they keep beside their state: the
    committed ``offsets``, the offsets transactions hold ``staged`` for them, and the
    ``notifier`` each save announces the group's change on."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis, keys)
        self.notifier = Notifier(redis, keys.group_events(""))
        self.offsets = OffsetStore(redis, keys)
        self.staged = StagedOffsets(redis, keys)

    @classmethod
    def of(cls, log: Log) -> GroupStore:
        """The store on the log's client and keys."""
        return cls(log.redis, log.keys)

    async def load(self, group_id: str) -> Group | None:
        data = await self.redis.get(self.keys.group(group_id))
        return None if data is None else Group.unpack(cast(bytes, data))  # replies are bytes

    async def save(self, group: Group) -> None:
        k, gid = self.keys, group.group_id
        await save_group(
            self.redis,
            k,
            gid,
            (k.group(gid), group.pack()),
            k.groups_active,
            bool(group.members),
            event=group.generation,
        )
        self.notifier.notify(gid)

    async def mark_active(self, group_id: str) -> None:
        """List the group as having members (heals the set: see the coordinator's tick)."""
        await self.redis.sadd(self.keys.groups_active, group_id)

    async def active(self) -> list[ActiveGroup]:
        """Every group listed active, with its heartbeats, in one round trip, by id."""
        return [
            ActiveGroup(g, None if raw is None else Group.unpack(raw), beats)
            for g, raw, beats, _ in await self.listed_records(self.keys.groups_active, "")
        ]

    async def replace_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """The group's dynamic configs become ``configs`` (empty: none), at once."""
        key = self.keys.group_configs(group_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(key)
        if configs:
            # (a dict[str, str] is a valid mapping: redis-py's key type is invariant)
            pipe.hset(key, mapping=cast("dict[FieldT, EncodableT]", configs))
        await pipe.execute()

    async def list_groups(self) -> list[str]:
        """Every group id listed (classic or consumer protocol), sorted."""
        names = cast("set[bytes]", await self.redis.smembers(self.keys.groups))  # replies are bytes
        return sorted(g.decode() for g in names)

    async def drop(self, group_id: str) -> None:
        """Delete a group of either protocol, its offsets, staged offsets and heartbeats,
        and unlist it; called under its lock."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(
            k.group(group_id),
            k.group(group_id, ":consumer"),  # a consumer group's (KIP-848) state
            k.group(group_id, ":offsets"),
            k.group_txn_offsets(group_id),  # a later commit brings none back
            k.group(group_id, ":heartbeats"),
        )
        index = [k.groups, k.groups_active, k.consumer_groups_active]
        if not k.cluster:
            for key in index:
                pipe.srem(key, group_id)
        await pipe.execute()
        if k.cluster:  # after: see group_offsets.indexed
            await indexed(self.redis, group_id, [], index)


def group_lock(redis: Redis, keys: Keys, group_id: str) -> Any:
    """A group's lock, one per group id whichever protocol it speaks (so converting a
    group cannot race a join), held for one read-modify-write; the timeout frees it if a
    process dies holding it."""
    return redis.lock(
        keys.group(group_id, ":lock"), timeout=10, blocking_timeout=10, lock_class=_GroupLock
    )


class _GroupLock(Lock):
    """A group's lock whose release, when the key is gone or another's, is no error:
    Redis lost its data while it was held (a FLUSHALL takes the key), or the holder outlived
    the timeout. The writes made under it stand either way; raising would fail the request
    (or the sweep) after the fact."""

    async def do_release(self, expected_token: bytes) -> None:
        try:
            await super().do_release(expected_token)
        except LockNotOwnedError:
            pass

    async def __aenter__(self) -> _GroupLock:
        """The lock, or HotTierUnavailable when it stays taken past the blocking timeout:
        its holder stalled (a paused Redis primary answers it late), so the client should
        retry (COORDINATOR_NOT_AVAILABLE), not meet an internal error."""
        try:
            await super().__aenter__()
        except LockError:
            raise HotTierUnavailable(
                f"the group's lock ({self.name!r}) stayed taken for "
                f"{self.blocking_timeout} s; retry"
            ) from None
        return self
