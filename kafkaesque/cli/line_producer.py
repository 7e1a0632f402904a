"""Turn lines of input into record batches and append them: the CLI's producer."""

from __future__ import annotations

import base64
import binascii
import json
import os
import random
import select
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.batch import Compression, record_count
from kafkaesque.records.build import build_batch
from kafkaesque.records.partitioner import partition_for_key

READ_CHUNK = 4 << 20  # input bytes split into lines at a time
NO_SIZE_LIMIT = 1 << 62
APPEND_BYTES = 8 << 20  # batch bytes per append script call: bounds how long Redis is busy


@dataclass(slots=True)
class ProduceSummary:
    records: int = 0
    bytes: int = 0  # input bytes consumed, line terminators included
    seconds: float = 0.0


def _would_not_block(stream: BinaryIO) -> Callable[[], bool]:
    """A check that the stream's next read returns at once: always for regular files and
    in-memory streams, else whether the descriptor (pipe, terminal, socket) is readable now."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return lambda: True
    if stat.S_ISREG(mode) or stat.S_ISBLK(mode):
        return lambda: True

    def readable() -> bool:
        try:
            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):  # cannot poll it: send what has been read
            return False

    return readable


def iter_line_chunks(stream: BinaryIO, chunk_size: int = READ_CHUNK):
    """Yield (lines, bytes consumed) per chunk. Only the b"\\n" terminator is removed; a
    last line without one is still a record; nothing is decoded.

    Reads take what is available (read1, else read: a raw stream's read returns what is
    there), so lines trickling in through a pipe or a terminal are yielded as soon as the
    next read would block, a partial last line waiting for its end or EOF. Input that is
    ready (a file, a fast pipe) is gathered into chunks of about chunk_size bytes, each held
    back until the next read has returned data, so a final unterminated line joins its chunk."""
    read = getattr(stream, "read1", None) or stream.read
    ready = _would_not_block(stream)
    leftover = b""
    lines: list[bytes] = []
    consumed = 0
    while True:
        data = read(chunk_size)
        if not data:
            break
        if consumed >= chunk_size:
            yield lines, consumed
            lines, consumed = [], 0
        chunk = (leftover + data).split(b"\n")
        leftover = chunk.pop()
        if lines:
            lines.extend(chunk)
        else:
            lines = chunk
        consumed += len(data)
        if not ready():
            # Nothing more yet: send what has arrived rather than wait for more.
            yield lines, consumed
            lines, consumed = [], 0
    if leftover:
        lines.append(leftover)
    if lines or consumed:
        yield lines, consumed


class BadLine(ValueError):
    """A line of input that is no record (bad JSON, no headers delimiter): the lines
    before it were produced, it and those after were not."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.records: list[LineRecord] = []  # the good records of its chunk before it
        self.sent = 0  # records of its chunk appended before it
        self.summary: ProduceSummary | None = None  # of the whole input, when produce raised


@dataclass(slots=True)
class LineRecord:
    """A record parsed from a line (the general path: keys, headers, nulls, JSON)."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None = None
    timestamp: int | None = None


def _json_bytes(obj: dict, name: str, line: int) -> bytes | None:
    """A JSON object's NAME (text, or null) or NAME_base64 (bytes) as bytes."""
    if f"{name}_base64" in obj:
        encoded = obj[f"{name}_base64"]
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BadLine(line, f"{name}_base64 is not base64") from None
    text = obj.get(name)
    if text is None:
        return None
    if not isinstance(text, str):
        raise BadLine(line, f"{name} must be a string or null, not {type(text).__name__}")
    return text.encode()


def _json_headers(headers: object, line: int) -> list[tuple[str, bytes | None]]:
    """headers as {"k": "v", ...} or [{"key": "k", "value": "v"}, ...] (consume's)."""
    if headers is None:
        return []
    if isinstance(headers, dict):
        items = [{"key": k, "value": v} for k, v in headers.items()]
    elif isinstance(headers, list) and all(isinstance(h, dict) for h in headers):
        items = headers
    else:
        raise BadLine(line, "headers must be an object or a list of {key, value}")
    out = []
    for h in items:
        if not isinstance(h.get("key"), str):
            raise BadLine(line, "a header key must be a string")
        out.append((h["key"], _json_bytes(h, "value", line)))
    return out


JSON_FIELDS = {"key", "key_base64", "value", "value_base64", "headers", "partition"}
JSON_FIELDS |= {"timestamp", "topic", "offset"}  # consume --format json's, so it reads back


