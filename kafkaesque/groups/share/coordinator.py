"""The share group coordinator: ShareGroupHeartbeat, member expiry, describe, listing,
deletion and the share-partitions' offsets (Describe/Alter/DeleteShareGroupOffsets), all
state in Redis (kafkaesque/hot/share_store.py), every change of a group under the lock
its id has whichever kind of group it is, so brokers on one Redis agree and an id is a
classic, consumer or share group, never two.

A member that leaves or whose session expires gives its acquired records back at once,
as Kafka's share-partitions release a departed member's records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.errors import Code, Refused
from kafkaesque.groups.heartbeat_groups import TOPIC_REFRESH_MS, HeartbeatGroups, topic_entries
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    ShareGroup,
    ShareHeartbeat,
    ShareHeartbeatResult,
)
from kafkaesque.hot.log import Log
from kafkaesque.hot.share_store import PartitionState, ShareStore
from kafkaesque.types import TopicPartition


def validate(group_id: str, hb: ShareHeartbeat) -> None:
    """Kafka's request checks, before the group is looked at."""
    if not group_id:
        raise Refused.invalid("GroupId can't be empty.")
    if hb.rack_id is not None and not hb.rack_id:
        raise Refused.invalid("RackId can't be empty.")
    if not hb.member_id:
        raise Refused.invalid("MemberId can't be empty.")
    if hb.epoch == JOIN_EPOCH:
        if not hb.topics:
            raise Refused.invalid("SubscribedTopicNames must be set in first request.")
    elif hb.epoch < LEAVE_EPOCH:
        raise Refused.invalid("MemberEpoch is invalid.")


