"""Which broker leads each partition, and coordinates each group and transactional id.

Rendezvous hashing over the live brokers (kafkaesque.hot.registry): ``winner(key, nodes)`` is
the node with the highest hash of (key, node), so every process agrees, a broker joining
takes about 1/N of the partitions and one leaving gives up only its own. The hash only
says who *should* lead; the truth is the partition's ``meta.leader`` in Redis, moved by
lead.lua (compare-and-set, a new leader epoch on every move) and enforced by append.lua,
which refuses a broker that does not lead. The data, producer state and pages are all in
Redis, so a move copies nothing.

A partition without a leader yet (just created, or from before several brokers) is led by
its winner, and the first broker to look writes that down without a new epoch: every
broker served it as that one. A replica assignment (kafkaesque.partition.replicas) names a
preferred leader, which wins while it lives.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable

from kafkaesque.errors import Conflict, NotLeader, UnknownTopic
from kafkaesque.hot.log import Log
from kafkaesque.hot.registry import Registry

log = logging.getLogger(__name__)

SWEEP_INTERVAL_MS = 10_000  # every partition's leader is looked at least this often


def _rank(key: bytes, node: int) -> bytes:
    return hashlib.blake2b(key + b"\0" + str(node).encode(), digest_size=8).digest()


def winner(key: bytes, nodes: Iterable[int]) -> int | None:
    """The node that should own ``key`` among ``nodes`` (None if there is none)."""
    return max(nodes, key=lambda node: (_rank(key, node), node), default=None)


def partition_key(topic_id: bytes, partition: int) -> bytes:
    """By topic id, not name: a topic deleted and created again is a new one."""
    return topic_id + partition.to_bytes(4, "big")


def node_of(text: str) -> int | None:
    """The broker id a partition's ``meta.leader`` or preferred leader names; None when
    it names none: empty, or something no broker wrote (a broker id is a number)."""
    return int(text) if text.isdigit() else None


def coordinator_key(key_type: int, key: str) -> bytes:
    """FindCoordinator's key: 0 a group id, 1 a transactional id."""
    return f"{key_type}:{key}".encode()


