"""Consumer groups (Kafka's classic protocol), with all state in Redis.

A group's state (members, generation, chosen protocol, leader, assignments) is one msgpack
value, changed only under a short per-group Redis lock, so any number of broker processes
on the same Redis coordinate the same groups; a change is announced on a pub/sub channel
so requests waiting in any process (a JoinGroup at the barrier, a SyncGroup waiting for the
leader) wake up. Heartbeats live in a separate hash to keep them cheap. Committed offsets
are a hash per group.

The broker relays the clients' assignors: the leader computes the assignment; the
coordinator only runs the rounds (join barrier, generations, session timeouts).
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import msgpack
from redis.asyncio import Redis

from kafkaesque.log import LogError
from kafkaesque.notify import Notifier

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
)
MAX_METADATA = 4096  # Kafka's offset.metadata.max.bytes


class GroupError(IntEnum):
    """The Kafka error codes the coordinator answers with."""

    NONE = 0
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_NOT_AVAILABLE = 15
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    generation: int = -1  # the generation whose join round included this member
    joined: bool = False  # has joined the round in progress
    assignment: bytes = b""

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(slots=True)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # member id -> expiry (ms)
    deadline_ms: int = 0  # when the join round in progress completes anyway
    initial: bool = False  # the round started from an empty group: wait out the delay

    def pack(self) -> bytes:
        d = {k: getattr(self, k) for k in self.__slots__ if k != "members"}
        d["members"] = [[getattr(m, k) for k in Member.__slots__] for m in self.members.values()]
        return msgpack.packb(d)

    @classmethod
    def unpack(cls, data: bytes) -> Group:
        d = msgpack.unpackb(data)
        members = [Member(*values) for values in d.pop("members")]
        for m in members:
            m.protocols = [tuple(p) for p in m.protocols]
        return cls(**d, members={m.member_id: m for m in members})

    def instance_owner(self, instance_id: str | None) -> str | None:
        if instance_id is None:
            return None
        return next(
            (m.member_id for m in self.members.values() if m.instance_id == instance_id), None
        )


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: GroupError
    member_id: str
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_ms: int
    leader_epoch: int = -1


@dataclass(slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000  # Kafka's group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    """The classic group protocol over Redis; call ``start`` in the event loop first."""

    def __init__(
        self, redis: Redis, config: CoordinatorConfig | None = None, namespace: str = "ks"
    ) -> None:
        self.redis = redis
        self.config = config or CoordinatorConfig()
        self.ns = namespace
        self.notifier = Notifier(redis, self.channel(""))

    def start(self) -> None:
        self.notifier.start()

    async def stop(self) -> None:
        self.notifier.close()
        await self.notifier.stop()

    # -- keys and storage ---------------------------------------------------------
    def _key(self, group_id: str, part: str = "") -> str:
        return f"{self.ns}:group:{{{group_id}}}{part}"

    def channel(self, group_id: str) -> str:
        return f"{self.ns}:groupevents:{group_id}"

    async def load(self, group_id: str) -> Group | None:
        data = await self.redis.get(self._key(group_id))
        return None if data is None else Group.unpack(data)

    @property
    def _active_key(self) -> str:
        """The groups with members: the only ones the periodic tick has work in."""
        return f"{self.ns}:groups:active"

    async def _save(self, group: Group) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self._key(group.group_id), group.pack())
        pipe.sadd(f"{self.ns}:groups", group.group_id)
        if group.members:
            pipe.sadd(self._active_key, group.group_id)
        else:
            pipe.srem(self._active_key, group.group_id)
            pipe.delete(self._key(group.group_id, ":heartbeats"))
        pipe.publish(self.channel(group.group_id), group.generation)
        await pipe.execute()
        self.notifier.notify(group.group_id)

    def _lock(self, group_id: str) -> Any:
        # Held for one read-modify-write; the timeout frees it if a process dies holding it.
        return self.redis.lock(self._key(group_id, ":lock"), timeout=10, blocking_timeout=10)

    async def _heartbeat(self, group_id: str, member_id: str) -> None:
        await self.redis.hset(self._key(group_id, ":heartbeats"), member_id, _now_ms())

    # -- the join barrier ---------------------------------------------------------
    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member: bool,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(GroupError.INVALID_GROUP_ID, member_id)
        c = self.config
        if not c.min_session_timeout_ms <= session_timeout_ms <= c.max_session_timeout_ms:
            return JoinResult(GroupError.INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: Kafka uses the session timeout
            rebalance_timeout_ms = session_timeout_ms
        async with self._lock(group_id):
            group = await self.load(group_id) or Group(group_id)
            if group.members and (
                protocol_type != group.protocol_type or not self._common_protocols(group, protocols)
            ):
                return JoinResult(GroupError.INCONSISTENT_GROUP_PROTOCOL, member_id)
            now = _now_ms()
            group.pending = {m: t for m, t in group.pending.items() if t > now}
            owner = group.instance_owner(instance_id)
            static_rejoin = False
            if not member_id:
                member_id = f"{client_id}-{uuid.uuid4()}"
                if owner is not None:
                    # A static member restarted: it takes its old place under a new id, and
                    # if nothing else changed the group keeps its assignment (no rebalance).
                    old = group.members.pop(owner)
                    static_rejoin = group.state == STABLE and old.protocols == protocols
                    old.member_id = member_id
                    group.members[member_id] = old
                    if group.leader == owner:
                        group.leader = member_id
                elif require_known_member:
                    group.pending[member_id] = now + session_timeout_ms
                    await self._save(group)
                    return JoinResult(GroupError.MEMBER_ID_REQUIRED, member_id)
            elif member_id in group.pending:
                del group.pending[member_id]
            elif member_id not in group.members:
                error = GroupError.FENCED_INSTANCE_ID if owner else GroupError.UNKNOWN_MEMBER_ID
                return JoinResult(error, member_id)
            elif owner is not None and owner != member_id:
                return JoinResult(GroupError.FENCED_INSTANCE_ID, member_id)
            member = group.members.get(member_id)
            if member is None:
                member = Member(member_id, instance_id, client_id, client_host, 0, 0, [])
                group.members[member_id] = member
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.protocols = protocols
            member.client_id, member.client_host = client_id, client_host
            group.protocol_type = protocol_type
            generation = group.generation
            if static_rejoin:
                await self._save(group)
                await self._heartbeat(group_id, member_id)
                return self._join_result(group, member_id)
            if group.state != PREPARING:
                self._prepare_rebalance(group, now)
            member.joined = True
            if self._barrier_complete(group, now):
                self._complete_join(group)
            await self._save(group)
        await self._heartbeat(group_id, member_id)
        return await self._await_join(group_id, member_id, generation)

    def _prepare_rebalance(self, group: Group, now: int) -> None:
        """Start a join round: every member must join again before the deadline."""
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        # Kafka waits a little for the first members of an empty group to arrive together.
        group.initial = group.state == EMPTY and self.config.initial_rebalance_delay_ms > 0
        if group.initial:
            timeout = min(timeout, self.config.initial_rebalance_delay_ms)
        group.deadline_ms = now + timeout
        group.state = PREPARING
        for m in group.members.values():
            m.joined = False
            m.assignment = b""

    def _barrier_complete(self, group: Group, now: int) -> bool:
        if group.state != PREPARING:
            return False
        if now >= group.deadline_ms:
            return True
        return (
            not group.initial
            and not group.pending
            and all(m.joined for m in group.members.values())
        )

    @staticmethod
    def _common_protocols(group: Group, protocols: Iterable[tuple[str, bytes]]) -> set[str]:
        names = {name for name, _ in protocols}
        for m in group.members.values():
            names &= {name for name, _ in m.protocols}
        return names

    def _complete_join(self, group: Group) -> None:
        """Close the round: drop members that did not join, start the next generation."""
        group.members = {k: m for k, m in group.members.items() if m.joined}
        group.generation += 1
        if not group.members:
            group.state, group.protocol, group.leader = EMPTY, None, None
            return
        candidates = self._common_protocols(group, next(iter(group.members.values())).protocols)
        # Each member votes for its most preferred protocol among the common ones.
        votes: dict[str, int] = {}
        for m in group.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        group.protocol = max(votes, key=lambda name: votes[name])
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        for m in group.members.values():
            m.generation = group.generation
            m.joined = False

    @staticmethod
    def _join_result(group: Group, member_id: str) -> JoinResult:
        """A JoinGroup answer: the leader also gets every member's metadata."""
        members = []
        if member_id == group.leader:
            members = [
                (m.member_id, m.instance_id, m.metadata_for(group.protocol))
                for m in group.members.values()
            ]
        return JoinResult(
            GroupError.NONE,
            member_id,
            group.generation,
            group.protocol,
            group.leader or "",
            members,
        )

    async def _await_join(self, group_id: str, member_id: str, generation: int) -> JoinResult:
        """Wait at the barrier until a round that includes this member completes."""
        while True:
            changed = self.notifier.waiter({group_id})  # before reading: no missed change
            group = await self.load(group_id)
            member = group.members.get(member_id) if group else None
            if group is None or member is None:
                return JoinResult(GroupError.UNKNOWN_MEMBER_ID, member_id)
            if member.generation > generation:
                return self._join_result(group, member_id)
            if self.notifier.closed:
                return JoinResult(GroupError.COORDINATOR_NOT_AVAILABLE, member_id)
            remaining = group.deadline_ms - _now_ms()
            if group.state == PREPARING and remaining <= 0:
                self.notifier.discard(changed, {group_id})
                await self.tick(group_id)
                continue
            await self.notifier.wait(group_id, max(0.05, min(remaining / 1000, 1.0)), changed)
            await self._heartbeat(group_id, member_id)

    # -- sync, heartbeat, leave -----------------------------------------------------
    def _check_member(
        self, group: Group | None, member_id: str, instance_id: str | None, generation: int
    ) -> GroupError:
        if group is None or member_id not in group.members:
            if group is not None and group.instance_owner(instance_id):
                return GroupError.FENCED_INSTANCE_ID
            return GroupError.UNKNOWN_MEMBER_ID
        owner = group.instance_owner(instance_id)
        if owner is not None and owner != member_id:
            return GroupError.FENCED_INSTANCE_ID
        if generation != group.generation:
            return GroupError.ILLEGAL_GENERATION
        return GroupError.NONE

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> tuple[GroupError, bytes]:
        async with self._lock(group_id):
            group = await self.load(group_id)
            error = self._check_member(group, member_id, instance_id, generation)
            if error:
                return error, b""
            assert group is not None
            if group.state == PREPARING:
                return GroupError.REBALANCE_IN_PROGRESS, b""
            if group.state == COMPLETING and member_id == group.leader:
                for m in group.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                group.state = STABLE
                await self._save(group)
        await self._heartbeat(group_id, member_id)
        # Followers wait for the leader's assignment.
        deadline = time.monotonic() + group.members[member_id].session_timeout_ms / 1000
        while True:
            changed = self.notifier.waiter({group_id})
            group = await self.load(group_id)
            error = self._check_member(group, member_id, instance_id, generation)
            if not error:
                assert group is not None
                if group.state == STABLE:
                    error = GroupError.NONE
                elif group.state != COMPLETING or time.monotonic() > deadline:
                    error = GroupError.REBALANCE_IN_PROGRESS
                elif self.notifier.closed:
                    error = GroupError.COORDINATOR_NOT_AVAILABLE
                else:
                    await self.notifier.wait(group_id, 1.0, changed)
                    continue
            self.notifier.discard(changed, {group_id})
            assignment = group.members[member_id].assignment if error == GroupError.NONE else b""
            return error, assignment

    async def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> GroupError:
        group = await self.load(group_id)
        error = self._check_member(group, member_id, instance_id, generation)
        if error:
            return error
        await self._heartbeat(group_id, member_id)
        assert group is not None
        return GroupError.REBALANCE_IN_PROGRESS if group.state == PREPARING else GroupError.NONE

    async def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[GroupError]:
        """Members leave (member id, or instance id for static members)."""
        errors = []
        async with self._lock(group_id):
            group = await self.load(group_id)
            if group is None:
                return [GroupError.UNKNOWN_MEMBER_ID] * len(leaving)
            for member_id, instance_id in leaving:
                owner = group.instance_owner(instance_id)
                if instance_id is not None and owner is None:
                    errors.append(GroupError.UNKNOWN_MEMBER_ID)
                elif owner is not None and member_id and owner != member_id:
                    errors.append(GroupError.FENCED_INSTANCE_ID)
                elif (owner or member_id) not in group.members:
                    errors.append(GroupError.UNKNOWN_MEMBER_ID)
                else:
                    self._remove(group, owner or member_id)
                    errors.append(GroupError.NONE)
            await self._save(group)
        return errors

    def _remove(self, group: Group, member_id: str) -> None:
        group.members.pop(member_id, None)
        if group.leader == member_id:
            group.leader = None
        if not group.members:
            group.state, group.protocol, group.leader = EMPTY, None, None
            group.generation += 1
        elif group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, _now_ms())
        elif self._barrier_complete(group, _now_ms()):
            self._complete_join(group)

    async def tick(self, group_id: str, sweep: bool = False) -> None:
        """Expire members whose session timed out; close a join round past its deadline.
        ``sweep``: also list the group as active if it has members (heals the set after
        an upgrade or a process that died between the writes)."""
        now = _now_ms()
        heartbeats = {
            k.decode(): int(v)
            for k, v in (await self.redis.hgetall(self._key(group_id, ":heartbeats"))).items()
        }
        async with self._lock(group_id):
            group = await self.load(group_id)
            if group is None:
                return
            if sweep and group.members:
                await self.redis.sadd(self._active_key, group_id)
            changed = False
            for m in list(group.members.values()):
                if now - heartbeats.get(m.member_id, now) > m.session_timeout_ms:
                    self._remove(group, m.member_id)
                    await self.redis.hdel(self._key(group_id, ":heartbeats"), m.member_id)
                    changed = True
            if self._barrier_complete(group, now):
                self._complete_join(group)
                changed = True
            if changed:
                await self._save(group)

    async def tick_all(self, sweep: bool = False) -> None:
        """Tick every group with members; with ``sweep``, every group there is (empty
        groups, which can be thousands of short-lived ids, cost nothing otherwise)."""
        if sweep:
            group_ids = await self.list_groups()
        else:
            group_ids = sorted(g.decode() for g in await self.redis.smembers(self._active_key))
        for group_id in group_ids:
            await self.tick(group_id, sweep)

    # -- offsets --------------------------------------------------------------------
    async def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[tuple[str, int], tuple[int, str | None, int]],
    ) -> GroupError:
        """Store offsets (topic, partition) -> (offset, metadata, leader epoch). A commit with
        generation -1 and no member is a standalone one, allowed while the group is empty."""
        if not group_id:
            return GroupError.INVALID_GROUP_ID
        async with self._lock(group_id):
            group = await self.load(group_id)
            if generation < 0 and not member_id:
                if group is not None and group.members:
                    return GroupError.UNKNOWN_MEMBER_ID
                if group is None:
                    await self._save(Group(group_id))
            else:
                error = self._check_member(group, member_id, instance_id, generation)
                if error:
                    return error
                assert group is not None
                # As Kafka: commits of the current generation are kept while a rebalance is
                # being prepared (members learn of it by heartbeat); between the join and
                # the sync the generation is not settled yet.
                if group.state == COMPLETING:
                    return GroupError.REBALANCE_IN_PROGRESS
            now = _now_ms()
            values = {
                f"{topic}\0{partition}": msgpack.packb([offset, metadata or "", now, epoch])
                for (topic, partition), (offset, metadata, epoch) in offsets.items()
            }
            if values:
                await self.redis.hset(self._key(group_id, ":offsets"), mapping=values)
        return GroupError.NONE

    async def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        raw = await self.redis.hgetall(self._key(group_id, ":offsets"))
        out = {}
        for k, v in raw.items():
            topic, _, partition = k.decode().rpartition("\0")
            out[topic, int(partition)] = CommittedOffset(*msgpack.unpackb(v))
        return out

    async def reset_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Set committed offsets from outside the group (the CLI); refused with members."""
        error = await self.commit(
            group_id, -1, "", None, {k: (v, "", -1) for k, v in offsets.items()}
        )
        if error:
            raise GroupBusy(f"group {group_id} has active members; stop them first")

    async def forget_topic(self, topic: str) -> int:
        """Drop every group's committed offsets of a deleted topic, as Kafka does, so a
        topic created again under the name starts where auto.offset.reset says rather
        than at the old topic's offsets. Returns how many offsets were dropped."""
        dropped = 0
        prefix = f"{topic}\0".encode()
        for group_id in await self.list_groups():
            key = self._key(group_id, ":offsets")
            # Topic names have no NUL, so the prefix names exactly this topic.
            stale = [k for k in await self.redis.hkeys(key) if k.startswith(prefix)]
            if stale:
                dropped += await self.redis.hdel(key, *stale)
        return dropped

    # -- listing --------------------------------------------------------------------
    async def list_groups(self) -> list[str]:
        return sorted(g.decode() for g in await self.redis.smembers(f"{self.ns}:groups"))

    async def delete(self, group_id: str) -> GroupError:
        async with self._lock(group_id):
            group = await self.load(group_id)
            if group is None:
                return GroupError.GROUP_ID_NOT_FOUND
            if group.members:
                return GroupError.NON_EMPTY_GROUP
            await self.redis.delete(
                self._key(group_id),
                self._key(group_id, ":offsets"),
                self._key(group_id, ":heartbeats"),
            )
            await self.redis.srem(f"{self.ns}:groups", group_id)
            await self.redis.srem(self._active_key, group_id)
        return GroupError.NONE


class GroupBusy(LogError):
    """The group has active members, so it cannot be changed from outside."""


def decode_consumer_assignment(data: bytes) -> dict[str, list[int]] | None:
    """Topic -> partitions from a "consumer" protocol assignment (ConsumerProtocolAssignment:
    version int16, [topic string, [partition int32]], user data), None if it is not one."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: dict[str, list[int]] = {}
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2 : pos + 2 + length].decode()
            pos += 2 + length
            (n,) = struct.unpack_from(">i", data, pos)
            out[topic] = list(struct.unpack_from(f">{n}i", data, pos + 4))
            pos += 4 + 4 * n
        return out
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