class ShareGroupCoordinator(HeartbeatGroups[ShareGroup, ShareGroupConfig]):
    """Share groups over Redis; ``on_departure`` is told when a member is gone (so its
    share sessions go)."""

    store: ShareStore

    def __init__(
        self, log: Log, config: ShareGroupConfig | None = None, clock: Clock = SYSTEM
    ) -> None:
        config = config or ShareGroupConfig()
        super().__init__(log, log.stores.share, config, clock, "share group expiry")
        # Told of each member gone (left or expired), after its records were released:
        # the share fetcher drops its share sessions.
        self.on_departure: Callable[[str, str], None] | None = None

    async def exists(self, group_id: str) -> bool:
        """Whether a share group has this id (a classic or consumer group cannot take it)."""
        return await self.store.exists_group(group_id)

    async def heartbeat(self, group_id: str, hb: ShareHeartbeat) -> ShareHeartbeatResult:
        """One ShareGroupHeartbeat; raises Refused with the error to answer."""
        validate(group_id, hb)
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            config = await self.group_config(group_id)
            now = self.clock.now_ms()
            if group is None:
                if hb.epoch != JOIN_EPOCH:
                    raise Refused(Code.UNKNOWN_MEMBER_ID, f"Group {group_id} has no such member.")
                await self._check_kind(group_id)
                group = ShareGroup(group_id)
            if hb.epoch == LEAVE_EPOCH:
                if not group.leave(hb.member_id):
                    raise Refused(
                        Code.UNKNOWN_MEMBER_ID,
                        f"Member {hb.member_id} is not a member of group {group_id}.",
                    )
                await self.store.save(group)
                await self.release(group_id, hb.member_id, config)
                await self.store.forget_heartbeats(group_id, [hb.member_id])
                return ShareHeartbeatResult(hb.member_id, LEAVE_EPOCH, None)
            before = group.pack()
            changed = group.heartbeat(hb, config.max_size)
            if changed or now - group.refreshed_ms >= TOPIC_REFRESH_MS:
                group.set_topics(await self._topics(group), now, changed)
            result = group.answer(hb.member_id, hb.epoch == JOIN_EPOCH)
            if group.pack() != before:
                await self.store.save(group, (hb.member_id, now))
            else:
                await self.store.heartbeat(group_id, hb.member_id, now)
            self._arm(group, await self.store.heartbeats(group_id), config)
            return result

    async def _check_kind(self, group_id: str) -> None:
        """A share group cannot take an id a classic or consumer group has (Kafka:
        GROUP_ID_NOT_FOUND, "not a share group")."""
        if await self.store.other_kind(group_id):
            raise Refused(Code.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")

    async def _topics(self, group: ShareGroup) -> dict[str, list]:
        """The subscribed topics' [topic id, partition count], those that exist."""
        return await topic_entries(self.log, group.subscribed())

    async def release(self, group_id: str, member_id: str, config: ShareGroupConfig) -> int:
        """A departed member's acquired records go back to the group."""
        tps = await self.store.partitions(group_id)
        released = await self.store.release(group_id, tps, member_id, config)
        if self.on_departure is not None:
            self.on_departure(group_id, member_id)
        return released

    # -- expiry ---------------------------------------------------------------------------
    async def tick(self, group_id: str) -> None:
        """Remove the members whose session ended (share.session.timeout.ms)."""
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            if group is None:
                await self.store.unlist(group_id)
                return
            config = await self.group_config(group_id)
            heartbeats = await self.store.heartbeats(group_id)
            gone = group.expire(heartbeats, self.clock.now_ms(), config.session_timeout_ms)
            if gone:
                await self.store.save(group)
                await self.store.forget_heartbeats(group_id, gone)
                for member_id in gone:
                    await self.release(group_id, member_id, config)
            self._arm(group, heartbeats, config)

    def _next_expiry(
        self, group: ShareGroup, heartbeats: dict[str, int], config: ShareGroupConfig
    ) -> int | None:
        return group.next_expiry(heartbeats, config.session_timeout_ms)

    # -- the classic group APIs and the admin ones -------------------------------------------
    async def offsets(
        self, group_id: str, topics: Mapping[str, list[int]] | None
    ) -> dict[TopicPartition, PartitionState | None]:
        """DescribeShareGroupOffsets: the share-partitions asked (``topics`` None: every
        one with state), each with its state or None (not initialized). Raises Refused
        GROUP_ID_NOT_FOUND for an id that is another kind of group."""
        await self._check_kind(group_id)
        if topics is None:
            tps = await self.store.partitions(group_id)
        else:
            tps = [(t, p) for t, ps in topics.items() for p in ps]
        states = await self.store.states(group_id, tps)
        return {tp: states.get(tp) for tp in tps}

    async def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """AlterShareGroupOffsets: each share-partition starts afresh at its offset; only
        while the group has no members (NON_EMPTY_GROUP), as Kafka."""
        await self._check_kind(group_id)
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            if group is not None and group.members:
                raise Refused(
                    Code.NON_EMPTY_GROUP,
                    "The group has active members; offsets can be altered only when it is empty.",
                )
            if group is None:  # Kafka creates the group, empty
                await self.store.save(ShareGroup(group_id))
            for tp, offset in offsets.items():
                await self.store.reset(group_id, tp, offset)

    async def forget_topic(self, topic: str) -> None:
        """A deleted topic's share-partitions go from every share group (a topic created
        again under its name starts afresh, at share.auto.offset.reset)."""
        for group_id in await self.store.share_group_ids():
            tps = [tp for tp in await self.store.partitions(group_id) if tp[0] == topic]
            if tps:
                await self.store.forget(group_id, tps)

    async def delete_offsets(self, group_id: str, topics: list[str]) -> None:
        """DeleteShareGroupOffsets: the topics' share-partitions lose their state (the
        next fetch starts at share.auto.offset.reset); only while the group is empty."""
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            if group is None:
                raise Refused(Code.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            if group.members:
                raise Refused(
                    Code.NON_EMPTY_GROUP,
                    "The group has active members; offsets can be deleted only when it is empty.",
                )
            wanted = set(topics)
            tps = [tp for tp in await self.store.partitions(group_id) if tp[0] in wanted]
            await self.store.forget(group_id, tps)
