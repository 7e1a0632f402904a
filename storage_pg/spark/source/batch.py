"""The data source ``kafkaesque`` and its batch reader.

``KafkaesqueSource`` holds only the options Spark gave it; the readers and writers it makes
hold a ``SourceOptions`` (plain values), so all of them pickle to Spark's Python workers.
Everything that can be refused (options, topics, offsets, partitions) is refused while
Spark plans the query, on the driver, before any task runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)

from storage_pg.spark.source.columns import schema_ddl
from storage_pg.spark.source.connect import settle_worker
from storage_pg.spark.source.filters import Bounds
from storage_pg.spark.source.options import (
    WRITE_OPTIONS,
    SourceError,
    SourceOptions,
    read_options,
    write_options,
)
from storage_pg.spark.source.plan import (
    archived_marks,
    offset_at_time,
    partitions_now,
    ranges,
    resolve,
    run,
    tasks,
)
from storage_pg.spark.source.tiers import RangeSet, read_ranges

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.types import StructType

    from kafkaesque.hot.log import Log

NAME = "kafkaesque"


class KafkaesqueSource(DataSource):
    """``spark.read.format("kafkaesque")`` and friends: topics as Spark's Kafka source
    shows them, read across the archive and Redis (see storage_pg.spark.source)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        # The options are checked here: Spark asks for the schema when the DataFrame is
        # made (load()), so a wrong option fails there, before any plan or job.
        # (A write asks for no schema; a reader's options that are not a writer's are
        # checked, and so is any unknown one.)
        if any(str(k).lower() not in (*WRITE_OPTIONS, "path") for k in self.options):
            read_options(self.options, streaming=False)
        settle_worker()  # Spark's Python worker, which imported this package to get here
        include_headers = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return schema_ddl(include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from storage_pg.spark.source.stream import TopicStreamReader

        return TopicStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from storage_pg.spark.source.writer import TopicWriter, check_schema

        options = write_options(self.options)
        check_schema(schema, options)
        return TopicWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from storage_pg.spark.source.writer import TopicStreamWriter, check_schema

        options = write_options(self.options)
        check_schema(schema, options)
        return TopicStreamWriter(options)


class BatchReader(DataSourceReader):
    """A batch query: from startingOffsets (or startingTimestamp) to endingOffsets, as
    they are when Spark plans it, cut by the pushed filters."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.bounds = Bounds()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        return self.bounds.take(filters)

    def partitions(self) -> Sequence[InputPartition]:
        options, bounds = self.options, self.bounds

        async def plan(log: Log) -> list[RangeSet]:
            now = await partitions_now(log, options)
            starts = await resolve(
                log, "startingOffsets", options.starting, now, options.starting_timestamp
            )
            ends = await resolve(log, "endingOffsets", options.ending, now)
            for tp in now:
                if starts[tp] > ends[tp]:
                    raise SourceError(
                        f"{tp[0]}[{tp[1]}]: the starting offset {starts[tp]} is past the "
                        f"ending offset {ends[tp]}"
                    )
            kept = {tp: p for tp, p in now.items() if bounds.allows(*tp)}
            for tp in kept:
                starts[tp], ends[tp] = bounds.cut(starts[tp], ends[tp])
                if bounds.since_ms is not None and starts[tp] < ends[tp]:
                    found = await offset_at_time(log, tp, bounds.since_ms, ends[tp])
                    starts[tp] = max(starts[tp], found)
            planned = ranges(
                starts, ends, kept, options.min_partitions, max_per_task=options.max_per_task
            )
            return tasks(planned, options, await archived_marks(log, planned))

        # Spark wants at least one partition to plan a scan; an empty one reads nothing.
        return run(options, plan) or [RangeSet([])]

    def read(self, partition: RangeSet) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_ranges(self.options, partition.ranges)
