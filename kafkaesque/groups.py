"""Consumer groups (Kafka's classic protocol): the coordinator, with all state in Redis.

The rules live in kafkaesque/group_state.py (a pure state machine); this module is its
store and its waits. A group's state is one msgpack value, changed only under a short
per-group Redis lock, so any number of broker processes on the same Redis coordinate the
same groups; a change is announced on a pub/sub channel so requests waiting in any
process (a JoinGroup at the barrier, a SyncGroup waiting for the leader) wake up.
Heartbeats live in a separate hash to keep them cheap. Committed offsets are a hash per
group.

The broker relays the clients' assignors: the leader computes the assignment; the
coordinator only runs the rounds (join barrier, generations, session timeouts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError, LockNotOwnedError
from redis.typing import EncodableT, FieldT

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.consumer_group import (
    consumer_commit_error,
    consumer_group_subscriptions,
    make_room_for_classic,
)
from kafkaesque.consumer_protocol import decode_assignment as decode_consumer_assignment
from kafkaesque.errors import Code, GroupBusy, HotTierUnavailable
from kafkaesque.group_config_keys import check_group_configs
from kafkaesque.group_offsets import (
    CommittedOffset,
    OffsetStore,
    indexed,
    pending_transactional,
    save_group,
)
from kafkaesque.group_rules import (
    FIRST_EPOCH_AWARE_COMMIT,
    commit_error,
    heartbeat_error,
    is_subscribed,
    offset_delete_error,
    offset_expires_from,
    sync_outcome,
)
from kafkaesque.group_state import Group
from kafkaesque.group_types import (
    MAX_METADATA,
    CoordinatorConfig,
    ExpiryTimers,
    GroupState,
    JoinRequest,
    JoinResult,
)
from kafkaesque.keys import Keys
from kafkaesque.notify import Notifier

__all__ = [
    "MAX_METADATA",
    "Code",
    "CommittedOffset",
    "CoordinatorConfig",
    "Group",
    "GroupBusy",
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
    """The classic group protocol over Redis; call ``start`` in the event loop first."""

    def __init__(
        self,
        redis: Redis,
        config: CoordinatorConfig | None = None,
        namespace: str = "ks",
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.redis = redis
        self.clock = clock  # milliseconds; tests move it to expire offsets
        self.config = config or CoordinatorConfig()
        self.keys = Keys.of(redis, namespace)
        self.offsets = OffsetStore(redis, self.keys)
        self.notifier = Notifier(redis, self.keys.group_events(""))
        self.timers = ExpiryTimers("expiring group members", clock)

    def start(self) -> None:
        self.notifier.start()

    async def stop(self) -> None:
        self.timers.close()
        self.notifier.close()
        await self.notifier.stop()

    # -- storage ----------------------------------------------------------------------
    async def load(self, group_id: str) -> Group | None:
        data = await self.redis.get(self.keys.group(group_id))
        return None if data is None else Group.unpack(cast(bytes, data))  # replies are bytes

    async def _save(self, group: Group) -> None:
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

    def _lock(self, group_id: str) -> Any:
        # Held for one read-modify-write; the timeout frees it if a process dies holding it.
        return self.redis.lock(
            self.keys.group(group_id, ":lock"),
            timeout=10,
            blocking_timeout=10,
            lock_class=_GroupLock,
        )

    async def _heartbeat(self, group_id: str, member_id: str) -> None:
        await self.redis.hset(self.keys.group(group_id, ":heartbeats"), member_id, self.clock())

    # -- the join barrier ---------------------------------------------------------
    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        async with self._lock(group_id):
            # KIP-848 hook (kafkaesque/consumer_group.py): a consumer-protocol group with
            # members refuses classic members; an empty one gives way.
            if not await make_room_for_classic(self.redis, self.keys, group_id):
                return JoinResult(Code.INCONSISTENT_GROUP_PROTOCOL, request.member_id)
            group = await self.load(group_id) or Group(group_id)
            step = group.join(request, self.clock(), self.config)
            if step.changed:
                await self._save(group)
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
            group = await self.load(group_id)
            if group is None:
                return JoinResult(Code.UNKNOWN_MEMBER_ID, member_id)
            result = group.join_outcome(member_id, generation, instance_id)
            if result is not None:
                return result
            if self.notifier.closed:
                return JoinResult(Code.COORDINATOR_NOT_AVAILABLE, member_id)
            remaining = group.deadline_ms - self.clock()
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
        async with self._lock(group_id):
            group = await self.load(group_id)
            if group is None:
                return SyncResult(Code.UNKNOWN_MEMBER_ID)
            error: Code | None
            error, changed = group.sync(member_id, instance_id, generation, assignments, protocol)
            if error:
                return SyncResult(error)
            if changed:
                await self._save(group)
        await self._heartbeat(group_id, member_id)
        # Followers wait for the leader's assignment.
        deadline = time.monotonic() + group.members[member_id].session_timeout_ms / 1000
        while True:
            waiter = self.notifier.waiter({group_id})
            loaded = await self.load(group_id)
            late = time.monotonic() > deadline
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
        group = await self.load(group_id)
        error = heartbeat_error(group, member_id, instance_id, generation)
        if error in (Code.NONE, Code.REBALANCE_IN_PROGRESS):
            await self._heartbeat(group_id, member_id)
        return error

    async def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[Code]:
        """Members leave (member id, or instance id for static members)."""
        async with self._lock(group_id):
            group = await self.load(group_id)
            if group is None:
                return [Code.UNKNOWN_MEMBER_ID] * len(leaving)
            errors = group.leave(leaving, self.clock(), self.config)
            await self._save(group)
        return errors

    async def tick(self, group_id: str, sweep: bool = False) -> None:
        """Expire members whose session timed out; close a join round past its deadline.
        ``sweep``: also list the group as active if it has members (heals the set after
        an upgrade or a process that died between the writes), and expire its offsets."""
        async with self._lock(group_id):
            group = await self._expired(group_id)
            if group is None:
                if sweep:  # a consumer group (KIP-848) has only its offsets here
                    await self._expire_consumer_group_offsets(group_id, self.clock())
                return
            if sweep and group.members:
                await self.redis.sadd(self.keys.groups_active, group_id)
            if sweep:
                await self._expire_offsets(group, self.clock())

    async def _expired(self, group_id: str) -> Group | None:
        """The group with the members whose session ended removed and a round past its
        deadline closed (saved if that changed it), timed to the millisecond, as Kafka's
        timers are; a timer is armed for what comes due next. Called under its lock."""
        group = await self.load(group_id)
        if group is None:
            return None
        heartbeats_key = self.keys.group(group_id, ":heartbeats")
        # Replies are bytes: the client does not decode them.
        raw = cast("dict[bytes, bytes]", await self.redis.hgetall(heartbeats_key))
        heartbeats = {k.decode(): int(v) for k, v in raw.items()}
        now = self.clock()
        expired = group.expire(heartbeats, now, self.config)
        if expired:
            await self.redis.hdel(heartbeats_key, *expired)
        if group.close_round_if_due(now) or expired:
            await self._save(group)
        self.timers.arm(group_id, group.next_due(heartbeats), self.tick)
        return group

    async def _expire_offsets(self, group: Group, now: int) -> None:
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

    async def _expire_consumer_group_offsets(self, group_id: str, now: int) -> None:
        """A consumer group's offsets of topics no member subscribes to expire from their
        commit; the group goes once it is empty and has none left, as Kafka's group
        coordinator does. Called under the group's lock."""
        found = await consumer_group_subscriptions(self.redis, self.keys, group_id)
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
        pending = await pending_transactional(self.redis, self.keys, group_id)
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

    async def tick_all(self, sweep: bool = False) -> None:
        """Tick the groups with members whose session or join round is due: one round
        trip reads every active group, and the others get a timer for when theirs comes,
        which fires on its own, so a session ends on time even while a long pass (a
        sweep over thousands of groups) holds up the next one. With ``sweep``, then tick
        every group there is (offset expiry; empty groups, which can be thousands of
        short-lived ids, cost nothing otherwise)."""
        # Replies are bytes: the client does not decode them.
        active = cast("set[bytes]", await self.redis.smembers(self.keys.groups_active))
        group_ids = sorted(g.decode() for g in active)
        if group_ids:
            pipe = self.redis.pipeline(transaction=False)
            for g in group_ids:
                pipe.get(self.keys.group(g))
                pipe.hgetall(self.keys.group(g, ":heartbeats"))
            replies = await pipe.execute()
            now = self.clock()
            for i, group_id in enumerate(group_ids):
                raw, beats = replies[2 * i], replies[2 * i + 1]
                due = None
                if raw is not None:
                    heartbeats = {k.decode(): int(v) for k, v in beats.items()}
                    due = Group.unpack(raw).next_due(heartbeats)
                if raw is None or (due is not None and due <= now):
                    await self.tick(group_id)
                else:
                    self.timers.arm(group_id, due, self.tick)
        if sweep:
            for group_id in await self.list_groups():
                await self.tick(group_id, sweep=True)

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
        async with self._lock(group_id):
            group = await self.load(group_id)
            # KIP-848 hook: a consumer-protocol group checks member epochs instead.
            consumer = await consumer_commit_error(
                self.redis, self.keys, group_id, member_id, generation, api_version
            )
            error = commit_error(group, member_id, instance_id, generation, api_version)
            error = error if consumer is None else consumer
            if error:
                return error
            if group is None and consumer is None:
                await self._save(Group(group_id))
            now = self.clock()
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
        async with self._lock(group_id):
            if offsets:
                if await self.load(group_id) is None and (
                    await consumer_group_subscriptions(self.redis, self.keys, group_id) is None
                ):
                    await self._save(Group(group_id, empty_since_ms=self.clock()))
                await self.offsets.write(group_id, offsets)
            await self.redis.hdel(self.keys.group_txn_offsets(group_id), *fields)

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
        async with self._lock(group_id):
            group = await self.load(group_id)
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

    # -- group configs (DescribeConfigs, IncrementalAlterConfigs on a GROUP) ---------------
    async def group_configs(self, group_id: str) -> dict[str, str]:
        """The group's dynamic configs (name -> canonical value); kept whether or not the
        group exists, as Kafka keeps them."""
        raw = await self.redis.hgetall(self.keys.group_configs(group_id))
        fields = cast("dict[bytes, bytes]", raw)  # replies are bytes
        return {k.decode(): v.decode() for k, v in fields.items()}

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
        key = self.keys.group_configs(group_id)
        async with self._lock(group_id):
            configs = change(await self.group_configs(group_id))
            check_group_configs(configs, defaults)
            if not validate_only:
                pipe = self.redis.pipeline(transaction=True)
                pipe.delete(key)
                if configs:
                    # (a dict[str, str] is a valid mapping: redis-py's key type is invariant)
                    pipe.hset(key, mapping=cast("dict[FieldT, EncodableT]", configs))
                await pipe.execute()
        return configs

    # -- listing --------------------------------------------------------------------
    async def list_groups(self) -> list[str]:
        names = cast("set[bytes]", await self.redis.smembers(self.keys.groups))  # replies are bytes
        return sorted(g.decode() for g in names)

    async def delete(self, group_id: str) -> Code:
        async with self._lock(group_id):
            # Members whose session ended are gone by now, as Kafka's timers remove them.
            group = await self._expired(group_id)
            if group is None:
                return Code.GROUP_ID_NOT_FOUND
            if group.members:
                return Code.NON_EMPTY_GROUP
            await self._drop(group_id)
        return Code.NONE

    async def _drop(self, group_id: str) -> None:
        """Delete a group and its offsets; called under its lock."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(
            self.keys.group(group_id),
            self.keys.group(group_id, ":consumer"),  # a consumer group's (KIP-848) state
            self.keys.group(group_id, ":offsets"),
            self.keys.group_txn_offsets(group_id),  # a later commit brings none back
            self.keys.group(group_id, ":heartbeats"),
        )
        index = [self.keys.groups, self.keys.groups_active, self.keys.consumer_groups_active]
        if not self.keys.cluster:
            for key in index:
                pipe.srem(key, group_id)
        await pipe.execute()
        if self.keys.cluster:  # after: see group_offsets.indexed
            await indexed(self.redis, group_id, [], index)


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
