"""kafkaesque.partition.fetch_changed: a long poll that reads only the partitions that changed since
the last answer, and never vouches for one the ReadCache would read again (an append
heard, even during the wait; a refresh due; another broker leading it now)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import redis.asyncio

from kafkaesque.errors import NotLeader
from kafkaesque.hot.log import Log
from kafkaesque.partition.fetch_changed import fetch_changed
from kafkaesque.partition.layer import Partitions
from kafkaesque.partition.read_types import Fetched, FetchRequest, ReadCache
from kafkaesque.records.build import build_batch
from tests.test_fetch_many import PARTITIONS, POLL, CountingLog, requests, scenario, values


class Asked:
    """A request of every partition of "t", in order, with the answers of the last fetch."""

    def __init__(self, offsets: dict[int, int], last: dict[tuple[str, int], Fetched]) -> None:
        self.reqs = requests(offsets)
        self.at = {r.partition: i for i, r in enumerate(self.reqs)}
        self.answers = last

    def position(self, topic: str, partition: int) -> int | None:
        return self.at.get(partition) if topic == "t" else None

    def positions(self, topic: str) -> Iterable[int]:
        return range(len(self.reqs)) if topic == "t" else ()

    def request(self, position: int) -> FetchRequest:
        return self.reqs[position]

    def last(self, position: int) -> Fetched:
        return self.answers["t", self.reqs[position].partition]


async def poll(
    partitions: Partitions, cache: ReadCache, asked: Asked, changed: Iterable[int] = ()
) -> dict[tuple[str, int], Fetched]:
    return await fetch_changed(partitions, cache, asked, changed, {"t"}, 1 << 20, 1, POLL)


def test_only_changed_entries_and_heard_partitions_are_read(redis_url: str) -> None:
    async def body(log: CountingLog, partitions: Partitions) -> None:
        cache = ReadCache(partitions.notifier)
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        last = await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        log.read_calls.clear()
        assert await poll(partitions, cache, Asked(offsets, last)) == {}
        assert log.read_calls == []  # nothing changed: nothing read
        # An entry that changed (asked from another offset) is read.
        offsets[4] = 1  # past its end: an error
        got = await poll(partitions, cache, Asked(offsets, last), [4])
        assert list(got) == [("t", 4)] and log.read_calls == [[("t", 4)]]
        assert got["t", 4].error is not None
        offsets[4] = 0
        # An append heard between fetches: its partition, though its entry did not change.
        other = Log(redis.asyncio.Redis.from_url(redis_url))
        await other.append("t", 9, [build_batch([b"new"])])
        await asyncio.sleep(0.2)
        got = await poll(partitions, cache, Asked(offsets, last))
        assert values(got["t", 9].batches) == [b"new"]
        # An append to a quiet partition during the wait wakes it and is answered.
        offsets[9] = 1
        last = {**last, **got}
        waiting = asyncio.create_task(
            fetch_changed(partitions, cache, Asked(offsets, last), [9], {"t"}, 1 << 20, 1, 10)
        )
        await asyncio.sleep(0.2)
        await other.append("t", 30, [build_batch([b"later"])])
        got = await asyncio.wait_for(waiting, 5)
        assert values(got["t", 30].batches) == [b"later"]
        # A change of the whole topic (DeleteRecords, deletion...): every partition.
        log.read_calls.clear()
        await other.announce_change("t")
        await asyncio.sleep(0.2)
        got = await poll(partitions, cache, Asked(offsets, last))
        assert len(got) == PARTITIONS and len(log.read_calls[0]) == PARTITIONS
        cache.close()
        await other.redis.aclose()

    scenario(redis_url, body)


def test_answers_past_their_refresh_are_read_again(redis_url: str) -> None:
    async def body(log: CountingLog, partitions: Partitions) -> None:
        cache = ReadCache(partitions.notifier, refresh=0.0, refresh_batch=7)
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        last = await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        log.read_calls.clear()
        got = await poll(partitions, cache, Asked(offsets, last))
        assert len(got) == 7 and len(log.read_calls[0]) == 7  # the oldest, a batch at a time
        cache.close()

    scenario(redis_url, body)


class Leaders:
    """Leadership as the cache and the reads see it: partitions another broker leads."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], int] = {}

    def check(self, topic: str, partition: int) -> NotLeader | None:
        leader = self.leaders.get((topic, partition), 0)
        return None if leader == 0 else NotLeader(f"broker {leader} leads it")


def test_a_partition_another_broker_leads_now_is_answered_not_leader(redis_url: str) -> None:
    """Leadership moves are not announced on the partitions' channels: the cache looks at
    the leaders each time they change."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        leaders = Leaders()
        partitions.leadership = leaders  # type: ignore[assignment]
        cache = ReadCache(partitions.notifier)
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        last = await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        leaders.leaders = {("t", 8): 1}  # a reconcile: a new dict
        got = await poll(partitions, cache, Asked(offsets, last))
        assert list(got) == [("t", 8)] and isinstance(got["t", 8].error, NotLeader)
        # And through a whole read too (Partitions.fetch with the cache).
        leaders.leaders = {("t", 8): 1, ("t", 11): 1}
        got = await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        assert isinstance(got["t", 11].error, NotLeader)
        cache.close()

    scenario(redis_url, body)