class Leadership:
    """This broker's view of the partitions' leaders, kept by ``reconcile`` after every
    heartbeat that brought a change and at least every SWEEP_INTERVAL_MS."""

    def __init__(self, log_: Log, registry: Registry) -> None:
        self.log = log_
        self.registry = registry
        # (topic, partition) -> its leader as last seen; a partition not here yet (a new
        # topic) is served by whoever is asked, until the next reconcile.
        self.leaders: dict[tuple[str, int], int] = {}
        self._last_membership = -2
        self._last_sweep = 0.0
        self._due = True

    @property
    def me(self) -> int:
        """This broker's node id (the registry's: it may be assigned when joining)."""
        return self.registry.me.node_id

    def soon(self) -> None:
        """Reconcile at the next heartbeat (a request met a partition without a leader)."""
        self._due = True
        self.registry.changed()

    def want(
        self, topic_id: bytes, partition: int, preferred: str, nodes: Iterable[int] | None = None
    ) -> int:
        """The broker that should lead the partition among ``nodes`` (the live ones):
        its preferred leader (a replica assignment) while it lives, else its winner."""
        nodes = self.registry.live if nodes is None else nodes
        if (node := node_of(preferred)) is not None and node in nodes:
            return node
        found = winner(partition_key(topic_id, partition), nodes)
        return self.me if found is None else found

    def effective(self, topic_id: bytes, partition: int, leader: str, preferred: str) -> int | None:
        """The leader clients are told of for a partition whose ``meta.leader`` is
        ``leader``: the one it should have when none is set; None when the leader set is
        not alive (the one it should have is about to take it over)."""
        node = node_of(leader)
        if node is None:
            return self.want(topic_id, partition, preferred)
        return node if node in self.registry.live else None

    async def move(self, topic: str, partition: int, seen: str, node: int) -> None:
        """Move one partition's leadership from ``seen`` to ``node`` now (an election or
        reassignment), and tell every broker; Conflict if it moved meanwhile."""
        [result] = await self.log.lead([(topic, partition, seen, str(node))])
        if result is None:
            raise UnknownTopic(f"No such partition as {topic}-{partition}")
        done, leader, _epoch = result
        if not done:
            raise Conflict(f"{topic}-{partition} moved to broker {leader} meanwhile")
        self.leaders[(topic, partition)] = node
        await self.registry.announce()

    def check(self, topic: str, partition: int) -> NotLeader | None:
        """NotLeader when another broker leads the partition (as last seen)."""
        leader = self.leaders.get((topic, partition), self.me)
        if leader == self.me:
            return None
        return NotLeader(f"broker {leader} leads {topic}[{partition}]")

    def coordinator(self, key_type: int, key: str) -> int:
        """The broker FindCoordinator names for a group or transactional id. Any broker
        can serve a group (its state and lock are in Redis); this only spreads them."""
        found = winner(coordinator_key(key_type, key), self.registry.live)
        return self.me if found is None else found

    async def on_heartbeat(self, announced: bool, now: float) -> None:
        """After a heartbeat: reconcile if the membership moved, a move was announced,
        a request asked for it, or the sweep interval passed."""
        moved = self.registry.membership != self._last_membership
        if moved or announced or self._due or now - self._last_sweep >= SWEEP_INTERVAL_MS / 1000:
            self._last_membership = self.registry.membership
            self._last_sweep = now
            self._due = False
            await self.reconcile()

    async def _partitions(self) -> list[tuple[str, int, bytes]]:
        return [
            (config.name, p, config.topic_id)
            for config in await self.log.topic_configs()
            for p in range(config.partitions)
        ]

    async def reconcile(self) -> None:
        """Give every partition its winner: a first leader where none is set, and the
        partitions this broker wins from a leader that left or lost them to it (a join)."""
        nodes = set(self.registry.live)
        partitions = await self._partitions()
        current = await self.log.leaders([(t, p) for t, p, _ in partitions])
        leaders: dict[tuple[str, int], int] = {}
        moves: list[tuple[str, int, str, str]] = []
        for (topic, p, topic_id), seen in zip(partitions, current, strict=True):
            if seen is None:  # deleted meanwhile
                continue
            leader, _epoch, preferred = seen
            want = self.want(topic_id, p, preferred, nodes)
            node = node_of(leader)
            if node is None or (want == self.me and node != want):
                moves.append((topic, p, leader, str(want)))
            leaders[(topic, p)] = want if node is None else node
        if moves:
            results = await self.log.lead(moves)
            for (topic, p, seen_leader, asked), result in zip(moves, results, strict=True):
                if result is None:
                    leaders.pop((topic, p), None)
                    continue
                done, leader, epoch = result
                node = node_of(leader)
                leaders[(topic, p)] = int(asked) if node is None else node
                if done and seen_leader:
                    log.info(
                        "leading %s[%d] from broker %s, epoch %d", topic, p, seen_leader, epoch
                    )
            await self.registry.announce()
        self.leaders = leaders

    async def hand_over(self) -> int:
        """A graceful stop: give each partition this broker leads to its winner among
        the others, at once (instead of after the session timeout). Returns how many."""
        others = set(self.registry.live) - {self.me}
        if not others:
            return 0
        partitions = await self._partitions()
        current = await self.log.leaders([(t, p) for t, p, _ in partitions])
        mine = str(self.me)
        moves = [
            (topic, p, mine, str(self.want(topic_id, p, seen[2], others)))
            for (topic, p, topic_id), seen in zip(partitions, current, strict=True)
            if seen is not None and seen[0] == mine
        ]
        if moves:
            await self.log.lead(moves)
            await self.registry.announce()
        return len(moves)
