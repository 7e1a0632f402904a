"""Stored record batches as rows of the ``record`` table, in one pass per batch.

The archiver's Python cost per record is the parse plus asyncpg's encoding, so each record
goes from kafkaesque.records.body's parser straight to its row tuple (no intermediate Record
objects), the timestamp value is cached per timestamp delta, and the columns that are the
same for the whole batch (topic, partition, producer id and epoch) are the same objects in
every row.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from itertools import repeat

from kafkaesque.errors import InvalidRecord
from kafkaesque.records.batch import ATTR_LOG_APPEND_TIME, BatchHeader, records_data
from kafkaesque.records.body import parse_record
from storage_pg.pool import ms_to_pg
from storage_pg.row_runs import MIN_RUN, RETRY_AFTER, layout_at, run_fields, run_length

COLUMNS = (
    "id",
    "topic",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "headers",
    "producer_id",
    "producer_epoch",
    "producer_sequence",
)
Row = tuple[object, ...]
NO_HEADERS = "[]"
_SEQUENCE_MASK = 0x7FFFFFFF  # Kafka's producer sequence wraps to 0 after Int32.MAX


JsonbText = str | dict[str, str]


def jsonb_text(text: str) -> JsonbText:
    """A client's string as a jsonb value that gives it back byte for byte (``text_of``):
    itself, or ``{"base64": its UTF-8}`` when it holds U+0000, which a jsonb string
    cannot (valid in a Kafka string: one such value stopped the archiver for good)."""
    return {"base64": base64.b64encode(text.encode()).decode()} if "\0" in text else text


def text_of(value: JsonbText) -> str:
    """The string ``jsonb_text`` stored."""
    return value if isinstance(value, str) else base64.b64decode(value["base64"]).decode()


def headers_json(headers: list[tuple[str, bytes | None]]) -> str:
    """Decoded headers as ``record.headers`` JSON: ``[key, base64 value or null]`` each,
    keys as ``jsonb_text``."""
    if not headers:
        return NO_HEADERS
    items = [
        [jsonb_text(k), None if v is None else base64.b64encode(v).decode()] for k, v in headers
    ]
    return json.dumps(items, separators=(",", ":"))


def header_key(key: JsonbText) -> str:
    """A ``record.headers`` key as the record had it (see headers_json)."""
    return text_of(key)


def configs_json(configs: Mapping[str, str]) -> str:
    """A topic's configs as ``topic.configs`` JSON, values as ``jsonb_text`` (a client may
    set any text on some configs, the throttled-replica lists, NUL included)."""
    return json.dumps({name: jsonb_text(value) for name, value in configs.items()})


def configs_from_json(text: str) -> dict[str, str]:
    """The configs ``configs_json`` stored."""
    return {name: text_of(value) for name, value in json.loads(text).items()}


def batch_rows(
    batch: bytes,
    first_id: int,
    topic: str,
    partition: int,
    from_offset: int = 0,
    id_step: int = 1,
) -> tuple[BatchHeader, list[Row]]:
    """Check and decode one stored batch (any compression) into rows for its records at
    offsets >= ``from_offset``; record i has id ``first_id`` + its offset delta times
    ``id_step`` (kafkaesque.hot.sequence.Ids: 1 on one Redis). Raises InvalidRecord for a
    batch that cannot be decoded."""
    header, data, pos, end = records_data(batch, 0)
    pid: int | None = header.producer_id if header.producer_id >= 0 else None
    epoch = header.producer_epoch if pid is not None else None
    sbase = header.base_sequence if pid is not None and header.base_sequence >= 0 else None
    fixed_ts = header.max_timestamp if header.attributes & ATTR_LOG_APPEND_TIME else None
    try:
        rows = _parse(
            data, pos, end, header, first_id, topic, partition, pid, epoch, sbase, fixed_ts, id_step
        )
    except (IndexError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"malformed record: {exc}") from exc
    if from_offset > header.base_offset:
        rows = [row for row in rows if row[3] >= from_offset]  # type: ignore[operator]
    return header, rows


def _parse(
    data: bytes,
    pos: int,
    end: int,
    header: BatchHeader,
    first_id: int,
    topic: str,
    partition: int,
    pid: int | None,
    epoch: int | None,
    sbase: int | None,
    fixed_ts: int | None,
    id_step: int,
) -> list[Row]:
    base_offset, base_ts, max_delta = (
        header.base_offset,
        header.base_timestamp,
        header.last_offset_delta,
    )
    parse = parse_record
    times: dict[int, tuple[int] | None] = {}
    rows: list[Row] = []
    append = rows.append

    def timestamp(ts_delta: int) -> tuple[int] | None:
        ts = times.get(ts_delta, times)
        if ts is times:
            ts = times[ts_delta] = ms_to_pg(base_ts + ts_delta if fixed_ts is None else fixed_ts)
        return ts  # type: ignore[return-value]

    count, i, single_until = header.record_count, 0, 0
    while i < count:
        # Runs of one layout by strided slices (storage_pg/row_runs.py); after a run that
        # did not come, a while of records one at a time.
        limit = min(count, max_delta + 1) - i
        if i >= single_until and limit >= MIN_RUN:
            layout = layout_at(data, pos, end, i, max_delta)
            run = run_length(data, pos, end, i, limit, layout) if layout else 0
            if layout is not None and run >= MIN_RUN:
                stamps, keys, values = run_fields(data, pos, run, layout)
                deltas = range(i, i + run)
                # Rows built by zip, in C: the columns that vary, the others repeated.
                rows.extend(
                    zip(
                        range(first_id + i * id_step, first_id + (i + run) * id_step, id_step)
                        if id_step
                        else repeat(first_id, run),
                        repeat(topic, run),
                        repeat(partition, run),
                        range(base_offset + i, base_offset + i + run),
                        map({d: timestamp(d) for d in set(stamps)}.__getitem__, stamps),
                        keys,
                        values,
                        repeat(NO_HEADERS, run),
                        repeat(pid, run),
                        repeat(epoch, run),
                        repeat(None, run)
                        if sbase is None
                        else [(sbase + d) & _SEQUENCE_MASK for d in deltas],
                        strict=True,
                    )
                )
                i += run
                pos += run * layout.size
                continue
            single_until = i + RETRY_AFTER
        pos, delta, ts_delta, key, value, headers = parse(data, pos, end, max_delta)
        append(
            (
                first_id + delta * id_step,
                topic,
                partition,
                base_offset + delta,
                timestamp(ts_delta),
                key,
                value,
                headers_json(headers) if headers else NO_HEADERS,
                pid,
                epoch,
                None if sbase is None else (sbase + delta) & _SEQUENCE_MASK,
            )
        )
        i += 1
    if pos != end:
        raise InvalidRecord(f"batch holds more data than its {header.record_count} records")
    return rows
