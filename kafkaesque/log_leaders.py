"""Methods of kafkaesque.log.Log on the partitions' leaders (kafkaesque.leadership): who
leads each partition, its preferred leader, and the compare-and-set that moves it."""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from kafkaesque.keys import Keys
from kafkaesque.scripts import Scripts


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class LeadersLog:
    """The leader fields of each partition's meta: ``leader``, ``preferred``, ``epoch``."""

    redis: Redis
    scripts: Scripts
    keys: Keys

    async def leaders(
        self, partitions: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, str] | None]:
        """(leader node id, leader epoch, preferred leader) of each (topic, partition),
        node ids "" when none was set; None for one that does not exist. One round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for topic, p in partitions:
            pipe.hmget(self.keys.partition(topic, p).meta, "leader", "epoch", "preferred", "end")
        return [
            None
            if end is None
            else ((leader or b"").decode(), int(epoch or 0), (preferred or b"").decode())
            for leader, epoch, preferred, end in await pipe.execute()
        ]

    async def prefer(self, topic: str, nodes: dict[int, int]) -> None:
        """Set partitions' preferred leaders (partition -> node id), one round trip."""
        calls = [([self.keys.partition(topic, p).meta], [node]) for p, node in nodes.items()]
        for reply in await self.scripts.prefer.many(self.redis, calls):
            if isinstance(reply, Exception):
                raise reply

    async def lead(
        self, moves: Sequence[tuple[str, int, str, str]]
    ) -> list[tuple[bool, str, int] | None]:
        """Move the leadership of partitions, each a compare-and-set (lead.lua):
        (topic, partition, the leader seen, "" for none; the new one). One pipelined round
        trip; per move (done, the leader now, its epoch), None for a partition that does
        not exist."""
        calls = []
        for topic, p, seen, new in moves:
            keys = self.keys.partition(topic, p)
            calls.append(([keys.meta, keys.epochs], [seen, new]))
        replies = await self.scripts.lead.many(self.redis, calls)
        results: list[tuple[bool, str, int] | None] = []
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            done, *rest = reply
            if done < 0:
                results.append(None)
            else:
                leader, epoch = rest
                results.append((done == 1, _text(leader), int(epoch)))
        return results
