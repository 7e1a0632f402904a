"""Record batches and archive rows turned into Arrow columns in bulk, with numpy.

A read from Redis brings about 4 MiB of record batches: per record only the record's
length is read in Python (to find where the next one starts); every other field (the
deltas, the key and value lengths and where they lie) is decoded for all records at once
as numpy arrays, and keys and values become Arrow binary arrays cut out of the batches'
bytes by ``pyarrow.compute.take``, without a Python object per record. The archive sends
its rows as columns already (``ARCHIVED_COLUMNS``: one aggregate row of packed
big-endian arrays and concatenated bytes), so its rows never become Python objects either.

Anything out of the common shape (a record with headers when headers are wanted, a
malformed record) is left to ``storage_pg.spark.source.columns.Columns``, which decodes
with the log's record parser (kafkaesque.records.body.parse_record), record by record,
and raises its errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from kafkaesque.errors import InvalidRecord
from kafkaesque.records.batch import (
    ATTR_LOG_APPEND_TIME,
    HEADER_SIZE,
    base_offset,
    next_offset,
    records_data,
)
from kafkaesque.records.body import read_varint
from storage_pg.spark.source.columns import CREATE_TIME, LOG_APPEND_TIME, headers_type, is_data

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

NAMES = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

# One aggregate row per call: the count, then each column packed (int8send and
# timestamptz_send are big-endian; a null timestamp comes as -infinity, i64 min), keys
# and values concatenated with their lengths (-1: null) beside them. All aggregates of
# the row read the same rows in the same order; that it is the subquery's order is
# checked (the offsets must rise), not assumed.
ARCHIVED_COLUMNS = """
    SELECT count(*),
        string_agg(int8send("offset"), ''::bytea),
        string_agg(timestamptz_send(coalesce("timestamp", '-infinity')), ''::bytea),
        string_agg(key, ''::bytea),
        string_agg(int4send(coalesce(length(key), -1)), ''::bytea),
        string_agg(value, ''::bytea),
        string_agg(int4send(coalesce(length(value), -1)), ''::bytea)
        {headers}
    FROM (
        SELECT "offset", "timestamp", key, value, headers FROM record
        WHERE topic = $1 AND partition = $2 AND "offset" >= $3 AND "offset" < $4
        ORDER BY "offset"
        LIMIT $5
    ) AS rows
"""
ARCHIVED = ARCHIVED_COLUMNS.format(headers="")
ARCHIVED_WITH_HEADERS = ARCHIVED_COLUMNS.format(headers=", array_agg(headers::text)")
# timestamptz_send counts microseconds from 2000-01-01; Spark's from 1970-01-01.
_PG_EPOCH_US = 946_684_800_000_000
_NULL_TIME = np.iinfo(np.int64).min


@dataclass
class Rows:
    """Decoded rows, column by column, before they become a RecordBatch."""

    record_keys: pa.Array
    values: pa.Array
    offsets: np.ndarray  # int64
    micros: np.ndarray  # int64, Spark's timestamps (microseconds since 1970)
    null_time: np.ndarray | None  # bool: where the timestamp is null
    kinds: np.ndarray  # int32: CREATE_TIME or LOG_APPEND_TIME
    headers: pa.Array | None  # with includeHeaders

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self, topic: str, partition: int) -> pa.RecordBatch:
        import pyarrow as pa

        n = len(self.offsets)
        stamps = pa.array(self.micros, pa.int64(), mask=self.null_time).cast(
            pa.timestamp("us", tz="UTC")
        )
        arrays = [
            self.record_keys,
            self.values,
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(self.offsets),
            stamps,
            pa.array(self.kinds),
        ]
        names = list(NAMES)
        if self.headers is not None:
            arrays.append(self.headers)
            names.append("headers")
        return pa.RecordBatch.from_arrays(arrays, names=names)


def binary(buf: pa.Buffer, starts: np.ndarray, sizes: np.ndarray) -> pa.Array:
    """The binary array of ``sizes[i]`` bytes at ``starts[i]`` of ``buf`` (a size -1 is
    null); the slices must lie in order and not overlap. Built as an array whose even
    elements are the slices and odd ones what lies between, from which ``take`` copies
    the even ones out (one pass in C)."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    present = sizes >= 0
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.where(present, sizes, 0)
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), buf])
    taken = pc.take(spans, pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    if present.all():
        return taken
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, *taken.buffers()[1:]], null_count=int(n - present.sum())
    )


