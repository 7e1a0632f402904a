"""The streaming reader: micro-batches as offset ranges, exactly-once with a checkpoint.

An offset (what Spark writes to the checkpoint's offset log before a micro-batch runs) is
``{"offsets": {topic: {"partition": next offset}}, "epochs": {...}, "ids": {topic: topic
id}}``: where each partition's next batch starts, and the leader epoch and topic id it had
then. A restarted query replays the batch its checkpoint planned, by those offsets, and
the same range reads the same rows (storage_pg.spark.source.tiers); the epochs and ids
let the read tell whether the offsets still mean the same records.

- ``latestOffset``: the subscribed partitions' latest offsets (the last stable offset
  under read_committed: a stream holds before an open transaction), at most
  maxOffsetsPerTrigger past the start in all (shared by backlog), never past the target
  of Trigger.AvailableNow. A partition that appears (a new one, or a topic matching the
  pattern) joins at its earliest offset, read from the next batch on.
- ``partitions``: one range per partition that moved (cut at STREAM_PIECE offsets),
  dealt whole to one task per core (storage_pg.spark.source.plan ``tasks``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from storage_pg.spark.source.connect import settle_worker
from storage_pg.spark.source.options import DataLoss, SourceOptions
from storage_pg.spark.source.plan import (
    TP,
    PartitionNow,
    by_topic,
    from_topics,
    partitions_now,
    ranges,
    resolve,
    run,
    share,
    tasks,
)
from storage_pg.spark.source.tiers import RangeSet, read_ranges

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from kafkaesque.hot.log import Log

log = logging.getLogger("kafkaesque.spark")

# A partition's offsets in one micro-batch are cut into ranges of at most this many (each
# read by one task), unless maxRecordsPerPartition says otherwise.
STREAM_PIECE = 50_000


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's Kafka source's micro-batches over the log (see the module's docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.target: dict[TP, int] | None = None  # Trigger.AvailableNow's end
        # Fail now, at the query's start, on a topic that does not exist or wrong offsets.
        self._initial = self._plan_initial()

    def _plan_initial(self) -> dict[str, Any]:
        options = self.options

        async def plan(log: Log) -> dict[str, Any]:
            now = await partitions_now(log, options)
            starts = await resolve(
                log,
                "startingOffsets",
                options.starting,
                now,
                options.starting_timestamp,
                complete=False,
            )
            return _offset(starts, now)

        return run(options, plan)

    def initialOffset(self) -> dict[str, Any]:
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        options = self.options

        async def latest(log: Log) -> dict[TP, int]:
            return {tp: p.latest for tp, p in (await partitions_now(log, options, True)).items()}

        self.target = run(options, latest)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        options, target = self.options, self.target
        starts, ids = from_topics(start["offsets"]), start.get("ids", {})

        async def plan(log: Log) -> dict[str, Any]:
            now = await partitions_now(log, options, missing_ok=True)
            latest: dict[TP, int] = {}
            for tp, p in now.items():
                known = ids.get(tp[0])
                if known is not None and known != p.topic_id:
                    self._recreated(tp[0])
                    starts.pop(tp, None)
                if tp not in starts:  # joins at its earliest offset
                    latest[tp] = await log.earliest_offset(*tp)
                    starts[tp] = latest[tp]
                    continue
                end = p.latest if target is None else min(p.latest, target.get(tp, starts[tp]))
                latest[tp] = max(starts[tp], end)  # a log that went back: the read checks
            if isinstance(limit, ReadMaxRows):
                latest = share(starts, latest, limit.max_rows)
            return _offset(latest, now)

        return run(options, plan)

    def _recreated(self, topic: str) -> None:
        message = f"data loss: topic {topic} was deleted and created again under the query"
        if self.options.fail_on_data_loss:
            raise DataLoss(message + " (failOnDataLoss=false starts it again from its earliest)")
        log.warning("%s: reading the new topic from its earliest offset", message)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        settle_worker()
        starts, ends = from_topics(start["offsets"]), from_topics(end["offsets"])
        start_epochs = from_topics(start.get("epochs", {}))
        now = {
            tp: PartitionNow(end["ids"][tp[0]], end["epochs"][tp[0]][str(tp[1])], ends[tp])
            for tp in ends
        }
        # A topic created again between the two: its old offsets mean nothing now.
        same = {
            tp: o
            for tp, o in starts.items()
            if start.get("ids", {}).get(tp[0]) == now.get(tp, _NO).topic_id
        }
        options = self.options
        planned = ranges(
            same,
            ends,
            now,
            options.min_partitions,
            start_epochs,
            options.max_per_task or STREAM_PIECE,
        )
        # Ranges dealt whole over the cores: a partition's offsets of a micro-batch (up
        # to STREAM_PIECE) are read by one task, in order.
        return tasks(planned, options, cut=False)

    def read(self, partition: RangeSet) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_ranges(self.options, partition.ranges)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the position is Spark's checkpoint, not a consumer group's."""


_NO = PartitionNow("", -1, -1)


def _offset(offsets: dict[TP, int], now: dict[TP, PartitionNow]) -> dict[str, Any]:
    """A stream offset (see the module's docstring)."""
    epochs = {tp: now[tp].epoch for tp in offsets if tp in now}
    ids = {tp[0]: now[tp].topic_id for tp in offsets if tp in now}
    return {
        "offsets": by_topic(offsets),
        "epochs": by_topic(epochs),
        "ids": dict(sorted(ids.items())),
    }
