"""Reading partitions, for kafkaesque.hot.log.Log: one (read.lua), many in one round
trip (read_many.lua), their offsets; below Redis' start the archive answers."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from redis.crc import key_slot

from kafkaesque.errors import StorageUnavailable, UnknownTopic
from kafkaesque.hot.log_context import LogPart
from kafkaesque.hot.log_transactions import aborted_entry
from kafkaesque.hot.log_types import PartitionRead, ReadResult
from kafkaesque.records.batch import base_offset

# read.lua's statuses: below the log start, past the log end, below DeleteRecords' floor.
_BELOW_START, _PAST_END, _DELETED = 1, 2, 3


def _after(offset: int, first: int) -> int | None:
    """``first`` when the data resumes after a gap beginning at ``offset``, else None."""
    return first if first > offset else None


def _parsed(
    answer: list[Any],
) -> tuple[int, int, int, int, int, list[tuple[int, int, int]], list[bytes]]:
    """A read script's answer: (status, log start, log end, leader epoch, last stable
    offset, aborted transactions, batches)."""
    status, start, end, epoch, lso, aborted, *batches = answer
    return status, start, end, epoch, lso, [aborted_entry(a) for a in aborted], batches


def _from_redis(
    parsed: tuple[int, int, int, int, int, list[tuple[int, int, int]], list[bytes]],
    archived: bool,
) -> ReadResult | None:
    """The ReadResult of what Redis answered; None when the archive must be asked (the
    offset is below Redis' start and there is an archive) or for a deleted offset."""
    status, start, end, epoch, lso, aborted, batches = parsed
    if status == _DELETED or (status == _BELOW_START and archived):
        return None
    return ReadResult(
        batches,
        start,
        end,
        epoch,
        status == _BELOW_START,
        status == _PAST_END,
        last_stable=lso,
        aborted=aborted,
    )


class Reads(LogPart):
    """Reading partitions from Redis, and from the archive (the context's ``cold``) below
    Redis' start."""

    async def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 1 << 20,
        max_records: int = 1 << 31,
        min_one: bool = True,
        committed: bool = False,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset`` within the limits; with ``min_one``
        the first batch comes even when it alone exceeds them. ``committed``
        (READ_COMMITTED): only whole batches below the last stable offset, with the aborted
        transactions among them (``ReadResult.aborted``).

        Below Redis' oldest offset the archive (``cold``) answers; an offset no store holds
        lies in a gap (dropped by retention before archiving) and the read goes on from the
        next offset that exists, as Kafka's readers do across a compacted log's gaps.
        Without an archive such an offset is ``below_start`` (Kafka's retention), and so
        is, archive or not, an offset below the log start DeleteRecords moved."""
        redis_read = await self._read_redis(
            topic, partition, offset, max_bytes, max_records, min_one, committed
        )
        return await self._finish_read(
            topic, partition, offset, redis_read, max_bytes, max_records, min_one, committed
        )

    async def read_many(
        self,
        requests: Sequence[PartitionRead],
        max_bytes: int,
        committed: bool = False,
        min_one: bool = True,
    ) -> list[ReadResult | UnknownTopic | StorageUnavailable]:
        """Read many partitions within ``max_bytes`` in all, in the order given, each within
        its own ``max_bytes`` too; with ``min_one`` the first batch read comes even when
        over the limits (KIP-74). Redis answers every partition in one round trip; offsets
        only in the archive take one more each (see ``read``). One result per request: a
        ReadResult, UnknownTopic for a partition that does not exist, or
        StorageUnavailable for one whose offset only the unreachable archive holds."""
        if not requests:
            return []
        keys = [self.keys.partition(r.topic, r.partition).meta for r in requests]
        head = [max_bytes, int(committed), int(min_one), int(self.context.capped)]
        answers = await self._read_many(keys, head, [(r.offset, r.max_bytes) for r in requests])
        results: list[ReadResult | UnknownTopic | StorageUnavailable] = []
        read_bytes = 0
        archived = self.context.cold is not None
        for r, answer in zip(requests, answers, strict=True):
            if answer[0] < 0:
                results.append(UnknownTopic(f"no partition {r.partition} in {r.topic}"))
                continue
            result = _from_redis(_parsed(answer), archived)
            if result is not None and self.cluster and result.batches:
                # One call per slot, each within the whole budget: what is over it goes.
                size = sum(map(len, result.batches))
                if read_bytes + size > max_bytes and not (min_one and read_bytes == 0):
                    result = dataclasses.replace(result, batches=[], aborted=[])
            if result is not None:  # the common case: no coroutine needed
                results.append(result)
                read_bytes += sum(map(len, result.batches))
                continue
            # An archive read gets what the budget has left when it comes.
            budget = min(r.max_bytes, max_bytes - read_bytes)
            first = min_one and read_bytes == 0
            try:
                result = await self._finish_read(
                    r.topic, r.partition, r.offset, answer, budget, 1 << 31, first, committed
                )
            except StorageUnavailable as exc:
                results.append(exc)
                continue
            read_bytes += sum(map(len, result.batches))
            results.append(result)
        return results

    async def partition_offsets(
        self, partitions: Sequence[tuple[str, int]]
    ) -> list[tuple[int, int, int, int] | None]:
        """(first offset in Redis, log end, leader epoch, last stable offset) of each
        partition, in one round trip (read_many.lua asked to read nothing); None for a
        partition that does not exist."""
        if not partitions:
            return []
        keys = [self.keys.partition(topic, p).meta for topic, p in partitions]
        # Offset -1 is below every floor: the script answers the offsets and reads nothing.
        answers = await self._read_many(
            keys, [0, 0, 0, int(self.context.capped)], [(-1, 0)] * len(partitions)
        )
        return [None if a[0] < 0 else (a[1], a[2], a[3], a[4]) for a in answers]

    async def _read_many(
        self, metas: list[str], head: Sequence[object], per: Sequence[tuple[int, int]]
    ) -> list[Any]:
        """read_many.lua's answers, in the order of ``metas``: one call on a single Redis;
        on a cluster one per slot (its KEYS must share one), run concurrently."""
        if not self.cluster:
            args = list(head)
            for pair in per:
                args += pair
            return await self.scripts.read_many(keys=metas, args=args)
        by_slot: dict[int, list[int]] = {}
        for i, meta in enumerate(metas):
            by_slot.setdefault(key_slot(meta.encode()), []).append(i)
        groups = list(by_slot.values())
        replies = await asyncio.gather(
            *(
                self.scripts.read_many(
                    keys=[metas[i] for i in group],
                    args=[*head, *(x for i in group for x in per[i])],
                )
                for group in groups
            )
        )
        answers: list[Any] = [None] * len(metas)
        for group, reply in zip(groups, replies, strict=True):
            for i, answer in zip(group, reply, strict=True):
                answers[i] = answer
        return answers

    async def _finish_read(
        self,
        topic: str,
        partition: int,
        offset: int,
        redis_read: list[Any],
        max_bytes: int,
        max_records: int,
        min_one: bool,
        committed: bool,
    ) -> ReadResult:
        """The ReadResult of a read.lua answer; below Redis' start the archive answers."""
        parsed = _parsed(redis_read)
        result = _from_redis(parsed, self.context.cold is not None)
        if result is not None:
            return result
        status, start, end, epoch, lso, aborted, batches = parsed
        if status == _DELETED:  # deleted from the archive too: not a gap to read across
            earliest = await self.earliest(topic, partition, start)
            return ReadResult([], earliest, end, epoch, below_start=True, last_stable=lso)
        # Tiered storage: offsets Redis no longer holds are read from the archive.
        cold = self.context.cold
        assert cold is not None  # else _from_redis answered
        earliest = await self.earliest(topic, partition, start)
        batches = await cold.read(topic, partition, offset, max_bytes)
        # Archived batches only from below Redis' start: from there on Redis holds the
        # offsets (the archive may lack some that Redis still has: a DeleteRecords that
        # deleted from the archive but did not reach Redis yet).
        first = base_offset(batches[0]) if batches else start
        if first < start:
            # The archive holds only what ended transactions left (the archiver stops at
            # the last stable offset) and no aborted records.
            return ReadResult(
                batches, earliest, end, epoch, skipped_to=_after(offset, first), last_stable=lso
            )
        # Nothing at or after the offset is archived: a gap up to Redis' oldest, as long as
        # the archive has reached it. Where it has not, while archiving is on (no page
        # leaves Redis unarchived then), the records are in neither store right now: say
        # so, retriably, rather than skip a reader past records that may still come.
        if start > await cold.archived_through(topic, partition):
            meta = self.keys.partition(topic, partition).meta
            if await self.redis.hget(meta, "archiving"):
                raise StorageUnavailable(
                    f"{topic}[{partition}] offset {offset}: Redis holds the log from "
                    f"{start} on and the archive has not reached it yet"
                )
        for _ in range(8):  # retention may move the start between two calls
            status, start, end, epoch, lso, aborted, batches = _parsed(
                await self._read_redis(
                    topic, partition, start, max_bytes, max_records, min_one, committed
                )
            )
            if status != _BELOW_START:
                break
        return ReadResult(
            batches,
            min(earliest, start),
            end,
            epoch,
            status in (_BELOW_START, _DELETED),
            status == _PAST_END,
            start,
            lso,
            aborted,
        )

    async def _read_redis(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        max_records: int,
        min_one: bool,
        committed: bool,
    ) -> list[Any]:
        """read.lua's answer (see ``_parsed``)."""
        p = self.keys.partition(topic, partition)
        return await self.scripts.read(
            keys=[p.meta, p.index, p.txn_open, p.txn_aborted],
            args=[
                p.prefix,
                offset,
                max_bytes,
                max_records,
                int(min_one),
                int(committed),
                int(self.context.capped),
            ],
        )

    async def earliest(self, topic: str, partition: int, redis_start: int) -> int:
        """The lower of Redis' log start and the archive's first offset. The archive
        holds only what Redis held, so from a Redis start of 0 it is not asked (and an
        unreachable archive fails nothing)."""
        cold = self.context.cold
        if cold is not None and redis_start > 0:
            cold_start = await cold.start_offset(topic, partition)
            if cold_start is not None and cold_start < redis_start:
                # Not below the floor of a DeleteRecords that reached Redis but not the
                # archive yet (a command run without it): reads there are refused.
                meta = self.keys.partition(topic, partition).meta
                return max(cold_start, int(await self.redis.hget(meta, "floor") or 0))
        return redis_start
