"""Records as Arrow columns in the schema of Spark's Kafka source.

Two producers of rows: record batches from Redis (decoded here with the log's one record
parser, kafkaesque.records.body.parse_record) and the archive's rows (already columns).
Both fill a ``Columns`` and leave as one ``pyarrow.RecordBatch``: per record only list
appends in Python; the conversion to Arrow is pyarrow's, per column.
"""

from __future__ import annotations

import base64
import json
from itertools import repeat
from typing import TYPE_CHECKING

from kafkaesque.records.batch import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BatchHeader,
    records_data,
)
from kafkaesque.records.body import parse_record
from storage_pg.rows import NO_HEADERS, header_key

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

# Spark's Kafka source schema (headers only with includeHeaders=true).
FIELDS = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_FIELD = "headers array<struct<key:string,value:binary>>"
CREATE_TIME, LOG_APPEND_TIME = 0, 1


def is_data(header: BatchHeader, aborted: list[tuple[int, int, int]]) -> bool:
    """Whether a stored batch holds records a reader sees: not a control batch (a
    transaction marker), not one of the ``aborted`` transactions' (producer id, first
    offset, ABORT marker's offset)."""
    attributes = header.attributes
    if attributes & ATTR_CONTROL:
        return False
    if aborted and attributes & ATTR_TRANSACTIONAL:
        pid, base = header.producer_id, header.base_offset
        return not any(p == pid and first <= base < last for p, first, last in aborted)
    return True


def schema_ddl(include_headers: bool) -> str:
    return f"{FIELDS}, {HEADERS_FIELD}" if include_headers else FIELDS


Header = tuple[str, bytes | None]


class Columns:
    """The rows of one partition's range, column by column."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._empty()

    def _empty(self) -> None:
        self.record_keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []  # ms
        self.types: list[int] = []
        self.headers: list[list[Header]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_batch(
        self, batch: bytes, low: int, high: int, aborted: list[tuple[int, int, int]]
    ) -> None:
        """The records of one stored batch with offsets in low..high-1; nothing for a
        control batch (a transaction marker) or one of the ``aborted`` transactions
        (producer id, first offset, ABORT marker's offset)."""
        header, data, pos, end = records_data(batch, 0)
        if not is_data(header, aborted):
            return
        attributes, base = header.attributes, header.base_offset
        base_ts, max_delta = header.base_timestamp, header.last_offset_delta
        append_time = header.max_timestamp if attributes & ATTR_LOG_APPEND_TIME else None
        kind = CREATE_TIME if append_time is None else LOG_APPEND_TIME
        keys, values, offsets, stamps = self.record_keys, self.values, self.offsets, self.timestamps
        headers = self.headers if self.include_headers else None
        taken = 0
        for _ in repeat(None, header.record_count):
            pos, delta, ts_delta, key, value, record_headers = parse_record(
                data, pos, end, max_delta
            )
            offset = base + delta
            if offset < low or offset >= high:
                continue
            offsets.append(offset)
            keys.append(key)
            values.append(value)
            stamps.append(base_ts + ts_delta if append_time is None else append_time)
            if headers is not None:
                headers.append(record_headers)
            taken += 1
        self.types.extend(repeat(kind, taken))

    def arrow(self) -> pa.RecordBatch:
        """The rows as a RecordBatch of the source's schema; the columns are emptied."""
        import pyarrow as pa
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        n = len(self.offsets)
        millis = pa.array(self.timestamps, pa.int64())
        arrays = [
            pa.array(self.record_keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array(repeat(self.topic, n), pa.string(), size=n),
            pa.array(repeat(self.partition, n), pa.int32(), size=n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ]
        names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
        if self.include_headers:
            arrays.append(pa.array(self.headers, headers_type()))
            names.append("headers")
        self._empty()
        return pa.RecordBatch.from_arrays(arrays, names=names)


def headers_type() -> pa.DataType:
    import pyarrow as pa

    item = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.list_(pa.field("element", item))


def header_list(text: str) -> list[Header]:
    """A record's headers from the archive's ``record.headers`` JSON text."""
    if text == NO_HEADERS:
        return []
    return [
        (header_key(k), None if v is None else base64.b64decode(v)) for k, v in json.loads(text)
    ]
