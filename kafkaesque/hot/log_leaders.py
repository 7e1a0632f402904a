"""The partitions' leaders, for kafkaesque.hot.log.Log (partition.leadership): who
leads each partition, its preferred leader, and the compare-and-set that moves it."""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import RedisError

from kafkaesque.hot.log_context import LogPart
from kafkaesque.hot.pipelined import pack
from kafkaesque.hot.scripts import shared_failure

# The fields `leaders` reads, packed once (see there).
_FIELDS = pack(("leader", "epoch", "preferred", "end"))[len(b"*4\r\n") :]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PartitionLeaders(LogPart):
    """The leader fields of each partition's meta: ``leader``, ``preferred``, ``epoch``."""

    async def leaders(
        self, partitions: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int, str] | None]:
        """(leader node id, leader epoch, preferred leader) of each (topic, partition),
        node ids "" when none was set; None for one that does not exist. One round trip.
        On the shared connection the HMGETs are packed by formatting their keys: the
        heartbeat's sweep reads every partition, and redis-py's pipeline held the event
        loop ~50 ms per 10,000 of them."""
        metas = [self.keys.partition(topic, p).meta.encode() for topic, p in partitions]
        shared = self.scripts.shared
        if shared is not None:
            packed = b"".join(
                [b"*6\r\n$5\r\nHMGET\r\n$%d\r\n%s\r\n%s" % (len(m), m, _FIELDS) for m in metas]
            )
            try:
                replies = await shared.execute_packed(packed, len(metas))
            except RedisError as exc:
                raise shared_failure(exc) from exc
        else:
            pipe = self.redis.pipeline(transaction=False)
            for meta in metas:
                pipe.hmget(meta, "leader", "epoch", "preferred", "end")
            replies = await pipe.execute()
        return [
            None
            if end is None
            else ((leader or b"").decode(), int(epoch or 0), (preferred or b"").decode())
            for leader, epoch, preferred, end in replies
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
