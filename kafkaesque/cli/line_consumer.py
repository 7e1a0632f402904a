"""Read partitions from an offset and write records out: the CLI's consumer, alone or as
a member of a consumer group (kafkaesque/cli/group_member.py ``GroupMember``)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, BinaryIO, cast

from kafkaesque.cli.group_member import GroupMember
from kafkaesque.errors import LogTruncated, OffsetOutOfRange
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import EARLIEST, Partitions
from kafkaesque.partition.read_types import FetchRequest
from kafkaesque.records.batch import (
    base_offset,
    decode_batch,
    decode_values,
    is_aborted,
    is_control,
    next_offset,
    offset_count,
    record_count,
)
from kafkaesque.records.body import Record
from kafkaesque.types import TopicPartition as TP

FOLLOW_WAKEUP = 1.0  # seconds; a safety net should a notification be missed

# A formatter: (topic, partition, batch, skip records below this offset) -> output lines.
Formatter = Callable[[str, int, bytes, int], list[bytes]]


def _text(data: bytes | None, name: str, out: dict) -> None:
    """JSON carries text: UTF-8 as a string, anything else base64 under NAME_base64."""
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode()
    except UnicodeDecodeError:
        out[f"{name}_base64"] = base64.b64encode(data).decode()


def format_json(
    partition: int, batch: bytes, skip_below: int, topic: str | None = None
) -> list[bytes]:
    """One JSON object per record: topic (when given), partition, offset, timestamp, key,
    value (null for a tombstone) and headers (a list of {key, value}, when there are any)."""
    lines = []
    for r in decode_batch(batch):
        if r.offset < skip_below:
            continue
        obj: dict = {} if topic is None else {"topic": topic}
        obj.update(partition=partition, offset=r.offset, timestamp=r.timestamp)
        _text(r.key, "key", obj)
        _text(r.value, "value", obj)
        if r.headers:
            obj["headers"] = []
            for k, v in r.headers:
                header: dict = {"key": k}
                _text(v, "value", header)
                obj["headers"].append(header)
        lines.append(json.dumps(obj, ensure_ascii=False).encode())
    return lines


def format_offset(partition: int, batch: bytes, skip_below: int) -> list[bytes]:
    return [
        b"%d\t%d\t%s" % (partition, r.offset, r.value or b"")
        for r in decode_batch(batch)
        if r.offset >= skip_below
    ]


def format_value(partition: int, batch: bytes, skip_below: int) -> list[bytes]:
    base = base_offset(batch)
    if skip_below > base and record_count(batch) < offset_count(batch):
        # Compacted: the records' offsets have gaps, so only decoding finds them.
        values = [r.value for r in decode_batch(batch) if r.offset >= skip_below]
    else:
        values = decode_values(batch)
        if skip_below > base:
            values = values[skip_below - base :]
    if None in values:
        return [b"" if v is None else v for v in values]
    return cast(list[bytes], values)  # no None among them (above)


FORMATS: dict[str, Formatter] = {
    "value": lambda t, p, b, s: format_value(p, b, s),
    "offset": lambda t, p, b, s: format_offset(p, b, s),
    "json": lambda t, p, b, s: format_json(p, b, s, t),
}

# kcat's -f tokens: what each prints of a record.
_FIELDS: dict[str, Callable[[str, int, Record], bytes]] = {
    "t": lambda t, p, r: t.encode(),
    "p": lambda t, p, r: b"%d" % p,
    "o": lambda t, p, r: b"%d" % r.offset,
    "k": lambda t, p, r: r.key or b"",
    "s": lambda t, p, r: r.value or b"",
    "K": lambda t, p, r: b"%d" % (-1 if r.key is None else len(r.key)),
    "S": lambda t, p, r: b"%d" % (-1 if r.value is None else len(r.value)),
    "T": lambda t, p, r: b"%d" % r.timestamp,
    "h": lambda t, p, r: b",".join(
        k.encode() + (b"" if v is None else b"=" + v) for k, v in r.headers
    ),
}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}
FORMAT_TOKENS = (
    "%t topic, %p partition, %o offset, %k key, %s value, %h headers (k=v,...), "
    "%T timestamp (ms), %K / %S key / value size (-1: null), %% a %; \\n \\t \\r \\\\"
)


def compile_format(spec: str) -> Formatter:
    """A formatter for a kcat-style format string (``FORMAT_TOKENS``); each record's output
    is exactly what the string says (end it with \\n for lines). ValueError names a bad
    token."""
    parts: list[bytes | Callable[[str, int, Record], bytes]] = []
    literal: list[str] = []
    i = 0
    while i < len(spec):
        c = spec[i]
        if c in "%\\" and i + 1 < len(spec):
            n = spec[i + 1]
            if c == "%" and n == "%":
                literal.append("%")
            elif c == "%" and n in _FIELDS:
                if literal:
                    parts.append("".join(literal).encode())
                    literal = []
                parts.append(_FIELDS[n])
            elif c == "\\" and n in _ESCAPES:
                literal.append(_ESCAPES[n])
            else:
                raise ValueError(f"unknown token {c}{n} (known: {FORMAT_TOKENS})")
            i += 2
            continue
        if c == "%":
            raise ValueError(f"a lone % at the end (known: {FORMAT_TOKENS})")
        literal.append(c)
        i += 1
    if literal:
        parts.append("".join(literal).encode())

    def formatter(topic: str, partition: int, batch: bytes, skip_below: int) -> list[bytes]:
        return [
            b"".join(
                part if isinstance(part, bytes) else part(topic, partition, r) for part in parts
            )
            for r in decode_batch(batch)
            if r.offset >= skip_below
        ]

    return formatter


# -- the "consumer" protocol's member metadata and assignments (version 0) ---------------


class Consumer:
    """Reads partitions round-robin from given offsets until their ends (or forever)."""

    def __init__(
        self,
        log: Log,
        topic: str | None,
        offsets: Mapping[int, int] | Mapping[TP, int],
        *,
        fetch_size: int = 1024,
        fmt: str = "value",
        formatter: Formatter | None = None,
        commit: Callable[[dict[TP, int], dict[TP, int]], Awaitable[None]] | None = None,
        whole_topic: bool = False,
        discover: Callable[[set[TP]], Awaitable[dict[TP, int]]] | None = None,
        on_gap: Callable[[str, int, int, int], None] | None = None,
        epochs: Mapping[TP, int] | None = None,
        on_truncation: Callable[[str, int, int, int], None] | None = None,
        read_committed: bool = True,
        member: GroupMember | None = None,
    ) -> None:
        """``offsets``: partition -> offset of ``topic``, or (topic, partition) -> offset.

        ``commit`` is called with the partitions' next offsets (and their epochs) after
        records were written and flushed (at-least-once: a crash re-reads at most one fetch).
        ``whole_topic``: when following, partitions added meanwhile are read too, from
        their start; ``discover(known)`` instead gives any more partitions to read (and
        their offsets). ``on_gap(topic, partition, first, last)`` is told of each gap read
        across: offsets retention dropped before archiving.

        ``epochs``: the leader epoch each partition's offset was read (or committed) under;
        missing ones are taken at the first read. When a partition's epoch moves on and
        its new log ends that epoch below our offset (KIP-320's check), the records we
        read there are gone: ``on_truncation(topic, partition, truncated_at, offset)`` is
        told and reading goes on from the truncation point; without it, LogTruncated is
        raised.

        ``read_committed`` (as librdkafka's default isolation.level): read only up to the
        last stable offset, skipping records of aborted transactions; otherwise every user
        record. Transaction markers are never written out.

        ``formatter`` (else the ``fmt`` named in FORMATS) makes each record's output;
        FORMATS' are lines (a newline is added), a formatter passed in makes the whole of
        each record's output. ``member``: read the partitions a consumer group assigns
        (``offsets`` is then ignored), committing through it; it rejoins when the group
        rebalances."""
        self.read_committed = read_committed
        self.on_gap = on_gap
        self.epochs: dict[TP, int] = dict(epochs or {})
        self.on_truncation = on_truncation
        self.log = log
        self.partitions = Partitions(log)  # the broker's layer; with a notifier to follow
        self.commit = commit
        self.offsets: dict[TP, int] = {
            cast(TP, k) if isinstance(k, tuple) else (cast(str, topic), k): v
            for k, v in offsets.items()
        }
        if discover is None and whole_topic:
            discover = self._new_partitions
        self.discover = discover
        self.fetch_size = fetch_size
        self.format = formatter or FORMATS[fmt]
        self.line_end = b"" if formatter is not None else b"\n"
        self.member = member
        if member is not None:
            self.offsets = {}
            self.commit = member.commit

    async def _poll(self, tp: TP) -> tuple[list[bytes], list[Sequence[int]]]:
        """One fetch from a partition: its formatted lines, and per batch the offsets of its
        lines; the partition's offset advanced. Gaps (offsets retention dropped
        before archiving) are read across and reported to ``on_gap``."""
        topic, partition = tp
        offset = self.offsets[tp]
        result = await self.partitions.read(
            topic,
            partition,
            offset,
            max_records=self.fetch_size,
            committed=self.read_committed,
        )
        known = self.epochs.setdefault(tp, result.leader_epoch)
        if result.leader_epoch != known:
            truncated_at = await self._diverged(tp, offset, known)
            self.epochs[tp] = result.leader_epoch
            if truncated_at is not None:
                self.offsets[tp] = truncated_at
                return await self._poll(tp)
        if result.below_start or result.past_end:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range for {topic}[{partition}] "
                f"(offsets {result.log_start}..{result.log_end})"
            )
        lines: list[bytes] = []
        segments: list[Sequence[int]] = []
        for batch in result.batches:
            base = base_offset(batch)
            offset = self._skip_gap(tp, offset, base)
            if is_control(batch) or (self.read_committed and is_aborted(batch, result.aborted)):
                offset = max(offset, next_offset(batch))  # no user records to write
                continue
            formatted = self.format(topic, partition, batch, offset)
            lines += formatted
            segments.append(_line_offsets(batch, offset, len(formatted)))
            offset = max(offset, next_offset(batch))
        if not result.batches and result.skipped_to is not None:
            offset = self._skip_gap(tp, offset, result.skipped_to)
        self.offsets[tp] = offset
        return lines, segments

    async def _diverged(self, tp: TP, offset: int, epoch: int) -> int | None:
        """Where the log was truncated below ``offset`` since ``epoch``, or None if the
        records up to ``offset`` are the ones read (a new epoch, nothing lost)."""
        topic, partition = tp
        _, end = await self.log.epoch_end_offset(topic, partition, epoch)
        if end < 0 or offset <= end:
            return None
        if self.on_truncation is None:
            raise LogTruncated(
                f"{topic}[{partition}] was truncated at offset {end} (Redis lost "
                f"records it had not archived): offsets {end}..{offset - 1}, read before, "
                "now hold other records; --on-truncation rewind reads on from there"
            )
        self.on_truncation(topic, partition, end, offset)
        return end

    def _skip_gap(self, tp: TP, offset: int, following: int) -> int:
        """The offset to go on from: ``following`` if offsets from ``offset`` on are
        missing (reported once), else ``offset``."""
        if following <= offset:
            return offset
        if self.on_gap is not None:
            self.on_gap(tp[0], tp[1], offset, following - 1)
        return following

    async def _assignment(self, out: BinaryIO) -> None:
        """A group member: commit what was printed and join again when the group
        rebalances (or first), reading the partitions it assigns from their committed
        offsets."""
        member = self.member
        if member is None:
            return
        if member.failure is not None:
            raise member.failure
        if not member.needs_join.is_set():
            return
        await self._commit(out)
        self.offsets, epochs = await member.rejoin()
        self.epochs = {tp: e for tp, e in {**self.epochs, **epochs}.items() if tp in self.offsets}

    async def run(
        self, out: BinaryIO, *, follow: bool = False, max_records: int | None = None
    ) -> int:
        """Write records to ``out``, a line each; returns how many were written."""
        written = 0
        notifier = None
        if follow:
            notifier = self.log.stores.notifier(self.log.channel(""))
            notifier.start()
            self.partitions = Partitions(self.log, notifier)
        try:
            while True:
                await self._assignment(out)
                got_any = False
                for tp in await self._to_poll(following=follow):
                    before = self.offsets[tp]
                    lines, segments = await self._poll(tp)
                    if not lines:
                        # Markers and aborted records only: read on past them.
                        got_any = got_any or self.offsets[tp] != before
                        continue
                    got_any = True
                    if max_records is not None and written + len(lines) >= max_records:
                        lines = lines[: max_records - written]
                        self.offsets[tp] = _offset_after(segments, len(lines))  # printed
                        _write(out, lines, self.line_end)
                        await self._commit(out)
                        return written + len(lines)
                    _write(out, lines, self.line_end)
                    written += len(lines)
                if got_any:
                    await self._commit(out)
                    continue
                if not follow:
                    return written
                out.flush()
                await self._long_poll()
                if self.member is not None:
                    await self.member.check_subscription()
                elif self.discover is not None:
                    for tp, offset in (await self.discover(set(self.offsets))).items():
                        self.offsets.setdefault(tp, offset)
        finally:
            if notifier is not None:
                await notifier.stop()

    async def _long_poll(self) -> None:
        """Wait until a partition has records past our offsets, as a Kafka consumer's
        fetch does: the partition layer's one long poll (``Partitions.fetch``), whose
        answer is dropped (``_poll`` reads by records, and formats). It reads before it
        waits, so an append since our reads is not missed; the timeout is a safety net
        should a notification be missed, and lets new partitions be found. A group
        member stops waiting when its group rebalances."""
        requests = [FetchRequest(t, p, offset, 1) for (t, p), offset in self.offsets.items()]
        fetch = self.partitions.fetch(
            requests, max_bytes=1, max_wait=FOLLOW_WAKEUP, committed=self.read_committed
        )
        if self.member is None:
            await fetch
            return
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.member.needs_join.wait())]
        if requests:
            waits.append(asyncio.ensure_future(fetch))
        else:
            fetch.close()
        _, pending = await asyncio.wait(waits, timeout=FOLLOW_WAKEUP, return_when="FIRST_COMPLETED")
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def _to_poll(self, following: bool) -> list[TP]:
        """The partitions to read now. Following, only those whose log end moved from
        our offset (one round trip per topic), so an idle follow of many partitions costs
        Redis next to nothing; otherwise all (a read also reports what is out of range)."""
        if not following:
            return list(self.offsets)
        by_topic: dict[str, list[int]] = {}
        for t, p in self.offsets:
            by_topic.setdefault(t, []).append(p)
        moved = []
        for topic, partitions in by_topic.items():
            if self.read_committed:
                ends = await self.log.last_stable_offsets(topic, partitions)
            else:
                ends = await self.log.log_ends(topic, partitions)
            moved += [
                (topic, p)
                for p, end in zip(partitions, ends, strict=True)
                if end != self.offsets[topic, p]
            ]
        return moved

    async def _new_partitions(self, known: set[TP]) -> dict[TP, int]:
        """Partitions added to our topics (`alter`, CreatePartitions) since, from their
        start."""
        out = {}
        for topic in sorted({t for t, _ in known}):
            partitions = (await self.log.topic(topic)).partitions
            for p in range(partitions):
                if (topic, p) not in known:
                    found = await self.partitions.list_offset(topic, p, EARLIEST)
                    out[topic, p] = found.offset if found is not None else 0
        return out

    async def _commit(self, out: BinaryIO) -> None:
        if self.commit is not None:
            out.flush()
            await self.commit(dict(self.offsets), dict(self.epochs))


def _line_offsets(batch: bytes, skip_below: int, lines: int) -> Sequence[int]:
    """The offsets of a batch's ``lines`` formatted records (those from ``skip_below``)."""
    if record_count(batch) < offset_count(batch):  # compacted: offsets with gaps
        return [r.offset for r in decode_batch(batch) if r.offset >= skip_below]
    first = max(skip_below, base_offset(batch))
    return range(first, first + lines)


def _offset_after(segments: list[Sequence[int]], printed: int) -> int:
    """The offset after the first ``printed`` lines of a poll, given the offsets of each
    batch's lines."""
    for offsets in segments:
        if printed <= len(offsets):
            return offsets[printed - 1] + 1 if printed else offsets[0]
        printed -= len(offsets)
    raise AssertionError("more lines printed than polled")


def _write(out: BinaryIO, lines: Sequence[bytes], line_end: bytes = b"\n") -> None:
    out.write(line_end.join(lines))
    out.write(line_end)
