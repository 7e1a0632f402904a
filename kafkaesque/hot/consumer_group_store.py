"""A KIP-848 consumer group's stored state: one msgpack value beside the classic group's
keys (``ks:group:{G}:consumer``), saved with the group lists in one MULTI (kafkaesque/hot/
group_offsets.py ``save_group``) and changed only under the per-group lock the classic
groups take (``GroupRecords``, kafkaesque/hot/group_store.py), so a group id is a classic
group or a consumer group, never both. The coordinator is kafkaesque/groups/consumer.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

from kafkaesque.groups.consumer_state import ConsumerGroup
from kafkaesque.groups.state import Group
from kafkaesque.hot.group_offsets import save_group
from kafkaesque.hot.group_store import GroupRecords

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log


class ActiveConsumerGroup(NamedTuple):
    """A consumer group listed active, read in ``ConsumerGroupStore.active``: None if it
    is gone."""

    group_id: str
    group: ConsumerGroup | None
    heartbeats: dict[str, int]
    configs: dict[str, str]


class ConsumerGroupStore(GroupRecords):
    """Load, save, list and delete consumer groups; the lock, heartbeats and configs are
    the group id's (``GroupRecords``)."""

    @classmethod
    def of(cls, log: Log) -> ConsumerGroupStore:
        """The store on the log's client and keys."""
        return cls(log.redis, log.keys)

    async def load(self, group_id: str) -> ConsumerGroup | None:
        # Replies are bytes: the client does not decode them.
        data = cast("bytes | None", await self.redis.get(self.keys.group(group_id, ":consumer")))
        return None if data is None else ConsumerGroup.unpack(data)

    async def save(self, group: ConsumerGroup, heartbeat: tuple[str, int] | None = None) -> None:
        """The group, listed (its offsets archived with the rest), and in the same MULTI
        ``heartbeat`` (member id, ms) if given."""
        gid, k = group.group_id, self.keys

        def beat(pipe: Any) -> None:
            if heartbeat is not None:
                pipe.hset(k.group(gid, ":heartbeats"), *heartbeat)

        await save_group(
            self.redis,
            k,
            gid,
            (k.group(gid, ":consumer"), group.pack()),
            k.consumer_groups_active,
            bool(group.members),
            more=beat,
        )

    async def unlist(self, group_id: str) -> None:
        """No longer list the group as active (it is gone)."""
        await self.redis.srem(self.keys.consumer_groups_active, group_id)

    async def active(self) -> list[ActiveConsumerGroup]:
        """Every consumer group listed active, with its heartbeats and configs, in one
        round trip, by id."""
        return [
            ActiveConsumerGroup(
                g, None if raw is None else ConsumerGroup.unpack(raw), beats, configs
            )
            for g, raw, beats, configs in await self.listed_records(
                self.keys.consumer_groups_active, ":consumer", with_configs=True
            )
        ]

    async def load_many(self, group_ids: list[str]) -> dict[str, ConsumerGroup]:
        """Of ``group_ids``, the consumer groups there are."""
        if not group_ids:
            return {}
        keys = [self.keys.group(g, ":consumer") for g in group_ids]
        # Groups are in slots of their own on a cluster: one GET per slot there.
        mget = self.redis.mget_nonatomic if self.keys.cluster else self.redis.mget  # type: ignore[attr-defined]
        raws = await mget(keys)
        return {
            g: ConsumerGroup.unpack(raw)
            for g, raw in zip(group_ids, raws, strict=True)
            if raw is not None
        }

    async def delete(self, group_id: str) -> None:
        """Delete the group, its offsets and staged offsets, and unlist it; under its lock."""
        k = self.keys
        await self.redis.delete(
            k.group(group_id, ":consumer"),
            k.group(group_id, ":offsets"),
            k.group_txn_offsets(group_id),  # a later commit brings none back
        )
        await self.redis.srem(k.groups, group_id)

    async def drop_state(self, group_id: str) -> None:
        """Drop the group's state alone (an empty group gives way to a classic one; its
        offsets stay)."""
        await self.redis.delete(self.keys.group(group_id, ":consumer"))

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
