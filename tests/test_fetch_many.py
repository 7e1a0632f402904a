"""A fetch of many partitions: one Redis round trip for all of them, one byte budget across
them (KIP-74), and after a long-poll wake-up a read of only the partitions that grew."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.hot.notify import Notifier
from kafkaesque.partition.layer import EARLIEST, LATEST, OffsetLookup, Partitions
from kafkaesque.partition.read_types import FetchRequest, ReadCache
from kafkaesque.records.batch import decode_batch
from kafkaesque.records.build import build_batch

PARTITIONS = 50
POLL = 0.05  # a long poll's wait (seconds): the fetches a read cache serves


class CountingLog(Log):
    """A Log that records the partitions each multi-partition read asked Redis for."""

    read_calls: list[list[tuple[str, int]]]
    append_calls: list[int]  # the partitions of each pipelined append; -1: a single append

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_calls, self.append_calls = [], []
        # Log binds its parts' methods in __init__: counted by wrapping those.
        append, append_many, read_many = self.append, self.append_many, self.read_many

        async def counting_append(*args: Any, **kwargs: Any) -> Any:
            self.append_calls.append(-1)
            return await append(*args, **kwargs)

        async def counting_append_many(appends: Sequence, *args: Any, **kwargs: Any) -> Any:
            self.append_calls.append(len(appends))
            return await append_many(appends, *args, **kwargs)

        async def counting_read_many(requests: Sequence, *args: Any, **kwargs: Any) -> Any:
            self.read_calls.append([(r.topic, r.partition) for r in requests])
            return await read_many(requests, *args, **kwargs)

        self.append = counting_append
        self.append_many = counting_append_many
        self.read_many = counting_read_many


def values(batches: list[bytes]) -> list[bytes | None]:
    return [r.value for b in batches for r in decode_batch(b)]


def scenario(redis_url: str, body: Callable[[CountingLog, Partitions], object]) -> None:
    async def run() -> None:
        log = CountingLog(redis.asyncio.Redis.from_url(redis_url))
        notifier = Notifier(log.redis, log.channel(""))
        notifier.start()
        try:
            await log.create_topic(TopicConfig("t", PARTITIONS))
            await body(log, Partitions(log, notifier))  # type: ignore[misc]
        finally:
            await notifier.stop()
            await log.redis.aclose()

    asyncio.run(run())


def requests(offsets: dict[int, int], max_bytes: int = 1 << 20) -> list[FetchRequest]:
    return [FetchRequest("t", p, offset, max_bytes) for p, offset in offsets.items()]


def test_one_round_trip_and_one_budget_across_partitions(redis_url: str) -> None:
    async def body(log: CountingLog, partitions: Partitions) -> None:
        big = build_batch([b"b" * 1000])
        for p in (0, 1, 2):
            await partitions.append("t", p, [big, big])
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        results = await partitions.fetch(requests(offsets), max_bytes=3 * len(big))
        assert log.read_calls == [[("t", p) for p in range(PARTITIONS)]]  # one call for all
        # The budget runs out in partition 1: its second batch and partition 2 wait.
        assert [len(results["t", p].batches) for p in (0, 1, 2)] == [2, 1, 0]
        assert results["t", 2].high_watermark == 2
        # KIP-74: the first batch comes even over every limit, wherever it lies...
        results = await partitions.fetch(requests({5: 0, 1: 0}, max_bytes=10), max_bytes=10)
        assert [len(results["t", p].batches) for p in (5, 1)] == [0, 1]
        # ...but only the first: nothing after it.
        results = await partitions.fetch(requests({0: 0, 1: 0}, max_bytes=10), max_bytes=10)
        assert [len(results["t", p].batches) for p in (0, 1)] == [1, 0]
        # An unknown partition is that partition's error, not the fetch's.
        results = await partitions.fetch(
            [*requests({0: 0}), FetchRequest("gone", 0, 0, 100)], max_bytes=1 << 20
        )
        assert results["t", 0].batches and type(results["gone", 0].error).__name__ == (
            "UnknownTopic"
        )

    scenario(redis_url, body)


def test_a_wake_up_reads_only_the_partitions_that_grew(redis_url: str) -> None:
    async def body(log: CountingLog, partitions: Partitions) -> None:
        await partitions.append("t", 3, [build_batch([b"before"])])
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        offsets[3] = 1  # read up to its end already
        waiting = asyncio.create_task(
            partitions.fetch(requests(offsets), max_bytes=1 << 20, min_bytes=200, max_wait=10)
        )
        await asyncio.sleep(0.2)
        await partitions.append("t", 7, [build_batch([b"seven"])])  # under min_bytes
        await asyncio.sleep(0.2)
        await partitions.append("t", 9, [build_batch([b"nine" * 100])])
        results = await asyncio.wait_for(waiting, 5)
        assert values(results["t", 7].batches) == [b"seven"]
        assert values(results["t", 9].batches) == [b"nine" * 100]
        assert not any(results["t", p].batches for p in offsets if p not in (7, 9))
        assert results["t", 3].high_watermark == 1
        first, *again = log.read_calls
        assert len(first) == PARTITIONS
        assert again == [[("t", 7)], [("t", 9)]]

    scenario(redis_url, body)


def test_an_append_from_another_process_wakes_only_its_partition(redis_url: str) -> None:
    """Other brokers and the CLI tell the partition through Redis pub/sub."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        other = Log(redis.asyncio.Redis.from_url(redis_url))
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        waiting = asyncio.create_task(
            partitions.fetch(requests(offsets), max_bytes=1 << 20, max_wait=10)
        )
        await asyncio.sleep(0.2)
        await other.append("t", 42, [build_batch([b"elsewhere"])])
        results = await asyncio.wait_for(waiting, 5)
        assert values(results["t", 42].batches) == [b"elsewhere"]
        assert log.read_calls[1:] == [[("t", 42)]]
        await other.redis.aclose()

    scenario(redis_url, body)


