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
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.log import Log
from storage_pg.spark.source.connect import close_log, open_log, settle_worker
from storage_pg.spark.source.options import (
    EARLIEST,
    LATEST,
    SourceError,
    SourceOptions,
    check_offsets,
)
from storage_pg.spark.source.tiers import OffsetRange, RangeSet

T = TypeVar("T")
TP = tuple[str, int]

# The session's cores, as register() hands them to the planner (SparkContext.environment):
# a read is spread over that many tasks.
CORES_ENV = "KAFKAESQUE_SPARK_CORES"
# A tier's part of a range is cut into one piece per task only while the pieces keep at
# least this many offsets: below that a piece's own queries cost more than it balances.
MIN_PIECE = 4_096


@dataclass(frozen=True)
class PartitionNow:
    """A partition as the log has it now."""

    topic_id: str  # hex
    epoch: int
    latest: int  # the last stable offset (read_committed) or the log end


def run(options: SourceOptions, ask: Callable[[Log], Awaitable[T]]) -> T:
    """``ask(log)`` on a log over the options' Redis and archive (never restoring Redis)."""
    settle_worker()

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
            now[tp].epoch if start_epochs is None else start_epochs.get(tp, now[tp].epoch),
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


def cores() -> int:
    """The session's cores (``CORES_ENV``); 2 where register() did not say."""
    try:
        return max(1, int(os.environ.get(CORES_ENV, "2")))
    except ValueError:
        return 2


def tasks(
    planned: list[OffsetRange],
    options: SourceOptions,
    marks: dict[TP, int] | None = None,
    cut: bool = True,
) -> list[RangeSet]:
    """The Spark tasks that read ``planned`` (as ``ranges`` planned it with the options'
    minPartitions and maxRecordsPerPartition). Given either, each range is a task of its
    own, as the options ask. Else the read is spread over ``cores()`` tasks: a task's
    fixed cost (Spark's task and Python worker, the connections) is paid once per core,
    not once per range, and each task gets an equal piece of every partition's archived
    part (below its mark in ``marks``) and of its Redis part, so the cores share both
    tiers' work. Without ``cut`` the ranges are dealt whole (a stream's: each
    partition's records of a micro-batch in one task, in order, for a writer that copies
    them to a topic)."""
    if options.min_partitions or options.max_per_task:
        return [RangeSet([r]) for r in planned]
    return spread(planned, cores(), marks or {}, cut)


def spread(
    planned: list[OffsetRange], count: int, marks: dict[TP, int], cut: bool = True
) -> list[RangeSet]:
    """``planned`` over at most ``count`` tasks (see ``tasks``), each piece dealt to the
    task with the fewest offsets so far: with ``cut``, each range's parts below and above
    its partition's mark in ``marks`` cut into up to ``count`` pieces of at least
    MIN_PIECE offsets, else each range whole. Pieces of a partition that a task gets end
    to end are one range."""
    dealt: list[list[OffsetRange]] = [[] for _ in range(count)]
    loads = [0] * count  # offsets dealt to each task
    for r in planned:
        parts = [(r.start, r.end)]
        if cut:
            mark = min(max(marks.get((r.topic, r.partition), r.start), r.start), r.end)
            parts = [(low, high) for low, high in ((r.start, mark), (mark, r.end)) if high > low]
        for low, high in parts:
            pieces = max(1, min(count, (high - low) // MIN_PIECE)) if cut else 1
            step = math.ceil((high - low) / pieces)
            for first in range(low, high, step):
                last = min(high, first + step)
                i = min(range(count), key=loads.__getitem__)  # the least loaded task
                loads[i] += last - first
                task = dealt[i]
                if task and task[-1].end == first and task[-1].value[:2] == r.value[:2]:
                    first = task.pop().start  # the task's previous piece: one range
                task.append(
                    OffsetRange(
                        r.topic, r.partition, first, last, r.topic_id, r.epoch, r.start_epoch
                    )
                )
    return [RangeSet(task) for task in dealt if task]


async def archived_marks(log: Log, planned: list[OffsetRange]) -> dict[TP, int]:
    """Each planned partition's archived mark (offsets below it are read from the
    archive), for ``tasks`` to spread both tiers; none without an archive."""
    archive = log.cold
    if archive is None:
        return {}
    return {
        (r.topic, r.partition): await archive.archived_through(r.topic, r.partition)
        for r in {(r.topic, r.partition): r for r in planned}.values()
    }


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
