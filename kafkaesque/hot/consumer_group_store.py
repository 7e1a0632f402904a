"""A KIP-848 consumer group's stored state: one msgpack value beside the classic group's
keys (``ks:group:{G}:consumer``), saved with the group lists in one MULTI (kafkaesque/hot/
group_store.py ``GroupStates``) and changed only under the per-group lock the classic
groups take (``GroupRecords``, kafkaesque/hot/group_store.py), so a group id is a classic
group or a consumer group, never both. The coordinator is kafkaesque/groups/consumer.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from redis.asyncio import Redis

from kafkaesque.groups.consumer_state import ConsumerGroup
from kafkaesque.groups.state import Group
from kafkaesque.hot.group_store import GroupStates
from kafkaesque.hot.keys import Keys

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


class ConsumerGroupStore(GroupStates[ConsumerGroup]):
    """Load, save, list and delete consumer groups (``GroupStates``); the lock, heartbeats
    and configs are the group id's (``GroupRecords``)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(
            redis, keys, ":consumer", keys.consumer_groups_active, ConsumerGroup.unpack
        )

    @classmethod
    def of(cls, log: Log) -> ConsumerGroupStore:
        """The store on the log's client and keys."""
        return cls(log.redis, log.keys)

    async def delete(self, group_id: str) -> None:
        """Delete the group, its offsets and staged offsets, and unlist it; under its lock."""
        k = self.keys
        await self.redis.delete(
            self.state_key(group_id),
            k.group(group_id, ":offsets"),
            k.group_txn_offsets(group_id),  # a later commit brings none back
        )
        await self.redis.srem(k.groups, group_id)

    async def drop_state(self, group_id: str) -> None:
        """Drop the group's state alone (an empty group gives way to a classic one; its
        offsets stay)."""
        await self.redis.delete(self.state_key(group_id))

    # -- the classic group under the same id ------------------------------------------------
    async def classic(self, group_id: str) -> Group | None:
        """The classic group of that id, if there is one."""
        # Replies are bytes: the client does not decode them.
        raw = cast("bytes | None", await self.redis.get(self.keys.group(group_id)))
        return None if raw is None else Group.unpack(raw)

    async def drop_classic(self, group_id: str) -> None:
        """Drop the classic group's state and heartbeats and unlist it as active (it gives
        way to a consumer group; its offsets stay)."""
        await self.redis.delete(self.keys.group(group_id), self.keys.group(group_id, ":heartbeats"))
        await self.redis.srem(self.keys.groups_active, group_id)
