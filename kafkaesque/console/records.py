"""Records as the Messages page shows them: read through the partition layer across Redis
and the archive (``Log.read`` goes to the archive below Redis' oldest offset), each
labelled with the tier it came from, and their bytes decoded as JSON, text or hex.

A query starts at the newest records, at an offset or at a time, on one partition or all;
a search reads at most ``scan`` records and keeps those whose key, value or a header
holds the text. Bad input is a ``BadInput`` with a sentence for the page."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkaesque.errors import KafkaesqueError
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.batch import decode_batch, is_control, next_offset

REDIS, ARCHIVE = "redis", "archive"
FORMATS = ("auto", "json", "text", "hex")
DEFAULT_LIMIT, MAX_LIMIT = 50, 500
DEFAULT_SCAN, MAX_SCAN = 10_000, 200_000
EXPORT_CAP = 10_000  # records in one export at most
READ_CHUNK = 500  # records asked of the partition layer per read
SHOWN_BYTES = 4096  # of a value in a list; the message's own page shows it whole


class BadInput(ValueError):
    """A request the console cannot answer as asked: said on the page, as it is."""


@dataclass(frozen=True, slots=True)
class Shown:
    """One record and where it came from."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    tier: str  # REDIS or ARCHIVE


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's offsets: the first readable (the archive's, if any), the first still
    in Redis, and the log end (the next offset)."""

    earliest: int
    hot_start: int
    end: int


@dataclass
class Query:
    partition: int | None = None  # None: every partition
    start: str = "newest"  # newest, offset or time
    before: int | None = None  # newest first: only records below this offset (paging back)
    offset: int | None = None
    time_ms: int | None = None
    limit: int = DEFAULT_LIMIT
    search: str = ""
    scan: int = DEFAULT_SCAN
    format: str = "auto"


@dataclass
class Found:
    records: list[Shown] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scanned: int = 0
    scan_limited: bool = False


def _number(params: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    text = params.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name} must be a whole number, not {text!r}") from None
    if not low <= value <= high:
        raise BadInput(f"{name} must be between {low:,} and {high:,}, not {value:,}")
    return value


def parse_time(text: str) -> int:
    """An ISO 8601 time (no zone: UTC) or ms since the epoch, as ms."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"time must be ISO 8601 (2024-05-01T12:00:00Z) or ms since 1970, not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def parse_query(params: Mapping[str, str], partitions: int, cap: int = MAX_LIMIT) -> Query:
    """The Messages page's query string as a Query; BadInput for what makes no sense."""
    query = Query()
    partition = params.get("partition", "").strip()
    if partition not in ("", "all"):
        query.partition = _number(params, "partition", 0, max(partitions - 1, 0))
    query.start = params.get("start", "newest") or "newest"
    if query.start not in ("newest", "offset", "time"):
        raise BadInput(f"start must be newest, offset or time, not {query.start!r}")
    if query.start == "offset":
        query.offset = _number(params, "offset", 0, 2**63 - 1)
        if query.offset is None:
            raise BadInput("give an offset to start from")
    if query.start == "newest":
        query.before = _number(params, "before", 0, 2**63 - 1)
    if query.start == "time":
        text = params.get("time", "")
        if not text.strip():
            raise BadInput("give a time to start from")
        query.time_ms = parse_time(text)
    query.limit = _number(params, "limit", 1, cap) or DEFAULT_LIMIT
    query.search = params.get("search", "")
    if len(query.search) > 1000:
        raise BadInput("the search text is longer than 1,000 characters")
    query.scan = _number(params, "scan", 1, MAX_SCAN) or DEFAULT_SCAN
    query.format = params.get("format", "auto") or "auto"
    if query.format not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, not {query.format!r}")
    return query


async def bounds(layer: Partitions, topic: str, partition: int) -> Bounds:
    state = await layer.log.state(topic, partition)
    earliest = await layer.log.earliest_offset(topic, partition)
    return Bounds(earliest, state.log_start, state.log_end)


async def read_forward(
    layer: Partitions, topic: str, partition: int, start: int, count: int, where: Bounds
) -> list[Shown]:
    """Up to ``count`` records from ``start`` on, each labelled with its tier (below
    Redis' first offset: the archive). Gaps (dropped before archiving) are stepped over."""
    found: list[Shown] = []
    offset = start
    while len(found) < count and offset < where.end:
        result = await layer.read(topic, partition, offset, min(count - len(found), READ_CHUNK))
        if not result.batches:
            break
        for batch in result.batches:
            following = next_offset(batch)
            if not is_control(batch):
                for r in decode_batch(batch):
                    if r.offset >= offset and len(found) < count:
                        tier = ARCHIVE if r.offset < where.hot_start else REDIS
                        found.append(
                            Shown(partition, r.offset, r.timestamp, r.key, r.value, r.headers, tier)
                        )
            offset = max(offset, following)
    return found


