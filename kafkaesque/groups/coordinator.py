"""Consumer groups (Kafka's classic protocol): the coordinator's rounds, state in Redis.

This module owns the protocol's rounds: JoinGroup's barrier and generations, SyncGroup's
wait for the leader's assignment, heartbeats, LeaveGroup, and the session and join
deadlines (``tick``, ``tick_all``, timers armed for what comes due next). The rules live
in kafkaesque/groups/state.py (a pure state machine); a group's state is one msgpack value
(kafkaesque/hot/group_store.py), changed only under a short per-group Redis lock, so any
number of broker processes on the same Redis coordinate the same groups; a change is
announced on a pub/sub channel so requests waiting in any process (a JoinGroup at the
barrier, a SyncGroup waiting for the leader) wake up. Heartbeats live in a separate hash
to keep them cheap. The group's offsets, configs, listing and deletion are the ``admin``
component's (kafkaesque/groups/admin.py). The broker relays the clients' assignors: the
leader computes the assignment; the coordinator only runs the rounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.errors import Code
from kafkaesque.groups.admin import GroupAdmin
from kafkaesque.groups.consumer import make_room_for_classic
from kafkaesque.groups.consumer_protocol import decode_assignment as decode_consumer_assignment
from kafkaesque.groups.rules import heartbeat_error, sync_outcome
from kafkaesque.groups.state import Group
from kafkaesque.groups.types import (
    MAX_METADATA,
    CoordinatorConfig,
    ExpiryTimers,
    GroupState,
    JoinRequest,
    JoinResult,
)
from kafkaesque.hot.consumer_group_store import ConsumerGroupStore
from kafkaesque.hot.group_store import GroupStore

if TYPE_CHECKING:
    from kafkaesque.hot.log import Log

__all__ = [
    "MAX_METADATA",
    "Code",
    "CoordinatorConfig",
    "Group",
    "GroupCoordinator",
    "GroupState",
    "JoinResult",
    "SyncResult",
    "decode_consumer_assignment",
]


class SyncResult(NamedTuple):
    """A SyncGroup's answer: the member's assignment, and the group's protocol."""

    error: Code
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


