"""Where partitions live, as Kafka's replica-management APIs ask about it.

Every partition has exactly one replica, the broker that leads it: the data is in Redis
(older data in the archive), so a replica is only who serves it. A reassignment to
``[n]`` makes live broker ``n`` the partition's preferred leader (``meta.preferred``,
which kafkaesque.partition.leadership honours while ``n`` lives) and moves the leadership to it at
once, so none is ever in progress; a preferred election moves a partition back to its
preferred leader (or its hash winner), an unclean one away from a leader that left.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import (
    ElectionNotNeeded,
    InvalidReplicaAssignment,
    NoReassignmentInProgress,
    UnknownTopic,
)
from kafkaesque.partition.leadership import Leadership, node_of

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


def check_replicas(replicas: Sequence[int], live: Iterable[int]) -> int:
    """The one broker ``replicas`` names; InvalidReplicaAssignment unless it is exactly
    one live broker. The messages are KRaft's (ReplicationControlManager)."""
    if not replicas:
        raise InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list."
        )
    seen: set[int] = set()
    brokers = set(live)
    for replica in replicas:
        if replica in seen:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes the broker {replica} more than once."
            )
        seen.add(replica)
        if replica not in brokers:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes broker {replica}, but no such "
                f"broker is registered."
            )
    if len(replicas) > 1:
        raise InvalidReplicaAssignment(
            f"The manual partition assignment names {len(replicas)} brokers: a partition "
            "has one replica here (its data is in Redis)."
        )
    return replicas[0]


class Replicas:
    """The replica view of the partitions, through this broker's ``leadership``."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership
        self.log = leadership.log

    async def partition(self, topic: str, partition: int) -> TopicConfig:
        """The topic's config; UnknownTopic for an unknown topic or partition."""
        config = await self.log.topic(topic)
        if not 0 <= partition < config.partitions:
            raise UnknownTopic(f"No such partition as {topic}-{partition}")
        return config

    async def elect(self, topic: str, partition: int, election_type: int) -> None:
        """A leader election: preferred moves the partition to the leader it should have
        (its preferred replica, else its hash winner); unclean only away from a leader
        that left. Raises ElectionNotNeeded when it already has it, or UnknownTopic."""
        config = await self.partition(topic, partition)
        [seen] = await self.log.leaders([(topic, partition)])
        if seen is None:
            raise UnknownTopic(f"No such partition as {topic}-{partition}")
        leader, _epoch, preferred = seen
        want = self.leadership.want(config.topic_id, partition, preferred)
        # No leader written yet: it is led by the one it should have.
        node = node_of(leader)
        live = leader == "" or (node is not None and node in self.leadership.registry.live)
        if leader in ("", str(want)) or (election_type == UNCLEAN and live):
            kind = "preferred" if election_type == PREFERRED else "unclean"
            raise ElectionNotNeeded(
                f"Leader election not needed for {topic}-{partition}: its {kind} leader, "
                f"broker {leader or want}, already leads"
            )
        await self.leadership.move(topic, partition, leader, want)

    async def assign(
        self, topic: str, assignments: Sequence[Sequence[int]], first: int = 0
    ) -> None:
        """A replica assignment given at creation (or for added partitions from
        ``first``): each partition's one broker becomes its preferred leader."""
        live = self.leadership.registry.live
        nodes = [check_replicas(replicas, live) for replicas in assignments]
        await self.log.prefer(topic, {first + i: node for i, node in enumerate(nodes)})

    async def reassign(self, topic: str, partition: int, replicas: Sequence[int] | None) -> None:
        """Move the partition to ``replicas`` (one live broker), at once; cancelling
        (None) raises NoReassignmentInProgress: none is ever in progress."""
        await self.partition(topic, partition)
        if replicas is None:
            raise NoReassignmentInProgress(f"No ongoing reassignment for {topic}-{partition}")
        node = check_replicas(replicas, self.leadership.registry.live)
        await self.log.prefer(topic, {partition: node})
        [seen] = await self.log.leaders([(topic, partition)])
        if seen is not None and seen[0] != str(node):
            await self.leadership.move(topic, partition, seen[0], node)
