"""The consumer group protocol (KIP-848) as a pure state machine: no I/O, time passed in.

A ``ConsumerGroup`` has a group epoch (bumped by every change of membership, subscriptions,
assignor or subscribed topics' partitions), a target assignment computed by a server-side
assignor for one group epoch (the assignment epoch), and members, each with its own member
epoch and the partitions it has been given (``assigned``) or must give up (``revoking``).

Reconciliation moves each member toward its target one heartbeat at a time: first it is
told to revoke what it should no longer own (its epoch stays); once its heartbeat shows it
no longer owns them it reaches the assignment epoch and gets the new partitions that no
other member still holds, the rest as those are released. So a partition is never given
to a member while another may still consume it. The coordinator
(kafkaesque/groups/consumer.py) loads a group, applies a heartbeat under the group's lock
and saves it.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from kafkaesque.errors import Code, Refused
from kafkaesque.groups import topic_regex
from kafkaesque.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR
from kafkaesque.groups.packing import pack_group, unpack_group
from kafkaesque.groups.rules import consumer_member_epoch_error
from kafkaesque.types import TopicPartition

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member that will come back under its instance id


class MemberState(StrEnum):
    STABLE = "stable"
    UNREVOKED = "unrevoked_partitions"  # waits for the member to give partitions up
    UNRELEASED = "unreleased_partitions"  # waits for other members to give partitions up


def session_defaults(kind: str, session_ms: int, heartbeat_ms: int) -> dict[str, str]:
    """A KIP-848 (``kind`` "consumer") or share group's session timeout and heartbeat
    interval defaults and their bounds, as ``check_group_configs`` reads them. Kafka's
    bounds (min session timeout 45 s, max 60 s; heartbeats 5-15 s) are widened to take in
    this broker's own defaults, which may lie outside them here."""
    return {
        f"{kind}.session.timeout.ms": str(session_ms),
        f"{kind}.heartbeat.interval.ms": str(heartbeat_ms),
        f"group.{kind}.min.session.timeout.ms": str(min(45_000, session_ms)),
        f"group.{kind}.max.session.timeout.ms": str(max(60_000, session_ms)),
        f"group.{kind}.min.heartbeat.interval.ms": str(min(5_000, heartbeat_ms)),
        f"group.{kind}.max.heartbeat.interval.ms": str(max(15_000, heartbeat_ms)),
    }