def parse_json_line(text: bytes, line: int, partitions: int) -> LineRecord:
    """One JSON object: key, value (null: a tombstone), headers, partition, timestamp; the
    names of consume --format json (topic and offset are ignored)."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadLine(line, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadLine(line, "expected a JSON object")
    unknown = sorted(set(obj) - JSON_FIELDS)
    if unknown:
        raise BadLine(
            line, f"unknown field {unknown[0]!r} (known: {', '.join(sorted(JSON_FIELDS))})"
        )
    partition = obj.get("partition")
    if partition is not None and (
        not isinstance(partition, int)
        or isinstance(partition, bool)
        or not 0 <= partition < partitions
    ):
        raise BadLine(line, f"partition must be 0..{partitions - 1}, not {partition!r}")
    timestamp = obj.get("timestamp")
    if timestamp is not None and (
        not isinstance(timestamp, int) or isinstance(timestamp, bool) or timestamp < 0
    ):
        raise BadLine(line, f"timestamp must be milliseconds since the epoch, not {timestamp!r}")
    return LineRecord(
        _json_bytes(obj, "key", line),
        _json_bytes(obj, "value", line),
        _json_headers(obj.get("headers"), line),
        partition,
        timestamp,
    )


class LineProducer:
    """Batches lines per partition and appends them: keyed records by murmur2 of the key,
    keyless ones round-robin per batch, or all to one fixed partition.

    The round-robin starts at a random partition (from rng, default the random module), as
    the sticky partitioner of Kafka's producers does, so short runs spread over the
    partitions. With a key separator, each batch_size keyless records of a chunk go to one
    partition, the next ones to the next partition.

    Lines are plain values (the fast path), unless: ``key_separator`` splits each into key
    and value; ``headers_delimiter`` ends the headers each line starts with
    (``k1:v1,k2:v2``, as kafka-console-producer's parse.headers); ``null_marker`` is a
    key, value or header value sent as null (a value: a tombstone); ``headers`` are added
    to every record; ``json_lines``: each line is a JSON object (``parse_json_line``), blank
    lines skipped. A line that is no record raises BadLine once the lines before it were
    appended."""

    def __init__(
        self,
        log: Log,
        config: TopicConfig,
        *,
        batch_size: int = 1024,
        partition: int | None = None,
        key_separator: bytes | None = None,
        compression: Compression = Compression.NONE,
        rng: random.Random | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        headers_delimiter: bytes | None = None,
        null_marker: bytes | None = None,
        json_lines: bool = False,
    ) -> None:
        # The partition layer, as the broker's: the CLI's own batches need no size limit
        # beyond Redis' (a line is one record, however long).
        self.partitions = Partitions(log, max_message_bytes=NO_SIZE_LIMIT)
        self.config = config
        self.batch_size = batch_size
        self.partition = partition
        self.key_separator = key_separator
        self.compression = compression
        self.headers = list(headers)
        self.headers_delimiter = headers_delimiter
        self.null_marker = null_marker
        self.json_lines = json_lines
        self._next_partition = (rng or random).randrange(config.partitions)
        self._lines = 0  # lines read before this chunk

    @property
    def plain(self) -> bool:
        """Lines are values only: the fast path."""
        return (
            self.key_separator is None
            and not self.headers
            and self.headers_delimiter is None
            and self.null_marker is None
            and not self.json_lines
        )

    def _round_robin(self) -> int:
        p = self._next_partition
        self._next_partition = (p + 1) % self.config.partitions
        return p

    def _parse(self, line: bytes, number: int) -> LineRecord | None:
        """A line's record (None: a blank line of JSON input)."""
        if self.json_lines:
            if not line.strip():
                return None
            record = parse_json_line(line, number, self.config.partitions)
            record.headers += self.headers
            return record
        headers: list[tuple[str, bytes | None]] = []
        if self.headers_delimiter is not None:
            part, found, line = line.partition(self.headers_delimiter)
            if not found:
                raise BadLine(number, "no headers delimiter (--headers-delimiter)")
            for item in part.split(b",") if part else []:
                name, _, text = item.partition(b":")
                try:
                    headers.append((name.decode(), self._nullable(text)))
                except UnicodeDecodeError:
                    raise BadLine(number, "a header key must be UTF-8") from None
        key: bytes | None = None
        value: bytes | None = line
        if self.key_separator is not None:
            k, found, v = line.partition(self.key_separator)
            if found:
                key, value = self._nullable(k), v
        return LineRecord(key, self._nullable(value), headers + self.headers)

    def _nullable(self, data: bytes | None) -> bytes | None:
        return None if data is not None and data == self.null_marker else data

    def _batches(self, lines: list[bytes]) -> dict[int, list[bytes]]:
        """Build this chunk's batches, grouped by partition."""
        size, now = self.batch_size, int(time.time() * 1000)
        out: dict[int, list[bytes]] = {}
        if self.plain:
            for i in range(0, len(lines), size):
                p = self.partition if self.partition is not None else self._round_robin()
                batch = build_batch(
                    lines[i : i + size], timestamp=now, compression=self.compression
                )
                out.setdefault(p, []).append(batch)
            return out
        return self._record_batches(self._records(lines))

    def _records(self, lines: list[bytes]) -> list[LineRecord]:
        """The chunk's records; BadLine (with the good ones before it) at a bad line."""
        records: list[LineRecord] = []
        for i, line in enumerate(lines):
            try:
                record = self._parse(line, self._lines + i + 1)
            except BadLine as exc:
                exc.records = records
                raise
            if record is not None:
                records.append(record)
        return records

    def _record_batches(self, records: list[LineRecord]) -> dict[int, list[bytes]]:
        # A record without a key: a batch of them to one partition, the next to the next.
        size, now = self.batch_size, int(time.time() * 1000)
        per_partition: dict[int, list[LineRecord]] = {}
        n = self.config.partitions
        keyless, keyless_partition = 0, 0
        for r in records:
            if r.partition is not None:
                p = r.partition
            elif self.partition is not None:
                p = self.partition
            elif r.key is None:
                if keyless % size == 0:
                    keyless_partition = self._round_robin()
                keyless += 1
                p = keyless_partition
            else:
                p = partition_for_key(r.key, n)
            per_partition.setdefault(p, []).append(r)
        out: dict[int, list[bytes]] = {}
        for p, rs in per_partition.items():
            out[p] = []
            for i in range(0, len(rs), size):
                part = rs[i : i + size]
                stamped = any(r.timestamp is not None for r in part)
                out[p].append(
                    build_batch(
                        [r.value for r in part],
                        [r.key for r in part],
                        timestamp=None if stamped else now,
                        timestamps=[now if r.timestamp is None else r.timestamp for r in part]
                        if stamped
                        else None,
                        headers=[r.headers for r in part] if any(r.headers for r in part) else None,
                        compression=self.compression,
                    )
                )
        return out

    async def _append(self, batches: dict[int, list[bytes]]) -> None:
        """Append batches; batches of one partition keep their order."""
        for p, partition_batches in batches.items():
            group: list[bytes] = []
            group_bytes = 0
            for batch in partition_batches:
                group.append(batch)
                group_bytes += len(batch)
                if group_bytes >= APPEND_BYTES:
                    await self.partitions.append(self.config.name, p, group)
                    group, group_bytes = [], 0
            if group:
                await self.partitions.append(self.config.name, p, group)

    async def send(self, lines: list[bytes]) -> int:
        """Append the lines as records; returns how many records (blank JSON lines are
        none). At a bad line, the records before it are appended, then BadLine raised."""
        try:
            batches = self._batches(lines)
        except BadLine as exc:
            if exc.records:
                await self._append(self._record_batches(exc.records))
            exc.sent = len(exc.records)
            raise
        finally:
            self._lines += len(lines)
        await self._append(batches)
        if self.json_lines:
            return sum(record_count(b) for bs in batches.values() for b in bs)
        return len(lines)

    async def produce(
        self, stream: BinaryIO, progress: Callable[[int], None] | None = None
    ) -> ProduceSummary:
        """Append every line of the stream. At a bad line, BadLine (with ``summary``,
        the records appended before it)."""
        summary = ProduceSummary()
        started = time.perf_counter()
        for lines, consumed in iter_line_chunks(stream):
            if lines:
                try:
                    summary.records += await self.send(lines)
                except BadLine as exc:
                    summary.records += exc.sent
                    summary.seconds = time.perf_counter() - started
                    exc.summary = summary
                    raise
            summary.bytes += consumed
            if progress is not None:
                progress(consumed)
        summary.seconds = time.perf_counter() - started
        return summary