def archived_rows(row: Sequence[Any], kind: int, headers: pa.Array | None = None) -> Rows:
    """The columns of one ``ARCHIVED`` answer, timestamps of type ``kind`` (``headers``:
    its rows' headers, decoded, with includeHeaders). Timestamps are whole milliseconds,
    as records have them (the archive's microseconds rounded, half away from zero)."""
    import pyarrow as pa

    count = int(row[0])
    offsets = np.frombuffer(row[1] or b"", ">i8").astype(np.int64)
    times = np.frombuffer(row[2] or b"", ">i8").astype(np.int64)
    columns = []
    for data, lengths in ((row[3], row[4]), (row[5], row[6])):
        sizes = np.frombuffer(lengths or b"", ">i4").astype(np.int32)
        ends = np.cumsum(np.where(sizes >= 0, sizes, 0), dtype=np.int64)
        starts = (ends - np.where(sizes >= 0, sizes, 0)).astype(np.int32)
        columns.append(binary(pa.py_buffer(data or b""), starts, sizes))
    null_time = times == _NULL_TIME
    since = np.where(null_time, 0, times + _PG_EPOCH_US)
    micros = np.sign(since) * ((np.abs(since) + 500) // 1000 * 1000)
    rows = Rows(
        columns[0],
        columns[1],
        offsets,
        micros,
        null_time if null_time.any() else None,
        np.full(count, kind, np.int32),
        headers,
    )
    if count > 1 and not (np.diff(offsets) > 0).all():  # not in the subquery's order
        order = np.argsort(offsets, kind="stable")
        rows = take(rows, order)
    return rows


def take(rows: Rows, indices: np.ndarray) -> Rows:
    """The rows at ``indices``, in that order."""
    import pyarrow as pa

    picked = pa.array(indices.astype(np.int64))
    return Rows(
        rows.record_keys.take(picked),
        rows.values.take(picked),
        rows.offsets[indices],
        rows.micros[indices],
        None if rows.null_time is None else rows.null_time[indices],
        rows.kinds[indices],
        None if rows.headers is None else rows.headers.take(picked),
    )


class _Unusual(Exception):
    """A record the bulk decoder leaves to the record parser."""


def _varints(data: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at positions ``at`` of ``data``: (values, positions after);
    _Unusual if one runs past 10 bytes. Positions are clamped into ``data``: a malformed
    record reads garbage, not out of bounds, and fails the caller's final check."""
    last = len(data) - 1
    byte = data[np.minimum(at, last)].astype(np.uint64)
    value = byte & 0x7F
    more = byte >= 0x80
    after = at + 1
    shift = 7
    while more.any():
        if shift > 63:
            raise _Unusual
        byte = data[np.minimum(after, last)].astype(np.uint64)
        value |= np.where(more, (byte & 0x7F) << np.uint64(shift), 0).astype(np.uint64)
        after = after + more
        more &= byte >= 0x80
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, after


@dataclass
class _Batch:
    """One stored batch whose records are read: where its records lie in the joined
    buffer and what its header says about them."""

    count: int
    start: int
    end: int
    base_offset: int
    base_timestamp: int
    append_time: int | None  # LogAppendTime: every record's timestamp
    max_delta: int


def log_rows(
    batches: list[bytes],
    low: int,
    high: int,
    aborted: list[tuple[int, int, int]],
    include_headers: bool,
) -> Rows | None:
    """The records with offsets ``low``..``high``-1 of stored ``batches`` (a read's),
    without control batches and the ``aborted`` transactions' (producer id, first offset,
    ABORT marker's offset); None when a record is out of the common shape (headers, when
    ``include_headers``; anything malformed): then decode record by record. Without
    ``include_headers`` a record's headers are skipped unread (the batch's CRC vouches
    for their bytes, as kafkaesque.records.body.parse_values trusts them too)."""
    import pyarrow as pa

    parts: list[bytes | memoryview] = []
    kept: list[_Batch] = []
    size = 0
    for stored in batches:
        # A batch wholly outside the range (a read runs past a range's end) is neither
        # checked nor decoded; a short one is left to records_data's error.
        if len(stored) >= HEADER_SIZE and (
            base_offset(stored) >= high or next_offset(stored) <= low
        ):
            continue
        header, area, start, end = records_data(stored, 0)
        if not is_data(header, aborted):
            continue
        attributes, base = header.attributes, header.base_offset
        parts.append(memoryview(area)[start:end])
        append_time = header.max_timestamp if attributes & ATTR_LOG_APPEND_TIME else None
        kept.append(
            _Batch(
                header.record_count,
                size,
                size + end - start,
                base,
                header.base_timestamp,
                append_time,
                header.last_offset_delta,
            )
        )
        size += end - start
    joined = b"".join(parts)
    counts = [b.count for b in kept]
    record_starts = _record_starts(joined, sum(counts))
    if record_starts is None:
        return None
    data = np.frombuffer(joined, np.uint8)
    n = len(record_starts)
    try:
        length, starts = _varints(data, record_starts)
        ends = starts + length
        ts_delta, at = _varints(data, starts + 1)  # past the attributes, unused in v2
        delta, at = _varints(data, at)
        key_size, key_starts = _varints(data, at)
        value_size, value_starts = _varints(data, key_starts + np.maximum(key_size, 0))
    except _Unusual:
        return None
    at = value_starts + np.maximum(value_size, 0)
    max_delta = np.repeat(np.array([b.max_delta for b in kept], np.int64), counts)
    header_count = data[np.minimum(at, len(data) - 1)]
    # The records tile each batch's records exactly (the batches lie end to end).
    last = np.cumsum(counts) - 1
    if not (
        (length >= 6).all()  # the smallest record
        and (ends[:-1] == record_starts[1:]).all()
        and (ends[last] == np.array([b.end for b in kept], np.int64)).all()
        # The header count follows the value: 0 is the record's last byte; headers
        # follow any other, to the record's end (read only when wanted).
        and (np.where(header_count == 0, at + 1 == ends, at + 1 < ends)).all()
        and not (include_headers and header_count.any())
        and (delta >= 0).all()
        and (delta <= max_delta).all()
        and (key_size >= -1).all()
        and (value_size >= -1).all()
    ):
        return None  # headers, or a malformed record: parse_record says which
    offsets = np.repeat(np.array([b.base_offset for b in kept], np.int64), counts) + delta
    base_ts = np.repeat(np.array([b.base_timestamp for b in kept], np.int64), counts)
    append = [b.append_time for b in kept]
    kinds = np.repeat(
        np.array([CREATE_TIME if t is None else LOG_APPEND_TIME for t in append], np.int32),
        counts,
    )
    millis = np.where(
        kinds == LOG_APPEND_TIME,
        np.repeat(np.array([t or 0 for t in append], np.int64), counts),
        base_ts + ts_delta,
    )
    buffer = pa.py_buffer(joined)
    rows = Rows(
        binary(buffer, key_starts, key_size.astype(np.int32)),
        binary(buffer, value_starts, value_size.astype(np.int32)),
        offsets,
        millis * 1000,
        None,
        kinds,
        empty_headers(n) if include_headers else None,
    )
    wanted = (offsets >= low) & (offsets < high)
    if not wanted.all():
        rows = take(rows, np.flatnonzero(wanted))
    return rows


def _record_starts(data: bytes, count: int) -> np.ndarray | None:
    """Where each of the ``count`` records from the start of ``data`` begins: the one
    walk over the records in Python, by their lengths (1- and 2-byte varints inline).
    None if a length is negative or runs past the end (the caller checks the rest)."""
    starts: list[int] = []
    add = starts.append
    pos = 0
    try:
        for _ in repeat(None, count):
            add(pos)
            byte = data[pos]
            if byte < 0x80:
                pos += 1 + (byte >> 1)
                continue
            second = data[pos + 1]
            if second < 0x80:
                pos += 2 + (((second << 7) | (byte & 0x7F)) >> 1)
                continue
            length, pos = read_varint(data, pos)
            if length < 0:
                return None
            pos += length
    except (IndexError, InvalidRecord):
        return None
    return np.array(starts, np.int64)


def empty_headers(n: int) -> pa.Array:
    """``n`` empty header lists."""
    import pyarrow as pa

    item = headers_type()
    return pa.ListArray.from_arrays(
        pa.array(np.zeros(n + 1, np.int32)), pa.array([], item.value_type), type=item
    )
