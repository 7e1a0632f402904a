"""Writing a DataFrame to topics, batch or streaming: at least once, as Spark's Kafka sink.

Rows carry ``value`` (binary or string) and optionally ``key``, ``topic`` (else the
``topic`` option), ``partition`` (else Kafka's default partitioner: murmur2 of the key,
records without a key spread round-robin) and ``headers``. Each Spark task appends
through the partition layer (kafkaesque.partition.layer.Partitions: the topic's configs
and size limits apply) as an idempotent producer of its own: a producer id per task and
sequence numbers per partition, so an append retried while Redis is unavailable is
stored once (the log acknowledges a repeated batch with its first offsets). A task that
Spark runs again (it failed, or a micro-batch is replayed after a restart) is a new
producer and writes its rows again: duplicates are possible, losses are not, exactly as
with Spark's Kafka sink; deduplicate downstream on a key if needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from kafkaesque.errors import StorageUnavailable
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.build import build_batch
from kafkaesque.records.partitioner import partition_for_key
from storage_pg.spark.source.connect import close_log, open_log
from storage_pg.spark.source.options import SourceError, SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql.types import StructType

RECORDS_PER_BATCH = 2_000
RETRIES = 6  # appends of one batch while Redis is unavailable (about 6 s in all)
BYTES_PER_BATCH = 512 << 10  # well under message.max.bytes (1 MiB)
_COLUMNS = {"key", "value", "topic", "partition", "headers"}


def check_schema(schema: StructType, options: SourceOptions) -> None:
    """Refuse, before any task, a DataFrame the writer cannot write."""
    names = {f.name.lower() for f in schema.fields}
    if "value" not in names:
        raise SourceError("the DataFrame needs a value column (binary or string)")
    if "topic" not in names and options.topic is None:
        raise SourceError("the DataFrame has no topic column: give the topic option")
    unknown = names - _COLUMNS - {"offset", "timestamp", "timestamptype"}
    if unknown:
        raise SourceError(
            f"columns {', '.join(sorted(unknown))} are not written; the writer takes "
            "key, value, topic, partition and headers"
        )


@dataclass
class Written(WriterCommitMessage):
    records: int


class TopicWriter(DataSourceArrowWriter):
    """``df.write.format("kafkaesque")``: each task appends its rows."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(asyncio.run(_write(self.options, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """The rows are in the log as each task appended them: nothing to publish."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """What the tasks appended stays (at least once)."""


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafkaesque")``: each micro-batch's tasks append their rows."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(asyncio.run(_write(self.options, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to publish (see TopicWriter.commit)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """What the tasks appended stays (at least once)."""


class _Producer:
    """One task's idempotent producer: its id, a sequence per partition, the records
    waiting per partition."""

    def __init__(self, layer: Partitions, producer_id: int) -> None:
        self.layer = layer
        self.producer_id = producer_id
        self.sequences: dict[tuple[str, int], int] = {}
        self.pending: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
        self.sizes: dict[tuple[str, int], int] = {}
        self.partitions: dict[str, int] = {}
        self.round_robin = 0
        self.written = 0

    async def add(
        self, topic: str, partition: int | None, key: Any, value: Any, headers: Any
    ) -> None:
        count = self.partitions.get(topic)
        if count is None:
            count = self.partitions[topic] = (await self.layer.log.topic(topic)).partitions
        if partition is None:
            if key is None:
                partition, self.round_robin = self.round_robin % count, self.round_robin + 1
            else:
                partition = partition_for_key(_bytes(key) or b"", count)
        elif not 0 <= partition < count:
            raise SourceError(f"partition {partition} of topic {topic!r} does not exist")
        tp = (topic, partition)
        record = (_bytes(key), _bytes(value), [(k, _bytes(v)) for k, v in headers or ()])
        self.pending.setdefault(tp, []).append(record)
        size = self.sizes[tp] = self.sizes.get(tp, 0) + len(record[1] or b"") + 32
        if len(self.pending[tp]) >= RECORDS_PER_BATCH or size >= BYTES_PER_BATCH:
            await self.flush(tp)

    async def flush(self, tp: tuple[str, int]) -> None:
        records = self.pending.pop(tp, [])
        self.sizes.pop(tp, None)
        if not records:
            return
        sequence = self.sequences.get(tp, 0)
        keys = [r[0] for r in records]
        headers = [r[2] for r in records]
        batch = build_batch(
            [r[1] for r in records],
            None if all(k is None for k in keys) else keys,
            headers=None if not any(headers) else headers,
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=sequence,
        )
        for attempt in range(RETRIES):
            try:
                await self.layer.append(tp[0], tp[1], [batch], acks_all=True)
                break
            except StorageUnavailable:  # Redis away for now: the same batch again, which
                if attempt == RETRIES - 1:  # the log stores once if it did land
                    raise
                await asyncio.sleep(0.2 * 2**attempt)
        self.sequences[tp] = (sequence + len(records)) & 0x7FFFFFFF
        self.written += len(records)

    async def flush_all(self) -> None:
        for tp in list(self.pending):
            await self.flush(tp)


async def _write(options: SourceOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Append every row of ``batches``; the number of records written."""
    log, _ = open_log(options, 2, archive_connections=0)
    try:
        producer = _Producer(Partitions(log), await log.new_producer_id())
        for batch in batches:
            columns = {
                name.lower(): batch.column(i).to_pylist()
                for i, name in enumerate(batch.schema.names)
            }
            n = batch.num_rows
            none = [None] * n
            # The topic option wins over a topic column, as in Spark's Kafka sink.
            topics = [options.topic] * n if options.topic else columns.get("topic", none)
            for topic, partition, key, value, headers in zip(
                topics,
                columns.get("partition", none),
                columns.get("key", none),
                columns["value"],
                columns.get("headers", none) if options.include_headers else none,
                strict=True,
            ):
                if not topic:
                    raise SourceError("a row has no topic and no topic option was given")
                pairs = None if headers is None else [(h["key"], h["value"]) for h in headers]
                await producer.add(topic, partition, key, value, pairs)
        await producer.flush_all()
        return producer.written
    finally:
        await close_log(log, None)


def _bytes(value: Any) -> bytes | None:
    """A key, value or header value as bytes (strings as UTF-8, as Spark's Kafka sink)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
