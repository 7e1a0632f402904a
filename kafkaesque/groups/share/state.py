"""A share group and its members, with ShareGroupHeartbeat's rules (Kafka 4.2's
GroupMetadataManager for share groups), no I/O.

Every change of members, subscriptions or subscribed topics' partitions bumps the group
epoch and assigns again at once (share groups have no revocation: a partition may be
read by several members, records are what they hold); each member's epoch then becomes
the group epoch. Epoch 0 joins, -1 leaves; another epoch than the member's (or its
previous one, after a lost answer) is FENCED_MEMBER_EPOCH, an unknown member
UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack

from kafkaesque.errors import Code, Refused
from kafkaesque.groups.share.assignor import assign

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
ASSIGNOR = "simple"


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """A ShareGroupHeartbeat's fields; ``topics`` None: unchanged since the last one."""

    member_id: str
    epoch: int
    rack_id: str | None = None
    topics: list[str] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int
    previous_epoch: int
    rack_id: str | None
    client_id: str
    client_host: str
    topics: list[str]
    assigned: list[tuple[str, int]] = field(default_factory=list)

    def pack(self) -> list[Any]:
        return [
            self.member_id,
            self.epoch,
            self.previous_epoch,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.topics,
            [list(tp) for tp in self.assigned],
        ]

    @classmethod
    def unpack(cls, data: list[Any]) -> ShareMember:
        m, epoch, prev, rack, client, host, topics, assigned = data
        return cls(m, epoch, prev, rack, client, host, list(topics), [(t, p) for t, p in assigned])


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    member_id: str
    epoch: int
    assignment: list[tuple[str, int]] | None  # None: unchanged, not sent


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    # Subscribed topic name -> [topic id (16 bytes), partition count], as last read.
    topics: dict[str, list[Any]] = field(default_factory=dict)
    members: dict[str, ShareMember] = field(default_factory=dict)
    refreshed_ms: int = 0

    @property
    def state(self) -> str:
        """Kafka's share group states: Empty, Stable (Dead once deleted: no state)."""
        return "Stable" if self.members else "Empty"

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def heartbeat(self, hb: ShareHeartbeat, max_size: int = 200) -> bool:
        """Apply one heartbeat (not a leave): a new member, a new subscription; returns
        whether the members or subscriptions changed (the caller then re-reads the topics
        and calls ``set_topics``, which bumps the epoch once, then ``answer``). A new
        member beyond ``max_size`` (group.share.max.size) is refused. Raises
        Refused."""
        member = self.members.get(hb.member_id)
        if hb.epoch == JOIN_EPOCH:
            if member is None and len(self.members) >= max_size:
                raise Refused(
                    Code.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of {max_size} members.",
                )
            if member is None:
                member = ShareMember(
                    hb.member_id, 0, 0, hb.rack_id, hb.client_id, hb.client_host, []
                )
                self.members[hb.member_id] = member
        elif member is None:
            raise Refused(
                Code.UNKNOWN_MEMBER_ID,
                f"Member {hb.member_id} is not a member of group {self.group_id}.",
            )
        elif hb.epoch != member.epoch and hb.epoch != member.previous_epoch:
            raise Refused(
                Code.FENCED_MEMBER_EPOCH,
                f"The share group member has epoch {hb.epoch}, the coordinator "
                f"{member.epoch}. The member must abandon all its partitions and rejoin.",
            )
        changed = False
        if hb.topics is not None and sorted(hb.topics) != sorted(member.topics):
            member.topics = sorted(set(hb.topics))
            changed = True
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        return changed or hb.epoch == JOIN_EPOCH

    def leave(self, member_id: str) -> bool:
        """The member leaves (epoch -1, or its session expired); False if unknown."""
        if self.members.pop(member_id, None) is None:
            return False
        self.epoch += 1
        self.reassign()
        return True

    def set_topics(self, topics: dict[str, list[Any]], now_ms: int, changed: bool) -> None:
        """The subscribed topics as read now; members or subscriptions that ``changed``,
        or a change of the topics' partitions, bump the group epoch (once)."""
        if changed or topics != self.topics:
            self.topics = topics
            self.epoch += 1
        self.refreshed_ms = now_ms
        self.reassign()

    def reassign(self) -> None:
        """Assign again if the group epoch moved past the assignment's."""
        if self.assignment_epoch == self.epoch:
            return
        counts = {t: int(entry[1]) for t, entry in self.topics.items()}
        target = assign({m.member_id: m.topics for m in self.members.values()}, counts)
        for m in self.members.values():
            m.assigned = target.get(m.member_id, [])
        self.assignment_epoch = self.epoch

    def answer(self, member_id: str, joined: bool) -> ShareHeartbeatResult:
        """The heartbeat's answer once the topics are set (see ``heartbeat``): the member
        comes to the assignment epoch, and its assignment goes with the answer when its
        epoch moved (or it joined)."""
        self.reassign()
        member = self.members[member_id]
        if member.epoch != self.assignment_epoch or joined:
            if member.epoch != self.assignment_epoch:
                member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
            return ShareHeartbeatResult(member.member_id, member.epoch, list(member.assigned))
        return ShareHeartbeatResult(member.member_id, member.epoch, None)

    def expire(self, heartbeats: dict[str, int], now_ms: int, session_ms: int) -> list[str]:
        """Remove the members not heard of for ``session_ms``; returns their ids."""
        gone = [m for m in self.members if now_ms - heartbeats.get(m, 0) >= session_ms]
        for m in gone:
            self.leave(m)
        return gone

    def next_expiry(self, heartbeats: dict[str, int], session_ms: int) -> int | None:
        """When the next member's session ends (ms), None without members."""
        if not self.members:
            return None
        return min(heartbeats.get(m, 0) for m in self.members) + session_ms

    def pack(self) -> bytes:
        return msgpack.packb(
            [
                self.group_id,
                self.epoch,
                self.assignment_epoch,
                self.topics,
                [m.pack() for m in self.members.values()],
                self.refreshed_ms,
            ]
        )

    @classmethod
    def unpack(cls, data: bytes) -> ShareGroup:
        gid, epoch, assignment_epoch, topics, members, refreshed = msgpack.unpackb(data)
        group = cls(gid, epoch, assignment_epoch, dict(topics), {}, refreshed)
        for raw in members:
            m = ShareMember.unpack(raw)
            group.members[m.member_id] = m
        return group
