"""A classic group's stored state: the msgpack value, its save and its per-group lock.

This module owns how a group (kafkaesque/groups/state.py ``Group``) lives in Redis: one
value per group, read with ``load`` and written with ``save`` (with the group lists, in
one MULTI: kafkaesque/hot/group_offsets.py ``save_group``), every read-modify-write under a
short per-group lock (``lock``) whose timeout frees it if a process dies holding it. The
group coordinator (groups/coordinator.py, the protocol's rounds) and its offsets and admin
side (kafkaesque/groups/admin.py) share one ``GroupStore``; a save announces the change
through the callback the coordinator gives, so waiting requests wake up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError, LockNotOwnedError

from kafkaesque.errors import HotTierUnavailable
from kafkaesque.groups.state import Group
from kafkaesque.hot.group_offsets import save_group
from kafkaesque.hot.keys import Keys


class GroupStore:
    """Load, save and lock classic groups; ``saved`` is told each group id saved."""

    def __init__(self, redis: Redis, keys: Keys, saved: Callable[[str], None]) -> None:
        self.redis = redis
        self.keys = keys
        self.saved = saved

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
        self.saved(gid)

    def lock(self, group_id: str) -> Any:
        return group_lock(self.redis, self.keys, group_id)


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
