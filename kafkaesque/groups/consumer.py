"""Consumer groups of the KIP-848 protocol (ConsumerGroupHeartbeat): the coordinator, with
all state in Redis.

The rules live in kafkaesque/groups/consumer_state.py; this module applies them to the
stored group (kafkaesque/hot/consumer_group_store.py ``ConsumerGroupStore``). A group's
state is one msgpack value beside the classic group's keys (``ks:group:{G}:consumer``)
and it is changed only under the same per-group lock the classic coordinator takes, so
brokers sharing a Redis agree, and a group id is a classic group or a consumer group,
never both: the functions at the end are the classic coordinator's hooks for that (a
JoinGroup to a consumer group, an OffsetCommit from a consumer-protocol member).
Committed offsets are the classic groups' store (``ks:group:{G}:offsets``), shared.

Unlike the classic protocol nothing waits here: members learn of changes by heartbeat.
"""

from __future__ import annotations

import dataclasses

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.errors import Code, Refused
from kafkaesque.groups import topic_regex
from kafkaesque.groups.assignors import ASSIGNORS
from kafkaesque.groups.consumer_state import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    Heartbeat,
    HeartbeatResult,
    new_member_id,
)
from kafkaesque.groups.heartbeat_groups import TOPIC_REFRESH_MS, HeartbeatGroups, topic_entries
from kafkaesque.hot.consumer_group_store import ConsumerGroupStore
from kafkaesque.hot.log import Log


def validate(hb: Heartbeat, version: int) -> None:
    """Kafka's request checks, before the group is looked at."""
    if not hb.member_id and (version >= 1 or hb.epoch != 0):
        raise Refused.invalid("MemberId can't be empty.")
    if hb.instance_id is not None and not hb.instance_id:
        raise Refused.invalid("InstanceId can't be empty.")
    if hb.epoch == STATIC_LEAVE_EPOCH and hb.instance_id is None:
        raise Refused.invalid("InstanceId can't be null.")
    if hb.epoch < STATIC_LEAVE_EPOCH:
        raise Refused.invalid(f"MemberEpoch {hb.epoch} is invalid.")
    if hb.epoch == 0:
        if hb.rebalance_timeout_ms == -1:
            raise Refused.invalid("RebalanceTimeoutMs must be provided in first request.")
        if hb.topics is None and hb.regex is None:
            raise Refused.invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
        if hb.owned:
            raise Refused.invalid("TopicPartitions must be empty when (re-)joining.")
    if hb.assignor is not None and hb.assignor not in ASSIGNORS:
        raise Refused(Code.UNSUPPORTED_ASSIGNOR, f"unknown assignor {hb.assignor!r}")
    if hb.regex:
        check_regex(hb.regex)


def check_regex(regex: str) -> None:
    """INVALID_REGULAR_EXPRESSION for a regex RE2/J refuses or we could not match safely."""
    why = topic_regex.problem(regex)
    if why is not None:
        raise Refused(Code.INVALID_REGULAR_EXPRESSION, f"invalid regex {regex!r}: {why}")