def test_a_read_cache_reads_only_partitions_that_changed_between_fetches(redis_url: str) -> None:
    """A fetch session's cache: quiet partitions read to their end are not read again."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        cache = ReadCache(partitions.notifier)
        other = Log(redis.asyncio.Redis.from_url(redis_url))
        await other.append("t", 3, [build_batch([b"old"])])
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        first = await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        assert values(first["t", 3].batches) == [b"old"]
        assert log.read_calls == [[("t", p) for p in range(PARTITIONS)]]
        # Partition 3 answered records: its next fetch (from its new offset) reads it.
        offsets[3] = 1
        again = await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        assert log.read_calls[1:] == [[("t", 3)]] and not any(f.batches for f in again.values())
        assert again["t", 10].high_watermark == 0 and again["t", 3].high_watermark == 1
        # Nothing changed: no read at all.
        await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        assert len(log.read_calls) == 2
        # An append elsewhere (heard through Redis) between fetches: only that partition.
        await other.append("t", 20, [build_batch([b"new"])])
        await asyncio.sleep(0.2)
        got = await partitions.fetch(requests(offsets), 1 << 20, max_wait=5, cache=cache)
        assert log.read_calls[2:] == [[("t", 20)]] and values(got["t", 20].batches) == [b"new"]
        # A long poll wakes for an append and reads only it.
        offsets[20] = 1
        waiting = asyncio.create_task(
            partitions.fetch(requests(offsets), 1 << 20, max_wait=10, cache=cache)
        )
        await asyncio.sleep(0.2)
        await other.append("t", 30, [build_batch([b"later"])])
        got = await asyncio.wait_for(waiting, 5)
        assert values(got["t", 30].batches) == [b"later"]
        assert log.read_calls[3:] == [[("t", 20)], [("t", 30)]]  # 20 at its new offset
        # Asked differently (here: a leader epoch, then the isolation) is read again.
        changed = [FetchRequest("t", 5, 0, 1 << 20, current_leader_epoch=0)]
        await partitions.fetch(changed, 1 << 20, max_wait=POLL, cache=cache)
        assert log.read_calls[5:] == [[("t", 5)]]
        await partitions.fetch(
            requests({6: 0}), 1 << 20, max_wait=POLL, committed=True, cache=cache
        )
        assert log.read_calls[6:] == [[("t", 6)]]
        cache.close()
        await other.redis.aclose()

    scenario(redis_url, body)


def test_a_fetch_answered_at_once_reads_everything(redis_url: str) -> None:
    """Without a wait, an append whose message is still on its way would go unseen:
    such a fetch reads every partition, cache or not."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        cache = ReadCache(partitions.notifier)
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        await partitions.fetch(requests(offsets), 1 << 20, cache=cache)
        await partitions.fetch(requests(offsets), 1 << 20, min_bytes=0, max_wait=1, cache=cache)
        assert [len(read) for read in log.read_calls] == [PARTITIONS] * 3
        cache.close()

    scenario(redis_url, body)


