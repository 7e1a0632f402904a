"""The classic consumer-group protocol as a pure state machine: no I/O, time passed in.

A ``Group`` holds members, generation, chosen protocol, leader and assignments; each
transition (join, sync, leave, expiry) is a method that takes ``now`` in milliseconds
and changes only the group it is given; the checks of the other requests are in
group_rules.py. The coordinator
(groups/coordinator.py) loads a group from Redis, applies one transition under the group's
lock and saves it; so every rebalancing rule here can be tested without Redis.

Kafka's rounds: a member's JoinGroup starts a round (PreparingRebalance); the round closes
when every member has joined again, or at the deadline (the largest rebalance timeout;
for the first members of an empty group, group.initial.rebalance.delay.ms). Closing it
drops members that did not join, bumps the generation, picks the protocol by vote and a
leader (CompletingRebalance); the leader's SyncGroup carries the assignment (Stable).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkaesque.errors import Code
from kafkaesque.groups.packing import pack_group, unpack_group
from kafkaesque.groups.rules import (
    accepts_member,
    check_member,
    commit_error,
    heartbeat_error,
    member_error,
    sync_error,
    sync_outcome,
)
from kafkaesque.groups.types import (
    MAX_METADATA,
    CoordinatorConfig,
    GroupState,
    JoinRequest,
    JoinResult,
    JoinStep,
    Member,
)

__all__ = [  # the state machine and, for its callers, the vocabulary and checks it uses
    "MAX_METADATA",
    "Code",
    "CoordinatorConfig",
    "Group",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "JoinStep",
    "Member",
    "check_member",
    "commit_error",
    "heartbeat_error",
    "sync_outcome",
]


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # member id -> expiry (ms)
    deadline_ms: int = 0  # when the join round in progress completes anyway
    initial: bool = False  # the round started from an empty group: wait out the delay
    # When the group last became empty (its offsets' retention starts); None: not known
    # (a group saved before this was kept), then each offset's commit time counts.
    empty_since_ms: int | None = None

    # -- persistence format -----------------------------------------------------------
    def pack(self) -> bytes:
        return pack_group(self, Member.__slots__, state=str(self.state))

    @classmethod
    def unpack(cls, data: bytes) -> Group:
        d, members = unpack_group(data, Member)
        for m in members:
            m.protocols = [(name, metadata) for name, metadata in m.protocols]
        d["state"] = GroupState(d["state"])
        return cls(**d, members={m.member_id: m for m in members})

    def instance_owner(self, instance_id: str | None) -> str | None:
        if instance_id is None:
            return None
        return next(
            (m.member_id for m in self.members.values() if m.instance_id == instance_id), None
        )

    # -- join ---------------------------------------------------------------------------
    def join(self, req: JoinRequest, now: int, config: CoordinatorConfig) -> JoinStep:
        """A member (re)joins: starts or joins the round in progress, or, a known member
        with unchanged protocols after the round completed, gets that round's answer."""
        member_id = req.member_id

        def refuse(error: Code, changed: bool = False) -> JoinStep:
            return JoinStep(member_id, JoinResult(error, member_id), -1, changed)

        if not self.group_id:
            return refuse(Code.INVALID_GROUP_ID)
        if not (
            config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms
        ):
            return refuse(Code.INVALID_SESSION_TIMEOUT)
        # As Kafka, even in an empty group: a round of members without protocols could
        # choose none.
        if not req.protocol_type or not req.protocols:
            return refuse(Code.INCONSISTENT_GROUP_PROTOCOL)
        if self.members and (
            req.protocol_type != self.protocol_type or not self._common_protocols(req.protocols)
        ):
            return refuse(Code.INCONSISTENT_GROUP_PROTOCOL)
        if not accepts_member(self, member_id, config.max_size):
            # As Kafka: a member turned away while the round is prepared leaves the group.
            removed = member_id in self.members
            if removed:
                self._remove(member_id, now, config)
            full = JoinResult(Code.GROUP_MAX_SIZE_REACHED, "")
            return JoinStep(member_id, full, -1, removed)
        self.pending = {m: t for m, t in self.pending.items() if t > now}
        owner = self.instance_owner(req.instance_id)
        static_rejoin = False
        if not member_id:
            member_id = f"{req.instance_id or req.client_id}-{uuid.uuid4()}"
            if owner is not None:
                # A static member restarted: it takes its old place under a new id, and if
                # nothing else changed the group keeps its assignment (no rebalance).
                old = self.members.pop(owner)
                static_rejoin = self.state == GroupState.STABLE and old.protocols == req.protocols
                old.member_id = member_id
                self.members[member_id] = old
                if self.leader == owner:
                    self.leader = member_id
            elif req.require_known_member and req.instance_id is None:
                # KIP-394: a dynamic member first learns its id, so a client that retries
                # a join whose answer it lost does not leave a member behind.
                self.pending[member_id] = now + req.session_timeout_ms
                return refuse(Code.MEMBER_ID_REQUIRED, changed=True)
        elif member_id in self.pending:
            del self.pending[member_id]
        elif member_id not in self.members:
            return refuse(Code.FENCED_INSTANCE_ID if owner else Code.UNKNOWN_MEMBER_ID)
        elif owner is not None and owner != member_id:
            return refuse(Code.FENCED_INSTANCE_ID)
        elif self._answers_from_current_generation(member_id, req.protocols):
            return JoinStep(member_id, self.join_result(member_id), self.generation, False)
        member = self.members.get(member_id)
        if member is None:
            member = Member(member_id, req.instance_id, req.client_id, req.client_host, 0, 0, [])
            self.members[member_id] = member
        member.session_timeout_ms = req.session_timeout_ms
        # JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout.
        member.rebalance_timeout_ms = (
            req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else req.session_timeout_ms
        )
        member.protocols = req.protocols
        member.client_id, member.client_host = req.client_id, req.client_host
        self.protocol_type = req.protocol_type
        generation = self.generation
        if static_rejoin:
            result = self.join_result(member_id, skip_assignment=member_id == self.leader)
            return JoinStep(member_id, result, generation, True)
        if self.state != GroupState.PREPARING:
            self._prepare_rebalance(now, config)
        member.joined = True
        self.close_round_if_due(now)
        return JoinStep(member_id, None, generation, True)

    def _answers_from_current_generation(
        self, member_id: str, protocols: list[tuple[str, bytes]]
    ) -> bool:
        """Whether a member's JoinGroup is answered at once from the current generation
        rather than starting a round (Kafka's rule): its protocols are unchanged and the
        round has completed, so it lost its JoinGroup answer (CompletingRebalance), or the
        group is stable and it is a follower (it goes on to SyncGroup for its assignment;
        a leader's JoinGroup still starts a round, its way to ask for a new assignment)."""
        if self.members[member_id].protocols != protocols:
            return False
        if self.state == GroupState.COMPLETING:
            return True
        return self.state == GroupState.STABLE and member_id != self.leader

    def join_outcome(
        self, member_id: str, generation: int, instance_id: str | None = None
    ) -> JoinResult | None:
        """The answer for a member waiting at the barrier, or None while it must wait."""
        member = self.members.get(member_id)
        if member is None:
            # Removed, or replaced by a newer instance of the same static member.
            return JoinResult(member_error(self, member_id, instance_id), member_id)
        if member.generation > generation:
            return self.join_result(member_id)
        return None

    def join_result(self, member_id: str, skip_assignment: bool = False) -> JoinResult:
        """A JoinGroup answer: the leader also gets every member's metadata."""
        members = []
        if member_id == self.leader:
            members = [
                (m.member_id, m.instance_id, m.metadata_for(self.protocol))
                for m in self.members.values()
            ]
        return JoinResult(
            Code.NONE,
            member_id,
            self.generation,
            self.protocol,
            self.leader or "",
            members,
            self.protocol_type,
            skip_assignment,
        )

    def _prepare_rebalance(self, now: int, config: CoordinatorConfig) -> None:
        """Start a join round: every member must join again before the deadline."""
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        # Kafka waits a little for the first members of an empty group to arrive together.
        self.initial = self.state == GroupState.EMPTY and config.initial_rebalance_delay_ms > 0
        if self.initial:
            timeout = min(timeout, config.initial_rebalance_delay_ms)
        self.deadline_ms = now + timeout
        self.state = GroupState.PREPARING
        for m in self.members.values():
            m.joined = False
            m.assignment = b""

    def round_due(self, now: int) -> bool:
        """Whether the round in progress can close: all joined, or past its deadline."""
        if self.state != GroupState.PREPARING:
            return False
        if now >= self.deadline_ms:
            return True
        return (
            not self.initial
            and not self._awaits_pending(now)
            and all(m.joined for m in self.members.values())
        )

    def _awaits_pending(self, now: int) -> bool:
        """Whether a member id handed out with MEMBER_ID_REQUIRED may still join the
        round: as Kafka, a pending member lapses once the session timeout of its JoinGroup
        has passed, and the round closes then if everyone else has joined (not only at the
        next JoinGroup, which may never come)."""
        return any(t > now for t in self.pending.values())

    def close_round_if_due(self, now: int) -> bool:
        if not self.round_due(now):
            return False
        self._complete_join(now)
        return True

    def _common_protocols(self, protocols: Iterable[tuple[str, bytes]]) -> set[str]:
        names = {name for name, _ in protocols}
        for m in self.members.values():
            names &= {name for name, _ in m.protocols}
        return names

    def _complete_join(self, now: int) -> None:
        """Close the round: drop members that did not join, start the next generation."""
        self.members = {k: m for k, m in self.members.items() if m.joined}
        self.generation += 1
        if not self.members:
            self._become_empty(now)
            return
        candidates = self._common_protocols(next(iter(self.members.values())).protocols)
        # Each member votes for its most preferred protocol among the common ones.
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        self.protocol = max(votes, key=lambda name: votes[name])
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.state = GroupState.COMPLETING
        for m in self.members.values():
            m.generation = self.generation
            m.joined = False

    # -- sync, leave, expiry ------------------------------------------------------------
    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        assignments: dict[str, bytes],
        protocol: tuple[str | None, str | None] = (None, None),
    ) -> tuple[Code, bool]:
        """A SyncGroup arrives: the leader's settles the round. ``protocol``: the protocol
        type and name the member names (v5+). Returns (error, changed)."""
        error = sync_error(self, member_id, instance_id, generation, *protocol)
        if error:
            return error, False
        if self.state == GroupState.PREPARING:
            return Code.REBALANCE_IN_PROGRESS, False
        if self.state == GroupState.COMPLETING and member_id == self.leader:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.state = GroupState.STABLE
            return Code.NONE, True
        return Code.NONE, False

    def leave(
        self, leaving: list[tuple[str, str | None]], now: int, config: CoordinatorConfig
    ) -> list[Code]:
        """Members leave (member id, or instance id for static members)."""
        errors = []
        for member_id, instance_id in leaving:
            owner = self.instance_owner(instance_id)
            if instance_id is not None and owner is None:
                errors.append(Code.UNKNOWN_MEMBER_ID)
            elif owner is not None and member_id and owner != member_id:
                errors.append(Code.FENCED_INSTANCE_ID)
            elif (owner or member_id) not in self.members:
                errors.append(Code.UNKNOWN_MEMBER_ID)
            else:
                self._remove(owner or member_id, now, config)
                errors.append(Code.NONE)
        return errors

    def next_due(self, heartbeats: dict[str, int], now: int) -> int | None:
        """When (ms) ``expire`` or ``close_round_if_due`` next has something to do: a
        member's session end, the join round's deadline, or the lapse of a member id the
        round waits for; None: nothing is pending."""
        deadlines = [
            heartbeats[m.member_id] + m.session_timeout_ms + 1
            for m in self.members.values()
            if m.member_id in heartbeats
        ]
        if self.state == GroupState.PREPARING:
            deadlines.append(self.deadline_ms)
            deadlines += [t for t in self.pending.values() if t > now]
        return min(deadlines, default=None)

    def expire(self, heartbeats: dict[str, int], now: int, config: CoordinatorConfig) -> list[str]:
        """Remove members whose last heartbeat is older than their session timeout, then
        close a round past its deadline; returns the removed member ids."""
        expired = [
            m.member_id
            for m in self.members.values()
            if now - heartbeats.get(m.member_id, now) > m.session_timeout_ms
        ]
        for member_id in expired:
            self._remove(member_id, now, config)
        return expired

    def _remove(self, member_id: str, now: int, config: CoordinatorConfig) -> None:
        self.members.pop(member_id, None)
        if self.leader == member_id:
            self.leader = None
        if not self.members:
            self._become_empty(now)
            self.generation += 1
        elif self.state in (GroupState.STABLE, GroupState.COMPLETING):
            self._prepare_rebalance(now, config)
        else:
            self.close_round_if_due(now)

    def _become_empty(self, now: int) -> None:
        self.state, self.protocol, self.leader = GroupState.EMPTY, None, None
        self.empty_since_ms = now