class ConsumerGroupCoordinator(HeartbeatGroups[ConsumerGroup, ConsumerGroupConfig]):
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe over Redis."""

    store: ConsumerGroupStore

    def __init__(
        self, log: Log, config: ConsumerGroupConfig | None = None, clock: Clock = SYSTEM
    ) -> None:
        store = ConsumerGroupStore.of(log)
        config = config or ConsumerGroupConfig()
        super().__init__(log, store, config, clock, "consumer group expiry")

    async def _save(self, group: ConsumerGroup, heartbeat: str | None = None) -> None:
        """Save the group, with the ``heartbeat`` of that member if it is still one."""
        beat = (
            (heartbeat, self.clock.now_ms())
            if heartbeat is not None and heartbeat in group.members
            else None
        )
        await self.store.save(group, beat)

    async def heartbeat(self, group_id: str, hb: Heartbeat, version: int) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat; raises Refused with the error to answer."""
        if not group_id:
            raise Refused.invalid("GroupId can't be empty.")
        validate(hb, version)
        if not hb.member_id:  # v0: the coordinator names new members
            hb = dataclasses.replace(hb, member_id=new_member_id())
        async with self.store.lock(group_id):
            group = await self.load(group_id)
            config = await self.group_config(group_id)
            now = self.clock.now_ms()
            if group is None:
                if hb.epoch != 0:
                    raise Refused(Code.GROUP_ID_NOT_FOUND, f"group {group_id} not found")
                await self._take_over_classic(group_id)
                group = ConsumerGroup(group_id)
            before = group.pack()
            interval = config.heartbeat_interval_ms
            if hb.epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                group.leave(hb.member_id, hb.epoch)
                await self._save(group)
                self._arm(group, await self.store.heartbeats(group_id), config)
                return HeartbeatResult(hb.member_id, hb.epoch, None, heartbeat_interval_ms=interval)
            epoch = group.epoch
            member, joined = group.update_member(hb)
            if joined or group.epoch != epoch or now - group.refreshed_ms >= TOPIC_REFRESH_MS:
                group.set_topics(await self._topics(group), now)
            result = group.heartbeat(hb, member, joined, now)
            if group.pack() != before:
                await self._save(group, heartbeat=member.member_id)
            else:
                await self.store.heartbeat(group_id, member.member_id, now)
            return dataclasses.replace(result, heartbeat_interval_ms=interval)

    async def _take_over_classic(self, group_id: str) -> None:
        """A new consumer group under an id a classic group has: refused while that group
        has members (Kafka with group.consumer.migration.policy=disabled); an empty one
        is dropped (its committed offsets stay)."""
        classic = await self.store.classic(group_id)
        if classic is None:
            return
        if classic.members:
            raise Refused(Code.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        await self.store.drop_classic(group_id)

    async def _topics(self, group: ConsumerGroup) -> dict[str, list]:
        """The subscribed topics' [topic id, partition count] from the log."""
        every = await self.log.list_topics() if group.has_regex() else None
        return await topic_entries(self.log, group.wanted_topics(every))

    # -- expiry (consumer.session.timeout.ms, revocation deadlines) -------------------------
    def _next_expiry(
        self, group: ConsumerGroup, heartbeats: dict[str, int], config: ConsumerGroupConfig
    ) -> int | None:
        return group.next_expiry(heartbeats, config)

    async def _expire(self, group_id: str) -> ConsumerGroup | None:
        """Remove the members whose session expired or that did not revoke in time; under
        the group's lock. Returns the group as it is then (None: there is none)."""
        group = await self.load(group_id)
        if group is None:
            await self.store.unlist(group_id)
            return None
        heartbeats = await self.store.heartbeats(group_id)
        config = await self.group_config(group_id)
        gone = group.expire(heartbeats, self.clock.now_ms(), config)
        if gone:
            await self.store.forget_heartbeats(group_id, gone)
            await self._save(group)
        self._arm(group, heartbeats, config)
        return group

    async def tick(self, group_id: str) -> None:
        """Remove members whose session expired or that did not revoke in time."""
        async with self.store.lock(group_id):
            await self._expire(group_id)

    # -- for the classic group APIs ----------------------------------------------------------
    async def _current(self, group_id: str) -> ConsumerGroup | None:
        """For DeleteGroups: members whose session ended are gone by now, as Kafka's timers
        remove them."""
        return await self._expire(group_id)


# -- hooks of the classic coordinator (groups/coordinator.py), called under the group's lock --


async def consumer_group_subscriptions(
    store: ConsumerGroupStore, group_id: str
) -> tuple[bool, frozenset[str]] | None:
    """For offset expiry: whether the consumer group has members, and the topics they
    subscribe to (by name or regex, as last resolved); None if ``group_id`` is none."""
    group = await store.load(group_id)
    if group is None:
        return None
    return bool(group.members), frozenset(group.topics) if group.members else frozenset()


async def make_room_for_classic(store: ConsumerGroupStore, group_id: str) -> bool:
    """Whether a classic JoinGroup may go on: not while a consumer group of that id has
    members (INCONSISTENT_GROUP_PROTOCOL); an empty one is dropped, offsets kept."""
    group = await store.load(group_id)
    if group is None:
        return True
    if group.members:
        return False
    await store.drop_state(group_id)
    return True


async def consumer_commit_error(
    store: ConsumerGroupStore,
    group_id: str,
    member_id: str,
    epoch: int,
    api_version: int | None = None,
) -> Code | None:
    """An OffsetCommit's check when ``group_id`` is a consumer group (the generation id is
    the member epoch; ``api_version`` None: a TxnOffsetCommit): see
    ConsumerGroup.commit_error; None when it is not a consumer group."""
    group = await store.load(group_id)
    return None if group is None else group.commit_error(member_id, epoch, api_version)