def test_a_read_cache_reads_everything_again_after_its_refresh(redis_url: str) -> None:
    async def body(log: CountingLog, partitions: Partitions) -> None:
        cache = ReadCache(partitions.notifier, refresh=0.0)
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        for _ in range(2):
            await partitions.fetch(requests(offsets), 1 << 20, max_wait=POLL, cache=cache)
        assert [len(read) for read in log.read_calls] == [PARTITIONS, PARTITIONS]
        cache.close()

    scenario(redis_url, body)


def test_a_lost_subscription_makes_every_watcher_look_again(redis_url: str) -> None:
    """Appends published while the notifier was reconnecting are unheard: after it
    resubscribes, every watched key is told that anything may have changed."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        heard: list[tuple[str, str | None]] = []
        notifier = partitions.notifier
        assert notifier is not None
        notifier.watch({"t"}, lambda key, message: heard.append((key, message)))
        await asyncio.sleep(0.2)
        await log.redis.client_kill_filter(_type="pubsub")
        async with asyncio.timeout(10):
            while ("t", None) not in heard:
                await asyncio.sleep(0.05)

    scenario(redis_url, body)


def test_a_produce_to_many_partitions_is_one_round_trip(redis_url: str) -> None:
    """Every partition's append goes to Redis in one pipeline; each keeps its own outcome:
    a corrupt batch, an unknown partition and a refused idempotent sequence fail alone."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        monitor = redis.Redis.from_url(redis_url)
        good = build_batch([b"a"])
        fenced = build_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=5)
        records = {("t", p): good for p in range(10)}
        records |= {("t", 10): b"junk", ("gone", 0): good, ("t", 11): fenced}
        outcomes = await partitions.append_many(records)
        assert [outcomes["t", p].base_offset for p in range(10)] == [0] * 10
        assert type(outcomes["t", 10].error).__name__ == "CorruptBatch"
        assert type(outcomes["gone", 0].error).__name__ == "UnknownTopic"
        assert outcomes["t", 11].error is not None
        # One pipeline of the 11 that reached Redis: the corrupt batch and the unknown
        # topic were refused before it.
        assert log.append_calls == [11]
        # Each landed where it was sent, once.
        for p in range(10):
            assert values((await log.read("t", p, 0)).batches) == [b"a"]
        # After Redis forgot its scripts, the appends still go through.
        monitor.script_flush()
        outcomes = await partitions.append_many({("t", 0): good, ("t", 1): good})
        assert [outcomes["t", p].base_offset for p in (0, 1)] == [1, 1]
        monitor.close()

    scenario(redis_url, body)


def _evalsha_calls(client: redis.Redis) -> int:
    """Scripts Redis has run (not those refused as not loaded yet)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return stats.get("calls", 0) - stats.get("failed_calls", 0)


def test_list_offsets_of_many_partitions_is_one_round_trip(redis_url: str) -> None:
    """A consumer starting on many partitions asks for their ends: one script call for
    all; a search by time still gets its own, and each partition its own answer."""

    async def body(log: CountingLog, partitions: Partitions) -> None:
        for p in range(3):
            await partitions.append("t", p, [build_batch([b"x"] * (p + 1), timestamp=1000)])
        await partitions.log.delete_records("t", 2, 1)
        monitor = redis.Redis.from_url(redis_url)
        before = _evalsha_calls(monitor)
        latest = [OffsetLookup("t", p, LATEST) for p in range(PARTITIONS)]
        found = await partitions.list_offsets(
            [*latest, OffsetLookup("t", 2, EARLIEST), OffsetLookup("gone", 0, LATEST)]
        )
        assert _evalsha_calls(monitor) - before == 1
        assert [f.offset for f in found[:4]] == [1, 2, 3, 0]
        assert found[PARTITIONS].offset == 1  # DeleteRecords moved partition 2's start
        assert type(found[-1]).__name__ == "UnknownTopic"
        fenced = await partitions.list_offsets([OffsetLookup("t", 0, LATEST, 5)])
        assert type(fenced[0]).__name__ == "UnknownLeaderEpoch"
        by_time = await partitions.list_offsets([OffsetLookup("t", 1, 1000)])
        assert by_time[0].offset == 0 and by_time[0].timestamp == 1000
        monitor.close()

    scenario(redis_url, body)
