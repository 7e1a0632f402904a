"""A consumer group as the command line shows it, of either protocol (classic, consumer),
from the coordinators (direct mode) or from the Kafka admin API (wire mode)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kafkaesque.types import TopicPartition

CLASSIC = "classic"  # ListGroups v5's group types
CONSUMER = "consumer"


@dataclass
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]


@dataclass
class GroupView:
    """A group, of either protocol."""

    group: str
    type: str
    state: str
    protocol_type: str
    protocol: str
    generation: int | None  # a consumer group's: its epoch; None: not known (wire mode)
    members: list[MemberView] = field(default_factory=list)

    def owners(self) -> dict[TopicPartition, MemberView]:
        return {(t, p): m for m in self.members for t, parts in m.assignment.items() for p in parts}

    def header(self) -> dict[str, object]:
        generation = "generation" if self.type == CLASSIC else "epoch"
        return {
            "group": self.group,
            "type": self.type,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            generation: self.generation,
        }


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """The partitions per topic, in the order given (an assignment as MemberView holds it)."""
    found: dict[str, list[int]] = {}
    for t, p in partitions:
        found.setdefault(t, []).append(p)
    return found
