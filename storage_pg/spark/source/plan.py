"""Planning on the driver: which partitions, from which offset to which, as offset ranges.

Each call opens its connections, asks, and closes them (the driver's planning runs in
short-lived Python workers). Offsets are Spark's Kafka source's: earliest (the lowest
offset either tier still holds), latest (the last stable offset under read_committed:
a stream holds before an open transaction), per-partition JSON, or a timestamp (the
first record at or after it, through Redis' time index and the archive's).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.log import Log
from storage_pg.spark.source.connect import close_log, open_log
from storage_pg.spark.source.options import (
    EARLIEST,
    LATEST,
    SourceError,
    SourceOptions,
    check_offsets,
)
from storage_pg.spark.source.tiers import OffsetRange

T = TypeVar("T")
TP = tuple[str, int]


@dataclass(frozen=True)
class PartitionNow:
    """A partition as the log has it now."""

    topic_id: str  # hex
    epoch: int
    latest: int  # the last stable offset (read_committed) or the log end


def run(options: SourceOptions, ask: Callable[[Log], Awaitable[T]]) -> T:
    """``ask(log)`` on a log over the options' Redis and archive (never restoring Redis)."""

    async def main() -> T:
        log, archive = open_log(options, 4, archive_connections=2)
        try:
            return await ask(log)
        finally:
            await close_log(log, archive)

    return asyncio.run(main())


async def partitions_now(
    log: Log, options: SourceOptions, missing_ok: bool = False
) -> dict[TP, PartitionNow]:
    """Every partition of the subscribed topics; SourceError for a topic that does not
    exist (unless ``missing_ok``: a stream whose topic was deleted stops finding it)."""
    if options.pattern is not None:
        topics = sorted(t for t in await log.list_topics() if options.subscribes(t))
    else:
        topics = list(options.topics)
    found: dict[TP, PartitionNow] = {}
    for topic in topics:
        try:
            config = await log.topic(topic)
        except UnknownTopic:
            if missing_ok or options.pattern is not None:
                continue
            raise SourceError(f"topic {topic!r} does not exist") from None
        tps = [(topic, p) for p in range(config.partitions)]
        states = await log.partition_offsets(tps)
        for tp, state in zip(tps, states, strict=True):
            if state is None:
                continue
            _, end, epoch, lso = state
            found[tp] = PartitionNow(
                config.topic_id.hex(), epoch, lso if options.committed else end
            )
    return found


async def resolve(
    log: Log,
    name: str,
    spec: str,
    now: dict[TP, PartitionNow],
    timestamp: int | None = None,
    complete: bool = True,
) -> dict[TP, int]:
    """The offsets ``spec`` (startingOffsets or endingOffsets) names for each partition of
    ``now``; ``timestamp`` (startingTimestamp) wins over it. With ``complete``, JSON must
    name every partition (as Spark's Kafka source asks); a partition or topic it names
    that is not subscribed or does not exist is refused either way."""
    if timestamp is not None:
        return {tp: await offset_at_time(log, tp, timestamp, now[tp].latest) for tp in now}
    given = check_offsets(name, spec)
    if given is None:
        if spec == "latest":
            return {tp: p.latest for tp, p in now.items()}
        return {tp: await log.earliest_offset(*tp) for tp in now}
    topics = {topic for topic, _ in now}
    wanted: dict[TP, int] = {}
    for topic, partitions in given.items():
        if topic not in topics:
            raise SourceError(f"{name} names topic {topic!r}, which is not subscribed or not there")
        for partition, offset in partitions.items():
            if (topic, partition) not in now:
                count = sum(1 for t, _ in now if t == topic)
                raise SourceError(
                    f"{name} names partition {partition} of {topic!r}, which has {count}"
                )
            wanted[topic, partition] = offset
    if complete:
        missing = [f"{t}[{p}]" for t, p in now if (t, p) not in wanted]
        if missing:
            raise SourceError(f"{name} must name every partition; missing: {', '.join(missing)}")
    out: dict[TP, int] = {}
    for tp in now:
        offset = wanted.get(tp, EARLIEST)
        if offset == EARLIEST:
            offset = await log.earliest_offset(*tp)
        elif offset == LATEST:
            offset = now[tp].latest
        out[tp] = offset
    return out


async def offset_at_time(log: Log, tp: TP, timestamp: int, latest: int) -> int:
    """The first offset whose record is at or after ``timestamp``, else ``latest``."""
    found = await log.offset_for_timestamp(tp[0], tp[1], timestamp)
    return latest if found is None else min(found[0], latest)


def ranges(
    starts: dict[TP, int],
    ends: dict[TP, int],
    now: dict[TP, PartitionNow],
    min_partitions: int | None = None,
    start_epochs: dict[TP, int] | None = None,
    max_per_task: int | None = None,
) -> list[OffsetRange]:
    """One range per partition with offsets to read, split into pieces of at most
    ``max_per_task`` offsets (maxRecordsPerPartition), and further with
    ``min_partitions``: the larger ranges in proportion to their size, as Spark's Kafka
    source splits them."""
    planned = [
        OffsetRange(
            tp[0],
            tp[1],
            starts[tp],
            ends[tp],
            now[tp].topic_id,
            now[tp].epoch,
            None if start_epochs is None else start_epochs.get(tp),
        )
        for tp in sorted(ends)
        if tp in now and tp in starts and ends[tp] > starts[tp]
    ]
    total = sum(r.end - r.start for r in planned)
    split: list[OffsetRange] = []
    for r in planned:
        size = r.end - r.start
        pieces = 1 if max_per_task is None else math.ceil(size / max_per_task)
        if min_partitions and len(planned) < min_partitions:
            pieces = max(pieces, math.ceil(size * min_partitions / total))
        step = math.ceil(size / pieces)
        split += [
            OffsetRange(
                r.topic,
                r.partition,
                low,
                min(r.end, low + step),
                r.topic_id,
                r.epoch,
                r.start_epoch,
            )
            for low in range(r.start, r.end, step)
        ]
    return split


def share(starts: dict[TP, int], latest: dict[TP, int], limit: int) -> dict[TP, int]:
    """At most ``limit`` offsets past ``starts`` in all, shared by backlog (each partition
    gets its part of the limit in proportion to how far behind it is, as Spark's Kafka
    source shares maxOffsetsPerTrigger)."""
    backlog = {tp: max(0, latest[tp] - starts.get(tp, latest[tp])) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    ends = {}
    for tp, behind in backlog.items():
        start = starts.get(tp, latest[tp])
        ends[tp] = start + math.floor(limit * behind / total)
    # what the rounding left goes to the partitions furthest behind, so a batch moves on
    left = limit - sum(ends[tp] - starts.get(tp, latest[tp]) for tp in latest)
    for tp in sorted(backlog, key=lambda tp: -backlog[tp]):
        if left <= 0:
            break
        if ends[tp] < latest[tp]:
            ends[tp] += 1
            left -= 1
    return ends


def by_topic(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark's Kafka JSON ({topic: {"partition": offset}})."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_topics(offsets: dict[str, dict[str, int]]) -> dict[TP, int]:
    return {(t, int(p)): o for t, parts in offsets.items() for p, o in parts.items()}


def names(tps: Iterable[TP]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(tps))