class GroupCoordinator:
    """The classic group protocol over the log's Redis; call ``start`` in the event loop
    first."""

    def __init__(
        self,
        log: Log,
        config: CoordinatorConfig | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock  # sessions, rounds and offset retention are on it
        self.config = config or CoordinatorConfig()
        self.timers = ExpiryTimers("expiring group members", clock)
        self.store = GroupStore.of(log)
        self.notifier = self.store.notifier  # a save announces the group's change on it
        # The KIP-848 groups under the same ids (a group id speaks one protocol).
        self.consumer_groups = ConsumerGroupStore.of(log)
        # The group's offsets, configs, listing and deletion.
        self.admin = GroupAdmin(self.store, self.consumer_groups, self.config, clock, self._expired)

    def start(self) -> None:
        self.notifier.start()

    async def stop(self) -> None:
        self.timers.close()
        self.notifier.close()
        await self.notifier.stop()

    # -- heartbeats -------------------------------------------------------------------
    async def _heartbeat(self, group_id: str, member_id: str) -> None:
        await self.store.heartbeat(group_id, member_id, self.clock.now_ms())

    # -- the join barrier ---------------------------------------------------------
    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        async with self.store.lock(group_id):
            # KIP-848 hook (kafkaesque/groups/consumer.py): a consumer-protocol group with
            # members refuses classic members; an empty one gives way.
            if not await make_room_for_classic(self.consumer_groups, group_id):
                return JoinResult(Code.INCONSISTENT_GROUP_PROTOCOL, request.member_id)
            group = await self.store.load(group_id) or Group(group_id)
            step = group.join(request, self.clock.now_ms(), self.config)
            if step.changed:
                await self.store.save(group)
        if step.heartbeat:
            await self._heartbeat(group_id, step.member_id)
        if step.result is not None:
            return step.result
        return await self._await_join(
            group_id, step.member_id, request.instance_id, step.generation
        )

    async def _await_join(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> JoinResult:
        """Wait at the barrier until a round that includes this member completes."""
        while True:
            changed = self.notifier.waiter({group_id})  # before reading: no missed change
            group = await self.store.load(group_id)
            if group is None:
                return JoinResult(Code.UNKNOWN_MEMBER_ID, member_id)
            result = group.join_outcome(member_id, generation, instance_id)
            if result is not None:
                return result
            if self.notifier.closed:
                return JoinResult(Code.COORDINATOR_NOT_AVAILABLE, member_id)
            remaining = group.deadline_ms - self.clock.now_ms()
            if group.state == GroupState.PREPARING and remaining <= 0:
                self.notifier.discard(changed, {group_id})
                await self.tick(group_id)
                continue
            await self.notifier.wait(group_id, max(0.05, min(remaining / 1000, 1.0)), changed)
            await self._heartbeat(group_id, member_id)

    # -- sync, heartbeat, leave -----------------------------------------------------
    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
        protocol: tuple[str | None, str | None] = (None, None),
    ) -> SyncResult:
        """A SyncGroup; ``protocol``: the protocol type and name it names (v5+)."""
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            if group is None:
                return SyncResult(Code.UNKNOWN_MEMBER_ID)
            error: Code | None
            error, changed = group.sync(member_id, instance_id, generation, assignments, protocol)
            if error:
                return SyncResult(error)
            if changed:
                await self.store.save(group)
        await self._heartbeat(group_id, member_id)
        # Followers wait for the leader's assignment.
        deadline = self.clock.monotonic() + group.members[member_id].session_timeout_ms / 1000
        while True:
            waiter = self.notifier.waiter({group_id})
            loaded = await self.store.load(group_id)
            late = self.clock.monotonic() > deadline
            error = sync_outcome(loaded, member_id, instance_id, generation, late)
            if error is None and self.notifier.closed:
                error = Code.COORDINATOR_NOT_AVAILABLE
            if error is None:
                await self.notifier.wait(group_id, 1.0, waiter)
                continue
            self.notifier.discard(waiter, {group_id})
            if error != Code.NONE:
                return SyncResult(error)
            assert loaded is not None
            assignment = loaded.members[member_id].assignment
            return SyncResult(error, assignment, loaded.protocol_type, loaded.protocol)

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> Code:
        group = await self.store.load(group_id)
        error = heartbeat_error(group, member_id, instance_id, generation)
        if error in (Code.NONE, Code.REBALANCE_IN_PROGRESS):
            await self._heartbeat(group_id, member_id)
        return error

    async def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[Code]:
        """Members leave (member id, or instance id for static members)."""
        async with self.store.lock(group_id):
            group = await self.store.load(group_id)
            if group is None:
                return [Code.UNKNOWN_MEMBER_ID] * len(leaving)
            errors = group.leave(leaving, self.clock.now_ms(), self.config)
            await self.store.save(group)
        return errors

    async def tick(self, group_id: str, sweep: bool = False) -> None:
        """Expire members whose session timed out; close a join round past its deadline.
        ``sweep``: also list the group as active if it has members (heals the set after
        an upgrade or a process that died between the writes), and expire its offsets."""
        async with self.store.lock(group_id):
            group = await self._expired(group_id)
            if group is None:
                if sweep:  # a consumer group (KIP-848) has only its offsets here
                    await self.admin.expire_consumer_group_offsets(group_id, self.clock.now_ms())
                return
            if sweep and group.members:
                await self.store.mark_active(group_id)
            if sweep:
                await self.admin.expire_offsets(group, self.clock.now_ms())

    async def _expired(self, group_id: str) -> Group | None:
        """The group with the members whose session ended removed and a round past its
        deadline closed (saved if that changed it), timed to the millisecond, as Kafka's
        timers are; a timer is armed for what comes due next. Called under its lock."""
        group = await self.store.load(group_id)
        if group is None:
            return None
        heartbeats = await self.store.heartbeats(group_id)
        now = self.clock.now_ms()
        expired = group.expire(heartbeats, now, self.config)
        if expired:
            await self.store.forget_heartbeats(group_id, expired)
        if group.close_round_if_due(now) or expired:
            await self.store.save(group)
        self.timers.arm(group_id, group.next_due(heartbeats, now), self.tick)
        return group

    async def tick_all(self, sweep: bool = False) -> None:
        """Tick the groups with members whose session or join round is due: one round
        trip reads every active group, and the others get a timer for when theirs comes,
        which fires on its own, so a session ends on time even while a long pass (a
        sweep over thousands of groups) holds up the next one. With ``sweep``, then tick
        every group there is (offset expiry; empty groups, which can be thousands of
        short-lived ids, cost nothing otherwise)."""
        active = await self.store.active()
        if active:
            now = self.clock.now_ms()
            for group_id, group, heartbeats in active:
                due = None if group is None else group.next_due(heartbeats, now)
                if group is None or (due is not None and due <= now):
                    await self.tick(group_id)
                else:
                    self.timers.arm(group_id, due, self.tick)
        if sweep:
            for group_id in await self.admin.list_groups():
                await self.tick(group_id, sweep=True)
