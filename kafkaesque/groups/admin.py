"""A classic group's offsets and administration: commits, expiry, configs, list, delete.

This module owns what a group keeps beyond its rounds: the committed offsets (a hash per
group, kafkaesque/hot/group_offsets.py ``OffsetStore``) with OffsetCommit's checks, a
transaction's pending offsets settled at its end, the CLI's resets, OffsetDelete, a
deleted topic's offsets dropped, offsets.retention.minutes expiry (of classic and
consumer-protocol groups), the group's dynamic configs, ListGroups and DeleteGroups.
Every change runs under the group's lock (kafkaesque/hot/group_store.py); the protocol's
rounds (kafkaesque/groups/coordinator.py ``GroupCoordinator``) hold a ``GroupAdmin`` as ``admin``
and call on it for offset expiry in their sweep.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kafkaesque.clock import Clock
from kafkaesque.config.group_keys import check_group_configs
from kafkaesque.errors import Code, GroupBusy
from kafkaesque.groups.consumer import consumer_commit_error, consumer_group_subscriptions
from kafkaesque.groups.rules import (
    FIRST_EPOCH_AWARE_COMMIT,
    commit_error,
    is_subscribed,
    offset_delete_error,
    offset_expires_from,
)
from kafkaesque.groups.state import Group
from kafkaesque.groups.types import CoordinatorConfig, GroupState
from kafkaesque.hot.consumer_group_store import ConsumerGroupStore
from kafkaesque.hot.group_offsets import CommittedOffset, OffsetStore
from kafkaesque.hot.group_store import GroupStore


@dataclass(eq=False)
class GroupAdmin:
    """A group's offsets, configs, listing and deletion. ``consumer_groups``: the KIP-848
    groups under the same ids; ``expired``: the group with the members whose session
    ended removed (the coordinator's), called under its lock."""

    store: GroupStore
    consumer_groups: ConsumerGroupStore
    config: CoordinatorConfig
    clock: Clock
    expired: Callable[[str], Awaitable[Group | None]]
    offsets: OffsetStore = field(init=False)

    def __post_init__(self) -> None:
        self.offsets = self.store.offsets

    # -- offsets --------------------------------------------------------------------
    async def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[tuple[str, int], tuple[int, str | None, int]],
        api_version: int = FIRST_EPOCH_AWARE_COMMIT,
    ) -> Code:
        """Store offsets (topic, partition) -> (offset, metadata, leader epoch). A commit with
        generation -1 and no member is a standalone one, allowed while the group is empty;
        ``api_version`` (of OffsetCommit) picks the codes of some refusals."""
        if not group_id:
            return Code.INVALID_GROUP_ID
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            # KIP-848 hook: a consumer-protocol group checks member epochs instead.
            consumer = await consumer_commit_error(
                self.consumer_groups, group_id, member_id, generation, api_version
            )
            error = commit_error(group, member_id, instance_id, generation, api_version)
            error = error if consumer is None else consumer
            if error:
                return error
            if group is None and consumer is None:
                await self.store.save(Group(group_id))
            now = self.clock.now_ms()
            await self.offsets.write(
                group_id,
                {
                    tp: CommittedOffset(offset, metadata or "", now, epoch)
                    for tp, (offset, metadata, epoch) in offsets.items()
                },
            )
        return Code.NONE

    async def settle_pending(
        self,
        group_id: str,
        fields: list[bytes],
        offsets: dict[tuple[str, int], CommittedOffset] | None,
    ) -> None:
        """A transaction's end for the group: its pending offsets (``fields`` of the
        group's txnoffsets) dropped, and with ``offsets`` (a commit) those written, under
        the group's lock, so a sweep or a DeleteGroups sees them pending or committed,
        never neither. A group id not seen before gets its group, listed, as Kafka."""
        async with self.store.lock(group_id):
            if offsets:
                if await self.store.load(group_id) is None and (
                    await consumer_group_subscriptions(self.consumer_groups, group_id) is None
                ):
                    await self.store.save(Group(group_id, empty_since_ms=self.clock.now_ms()))
                await self.offsets.write(group_id, offsets)
            await self.store.staged.drop(group_id, fields)

    async def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        return await self.offsets.read(group_id)

    async def reset_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Set committed offsets from outside the group (the CLI); refused with members."""
        error = await self.commit(
            group_id, -1, "", None, {k: (v, "", -1) for k, v in offsets.items()}
        )
        if error:
            raise GroupBusy(f"group {group_id} has active members; stop them first")

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[Code, dict[tuple[str, int], Code]]:
        """OffsetDelete: the group's error, and each partition's. Offsets of a topic a
        member subscribes to stay (GROUP_SUBSCRIBED_TO_TOPIC); a partition with no
        offset is deleted all the same."""
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            error = offset_delete_error(group)
            if error:
                return error, {}
            assert group is not None
            results = {
                tp: Code.GROUP_SUBSCRIBED_TO_TOPIC if is_subscribed(group, tp[0]) else Code.NONE
                for tp in partitions
            }
            await self.offsets.delete(group_id, [tp for tp, e in results.items() if not e])
        return Code.NONE, results

    async def forget_topic(self, topic: str) -> int:
        """Drop every group's committed offsets of a deleted topic, as Kafka does, so a
        topic created again under the name starts where auto.offset.reset says rather
        than at the old topic's offsets. Returns how many offsets were dropped."""
        return await self.offsets.forget_topic(topic, await self.list_groups())

    # -- offset expiry (the coordinator's sweep, under the group's lock) -----------------
    async def expire_offsets(self, group: Group, now: int) -> None:
        """Drop the offsets past offsets.retention.minutes (``offset_expires_from`` says
        from when); a group left empty that long, with no offsets, goes too, as in Kafka.
        Called under the group's lock."""
        long_empty = (
            group.state == GroupState.EMPTY
            and (group.empty_since_ms or 0) + self.config.offsets_retention_ms <= now
            and not any(t > now for t in group.pending.values())  # ids handed out
        )
        await self._expire(
            group.group_id,
            now,
            lambda topic, commit_ms: offset_expires_from(group, topic, commit_ms),
            long_empty,
        )

    async def expire_consumer_group_offsets(self, group_id: str, now: int) -> None:
        """A consumer group's offsets of topics no member subscribes to expire from their
        commit; the group goes once it is empty and has none left, as Kafka's group
        coordinator does. Called under the group's lock."""
        found = await consumer_group_subscriptions(self.consumer_groups, group_id)
        if found is None:
            return
        has_members, subscribed = found
        await self._expire(
            group_id,
            now,
            lambda topic, commit_ms: None if topic in subscribed else commit_ms,
            not has_members,
        )

    async def _expire(
        self,
        group_id: str,
        now: int,
        expires_from: Callable[[str, int], int | None],
        may_go: bool,
    ) -> None:
        """Drop the group's offsets whose retention, started when ``expires_from`` (topic,
        commit time) says (None: kept), has passed; then the group itself, if ``may_go``
        and none is left. Offsets an open transaction holds for the group keep it, and
        their partitions."""
        retention = self.config.offsets_retention_ms
        committed = await self.offsets.read(group_id)
        pending = await self.store.staged.partitions(group_id)
        expired = [
            tp
            for tp, c in committed.items()
            if tp not in pending
            and (start := expires_from(tp[0], c.commit_ms)) is not None
            and start + retention <= now
        ]
        await self.offsets.delete(group_id, expired)
        if may_go and len(expired) == len(committed) and not pending:
            await self._drop(group_id)

    # -- group configs (DescribeConfigs, IncrementalAlterConfigs on a GROUP) ---------------
    async def group_configs(self, group_id: str) -> dict[str, str]:
        """The group's dynamic configs (name -> canonical value); kept whether or not the
        group exists, as Kafka keeps them."""
        return await self.store.configs(group_id)

    async def alter_group_configs(
        self,
        group_id: str,
        change: Callable[[dict[str, str]], dict[str, str]],
        defaults: dict[str, str],
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Replace the group's configs by ``change`` of them, checked as a whole against
        the broker's ``defaults`` and bounds (``check_group_configs``; InvalidConfig), under
        the group's lock so two alters do not lose one another's change."""
        async with self.store.lock(group_id):
            configs = change(await self.group_configs(group_id))
            check_group_configs(configs, defaults)
            if not validate_only:
                await self.store.replace_configs(group_id, configs)
        return configs

    # -- listing, deletion --------------------------------------------------------------
    async def list_groups(self) -> list[str]:
        return await self.store.list_groups()

    async def delete(self, group_id: str) -> Code:
        async with self.store.lock(group_id):
            # Members whose session ended are gone by now, as Kafka's timers remove them.
            group = await self.expired(group_id)
            if group is None:
                return Code.GROUP_ID_NOT_FOUND
            if group.members:
                return Code.NON_EMPTY_GROUP
            await self._drop(group_id)
        return Code.NONE

    async def _drop(self, group_id: str) -> None:
        """Delete a group and its offsets; called under its lock."""
        await self.store.drop(group_id)