@dataclass(slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # Kafka's group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms

    def group_defaults(self) -> dict[str, str]:
        """The broker's defaults of the group configs and their bounds
        (``session_defaults``)."""
        return session_defaults("consumer", self.session_timeout_ms, self.heartbeat_interval_ms)

    def for_group(self, configs: Mapping[str, str]) -> ConsumerGroupConfig:
        """This config with a group's own consumer.session.timeout.ms and
        consumer.heartbeat.interval.ms (its dynamic group configs), where set."""
        return ConsumerGroupConfig(
            int(configs.get("consumer.session.timeout.ms", self.session_timeout_ms)),
            int(configs.get("consumer.heartbeat.interval.ms", self.heartbeat_interval_ms)),
        )


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields; None: unchanged since the last heartbeat."""

    member_id: str
    epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topics: list[str] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: dict[bytes, list[int]] | None = None  # topic id -> partitions the member owns
    client_id: str = ""
    client_host: str = ""

    @property
    def full(self) -> bool:
        """A heartbeat with every field set (after a rejoin): it gets the assignment."""
        subscribed = self.topics is not None or self.regex is not None
        return self.rebalance_timeout_ms != -1 and subscribed and self.owned is not None


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topics: list[str]
    regex: str | None
    assignor: str | None
    epoch: int = 0
    previous_epoch: int = -1
    state: str = MemberState.STABLE
    assigned: list[TopicPartition] = field(default_factory=list)
    revoking: list[TopicPartition] = field(default_factory=list)
    revoke_deadline_ms: int = 0  # fenced if it still holds ``revoking`` then

    def subscribed(self, topics: dict[str, list]) -> frozenset[str]:
        """The topics of ``topics`` (the group's subscribed topics) this member wants."""
        regex = self.regex
        return frozenset(
            t for t in topics if t in self.topics or (regex and topic_regex.matches(regex, t))
        )


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    member_id: str
    epoch: int
    assignment: list[TopicPartition] | None  # None: unchanged, not sent
    topic_ids: dict[str, bytes] = field(default_factory=dict)  # of the assignment's topics
    heartbeat_interval_ms: int = 5_000  # the group's consumer.heartbeat.interval.ms


def new_member_id() -> str:
    """A Kafka-style member id: a random UUID in URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _tps(values: list) -> list[TopicPartition]:
    return sorted((str(t), int(p)) for t, p in values)


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = DEFAULT_ASSIGNOR
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, list[TopicPartition]] = field(default_factory=dict)
    topics: dict[str, list] = field(default_factory=dict)  # name -> [topic id, partitions]
    refreshed_ms: int = 0  # when ``topics`` was last read from the log

    # -- persistence format -------------------------------------------------------------
    def pack(self) -> bytes:
        return pack_group(self, ConsumerMember.__slots__)

    @classmethod
    def unpack(cls, data: bytes) -> ConsumerGroup:
        d, members = unpack_group(data, ConsumerMember)
        for m in members:
            m.assigned, m.revoking = _tps(m.assigned), _tps(m.revoking)
        d["target"] = {k: _tps(v) for k, v in d["target"].items()}
        return cls(**d, members={m.member_id: m for m in members})

    # -- views ----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """Kafka's consumer group state names, as ConsumerGroupDescribe reports them."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(
            m.epoch not in (self.assignment_epoch, STATIC_LEAVE_EPOCH)
            or m.state != MemberState.STABLE
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def has_regex(self) -> bool:
        return any(m.regex for m in self.members.values())

    def wanted_topics(self, all_topics: list[str] | None) -> set[str]:
        """Topic names the members subscribe to: by name, and of ``all_topics`` (every
        topic there is, needed when a member subscribes by regex) those matching."""
        names = {t for m in self.members.values() for t in m.topics}
        # Topics members still hold stay known, so their ids in heartbeats resolve.
        names.update(t for m in self.members.values() for t, _ in (*m.assigned, *m.revoking))
        for m in self.members.values():
            if m.regex:
                regex = m.regex
                names.update(t for t in all_topics or () if topic_regex.matches(regex, t))
        return names

    def resolve(self, owned: dict[bytes, list[int]] | None) -> set[TopicPartition] | None:
        """A heartbeat's owned partitions by topic name; those of topics the group does not
        know (deleted) are not owned by anyone any more."""
        if owned is None:
            return None
        names = {v[0]: t for t, v in self.topics.items()}
        return {(names[i], p) for i, ps in owned.items() if i in names for p in ps}

    def _bump(self) -> None:
        self.epoch += 1

    # -- heartbeat ------------------------------------------------------------------------
    def update_member(self, hb: Heartbeat) -> tuple[ConsumerMember, bool]:
        """Validate the heartbeat's epoch and apply its membership and subscription
        changes; returns the member and whether it joined (epoch 0)."""
        member = self.members.get(hb.member_id)
        owner = self._instance_owner(hb.instance_id)
        if hb.epoch == 0:
            member = self._join(hb, member, owner)
        elif member is None:
            raise Refused(Code.UNKNOWN_MEMBER_ID, f"{hb.member_id} is not a member")
        elif hb.epoch != member.epoch and not (
            hb.epoch == member.previous_epoch
            and (owned := self.resolve(hb.owned)) is not None
            and owned <= set(member.assigned)
        ):
            # An older epoch is fine only from a member that missed our last answer.
            raise Refused(
                Code.FENCED_MEMBER_EPOCH,
                f"epoch {hb.epoch} is not the member's epoch {member.epoch}",
            )
        if hb.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        member.client_id, member.client_host = hb.client_id, hb.client_host
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        changed = False
        if hb.topics is not None and sorted(hb.topics) != member.topics:
            member.topics, changed = sorted(hb.topics), True
        if hb.regex is not None and (hb.regex or None) != member.regex:
            member.regex, changed = hb.regex or None, True
        if hb.assignor is not None and hb.assignor != member.assignor:
            member.assignor, changed = hb.assignor, True
        if changed:
            self._bump()
        return member, hb.epoch == 0

    def _instance_owner(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _join(
        self, hb: Heartbeat, member: ConsumerMember | None, owner: ConsumerMember | None
    ) -> ConsumerMember:
        if owner is not None and owner.member_id != hb.member_id:
            if owner.epoch != STATIC_LEAVE_EPOCH:
                raise Refused(
                    Code.UNRELEASED_INSTANCE_ID,
                    f"instance {hb.instance_id} is still used by member {owner.member_id}",
                )
            # A static member back under a new id takes its old place: same target, same
            # epoch, no rebalance.
            del self.members[owner.member_id]
            self.target[hb.member_id] = self.target.pop(owner.member_id, [])
            owner.member_id = hb.member_id
            owner.epoch, owner.previous_epoch = owner.previous_epoch, -1
            self.members[hb.member_id] = owner
            return owner
        if member is not None:
            # A member rejoining (after being fenced, say) owns nothing any more.
            member.epoch, member.previous_epoch = 0, -1
            member.assigned, member.revoking, member.state = [], [], MemberState.STABLE
            return member
        member = ConsumerMember(
            hb.member_id, hb.instance_id, hb.rack_id, hb.client_id, hb.client_host,
            hb.rebalance_timeout_ms, [], None, None,
        )  # fmt: skip
        self.members[hb.member_id] = member
        self._bump()
        return member

    def leave(self, member_id: str, epoch: int) -> None:
        """The member leaves (-1), or a static member goes away for now (-2: its
        partitions stay its own until it comes back or its session expires)."""
        member = self.members.get(member_id)
        if member is None:
            raise Refused(Code.UNKNOWN_MEMBER_ID, f"{member_id} unknown")
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.previous_epoch, member.epoch = member.epoch, STATIC_LEAVE_EPOCH
        else:
            self.remove(member_id)

    def remove(self, member_id: str) -> None:
        """Drop a member (left, expired, fenced): its partitions are free at once."""
        if self.members.pop(member_id, None) is not None:
            self.target.pop(member_id, None)
            self._bump()

    def set_topics(self, topics: dict[str, list], now: int) -> None:
        """The subscribed topics' [id, partitions] as the log has them now; a change (a new
        topic matching a regex, more partitions) starts a new target assignment."""
        self.refreshed_ms = now
        if topics != self.topics:
            self.topics = topics
            self._bump()

    def assign_if_needed(self) -> None:
        """Compute the target assignment of the group epoch if it is not yet."""
        if self.assignment_epoch >= self.epoch:
            return
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.assignor:
                votes[m.assignor] = votes.get(m.assignor, 0) + 1
        self.assignor = max(sorted(votes), key=lambda a: votes[a]) if votes else DEFAULT_ASSIGNOR
        subscriptions = {m.member_id: m.subscribed(self.topics) for m in self.members.values()}
        partitions = {t: int(v[1]) for t, v in self.topics.items()}
        previous = {m: set(tps) for m, tps in self.target.items()}
        target = ASSIGNORS[self.assignor](subscriptions, partitions, previous)
        self.target = {m: sorted(tps) for m, tps in target.items()}
        self.assignment_epoch = self.epoch

    def reconcile(
        self, member: ConsumerMember, owned: set[TopicPartition] | None, now: int
    ) -> None:
        """Move the member one step toward its target (see the module's docstring)."""
        if member.state == MemberState.UNREVOKED:
            if owned is None or owned & set(member.revoking):
                return  # still consuming what it must give up
            member.revoking = []
        elif member.state == MemberState.STABLE and member.epoch == self.assignment_epoch:
            return
        target = set(self.target.get(member.member_id, ()))
        assigned = set(member.assigned)
        revoke = assigned - target
        if revoke:
            member.assigned, member.revoking = sorted(assigned & target), sorted(revoke)
            member.state = MemberState.UNREVOKED
            member.revoke_deadline_ms = now + max(member.rebalance_timeout_ms, 0)
            return
        held = self._held_by_others(member.member_id)
        wanted = target - assigned
        free = {tp for tp in wanted if tp not in held}
        member.assigned = sorted(assigned | free)
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.state = MemberState.UNRELEASED if wanted - free else MemberState.STABLE

    def _held_by_others(self, member_id: str) -> set[TopicPartition]:
        return {
            tp
            for m in self.members.values()
            if m.member_id != member_id
            for tp in (*m.assigned, *m.revoking)
        }

    def heartbeat(
        self, hb: Heartbeat, member: ConsumerMember, joined: bool, now: int
    ) -> HeartbeatResult:
        """Finish a heartbeat after ``update_member`` (and a topic refresh): assign if the
        group epoch moved, reconcile the member, and say what to answer."""
        before = (member.epoch, list(member.assigned))
        self.assign_if_needed()
        self.reconcile(member, self.resolve(hb.owned), now)
        send = joined or hb.full or before != (member.epoch, member.assigned)
        if not send:
            return HeartbeatResult(member.member_id, member.epoch, None)
        # A topic deleted meanwhile is left out: the member has nothing to consume there.
        assigned = [tp for tp in member.assigned if tp[0] in self.topics]
        ids = {t: bytes(self.topics[t][0]) for t, _ in assigned}
        return HeartbeatResult(member.member_id, member.epoch, assigned, ids)

    # -- expiry -----------------------------------------------------------------------
    def next_expiry(self, heartbeats: dict[str, int], config: ConsumerGroupConfig) -> int | None:
        """When (ms) the next member is due to be removed by ``expire``: its session's end,
        or its revocation deadline; None without members."""
        deadlines = []
        for m in self.members.values():
            if m.member_id in heartbeats:
                deadlines.append(heartbeats[m.member_id] + config.session_timeout_ms + 1)
            if m.state == MemberState.UNREVOKED:
                deadlines.append(m.revoke_deadline_ms + 1)
        return min(deadlines, default=None)

    def expire(
        self, heartbeats: dict[str, int], now: int, config: ConsumerGroupConfig
    ) -> list[str]:
        """Remove members whose session timed out, or that did not revoke partitions
        within their rebalance timeout; returns their ids."""
        gone = [
            m.member_id
            for m in self.members.values()
            if now - heartbeats.get(m.member_id, now) > config.session_timeout_ms
            or (m.state == MemberState.UNREVOKED and now > m.revoke_deadline_ms)
        ]
        for member_id in gone:
            self.remove(member_id)
        return gone

    # -- offsets ------------------------------------------------------------------------
    def commit_error(self, member_id: str, epoch: int, api_version: int | None = None) -> Code:
        """Whether an OffsetCommit (member epoch as its generation; ``api_version`` None:
        a transactional one) may store offsets: a standalone commit (epoch < 0, no member)
        only while the group is empty; a member's by the rule of
        group_rules.consumer_member_epoch_error (v9+, its current epoch)."""
        if epoch < 0 and not member_id and not self.members:
            return Code.NONE
        member = self.members.get(member_id)
        if member is None:
            return Code.UNKNOWN_MEMBER_ID
        return consumer_member_epoch_error(
            epoch, member.epoch, classic_member=False, commit_version=api_version
        )
