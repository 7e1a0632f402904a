"""Where partitions live, as Kafka's replica-management APIs ask about it.

Every partition has exactly one replica, on the one broker (``node``), which leads it: the
data is in Redis (older data in the archive), so there is nothing to move and no other
broker to elect. The answers follow from that: a leader election is never needed, a
reassignment can only name the replica already there (a no-op), none is ever in progress.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafkaesque.errors import (
    ElectionNotNeeded,
    InvalidReplicaAssignment,
    NoReassignmentInProgress,
    UnknownTopic,
)
from kafkaesque.log import Log
from kafkaesque.topic_config import TopicConfig

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


def check_replicas(replicas: Sequence[int], node: int) -> None:
    """Raise InvalidReplicaAssignment unless ``replicas`` is the one replica this broker
    can give: itself. The messages are KRaft's (ReplicationControlManager)."""
    if not replicas:
        raise InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list."
        )
    seen: set[int] = set()
    for replica in replicas:
        if replica in seen:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes the broker {replica} more than once."
            )
        seen.add(replica)
        if replica != node:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes broker {replica}, but no such "
                f"broker is registered."
            )


class Replicas:
    """The replica view of one broker's partitions: ``node`` holds and leads them all."""

    def __init__(self, log: Log, node: int) -> None:
        self.log = log
        self.node = node

    async def partition(self, topic: str, partition: int) -> TopicConfig:
        """The topic's config; UnknownTopic for an unknown topic or partition."""
        config = await self.log.topic(topic)
        if not 0 <= partition < config.partitions:
            raise UnknownTopic(f"No such partition as {topic}-{partition}")
        return config

    async def elect(self, topic: str, partition: int, election_type: int) -> None:
        """A leader election: never needed, the only replica leads (for a preferred
        election the preferred replica is it; an unclean one needs no leader missing).
        Raises ElectionNotNeeded, or UnknownTopic."""
        await self.partition(topic, partition)
        kind = "preferred" if election_type == PREFERRED else "unclean"
        raise ElectionNotNeeded(
            f"Leader election not needed for {topic}-{partition}: its {kind} leader, "
            f"broker {self.node}, already leads"
        )

    async def reassign(self, topic: str, partition: int, replicas: Sequence[int] | None) -> None:
        """Move the partition to ``replicas``, or cancel its reassignment (None): a no-op
        for the replica it has; raises InvalidReplicaAssignment for any other set,
        NoReassignmentInProgress for a cancel, UnknownTopic for an unknown partition."""
        await self.partition(topic, partition)
        if replicas is None:
            raise NoReassignmentInProgress(f"No ongoing reassignment for {topic}-{partition}")
        check_replicas(replicas, self.node)