def matches(record: Shown, needle: bytes) -> bool:
    """Whether the key, the value, a header's name or a header's value holds ``needle``
    (ASCII letters in any case)."""
    parts = [record.key, record.value]
    for name, value in record.headers:
        parts += [name.encode(), value]
    return any(part is not None and needle in part.lower() for part in parts)


async def find(layer: Partitions, topic: str, partitions: int, query: Query) -> Found:
    """The records the query asks for: newest first, or from an offset or a time in
    order; with a search, the matching ones among at most ``scan`` records read."""
    found = Found()
    chosen = range(partitions) if query.partition is None else [query.partition]
    needle = query.search.encode().lower()
    window = query.limit if not needle else max(1, query.scan // len(chosen))
    for p in chosen:
        where = await bounds(layer, topic, p)
        if query.before is not None:  # paging back: as if the log ended there
            where = dataclasses.replace(where, end=min(where.end, query.before))
        start = await _start(layer, topic, p, query, where, window, found)
        if start is None:
            continue
        read = await read_forward(layer, topic, p, start, window, where)
        found.scanned += len(read)
        if needle:
            # newest first: older records were left unread; else: newer ones were
            if query.start == "newest":
                found.scan_limited |= start > where.earliest
            else:
                found.scan_limited |= bool(read) and read[-1].offset + 1 < where.end
            read = [r for r in read if matches(r, needle)]
        found.records += read
    if query.start == "newest":
        found.records.sort(key=lambda r: (r.timestamp, r.offset), reverse=True)
    else:
        found.records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
    found.records = found.records[: query.limit]
    return found


async def _start(
    layer: Partitions,
    topic: str,
    partition: int,
    query: Query,
    where: Bounds,
    window: int,
    found: Found,
) -> int | None:
    """Where the partition's read starts; None: it has nothing to show (said in a note,
    or refused with BadInput when only one partition was asked)."""
    if query.start == "newest":
        return max(where.earliest, where.end - window)
    if query.start == "offset":
        assert query.offset is not None
        if query.offset > where.end:
            text = (
                f"offset {query.offset:,} is past the end of partition {partition} "
                f"(its next offset is {where.end:,})"
            )
            if query.partition is not None:
                raise BadInput(text)
            found.notes.append(text)
            return None
        if query.offset < where.earliest:
            found.notes.append(
                f"partition {partition} starts at offset {where.earliest:,}: "
                f"shown from there, not from {query.offset:,}"
            )
            return where.earliest
        return query.offset
    assert query.time_ms is not None
    try:
        hit = await layer.list_offset(topic, partition, query.time_ms)
    except KafkaesqueError as exc:
        found.notes.append(f"partition {partition}: {exc}")
        return None
    if hit is None:
        found.notes.append(f"partition {partition} has no record at or after that time")
        return None
    return hit.offset


def decode(data: bytes | None, wanted: str = "auto", whole: bool = False) -> tuple[str, str]:
    """(the format shown, the text) of a key or value: JSON pretty-printed, UTF-8 text,
    or hex; ``auto`` picks JSON for an object or array, text for printable UTF-8, else
    hex. A format asked for that does not fit falls back to hex. Unless ``whole``, hex
    shows the first SHOWN_BYTES."""
    if data is None:
        return "null", ""
    if wanted != "hex":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None:
            if wanted == "json" or (wanted == "auto" and text.lstrip()[:1] in ("{", "[")):
                try:
                    return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
                except ValueError:
                    pass
            if wanted == "text" or (
                wanted == "auto" and all(c.isprintable() or c in "\n\r\t" for c in text)
            ):
                return "text", text
    return "hex", hex_dump(data if whole else data[:SHOWN_BYTES], len(data))


def hex_dump(data: bytes, total: int) -> str:
    """16 bytes a line with their offset; says how much was left out."""
    lines = [f"{i:06x}  {data[i : i + 16].hex(' ')}" for i in range(0, len(data), 16)]
    if total > len(data):
        lines.append(f"\u2026 first {len(data):,} of {total:,} bytes")
    return "\n".join(lines)
