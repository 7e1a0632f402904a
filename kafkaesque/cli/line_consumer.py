"""Read partitions from an offset and write records out: the CLI's consumer."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import BinaryIO, cast

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

FOLLOW_WAKEUP = 1.0  # seconds; a safety net should a notification be missed


def _text(data: bytes | None, name: str, out: dict) -> None:
    """JSON carries text: UTF-8 as a string, anything else base64 under NAME_base64."""
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode()
    except UnicodeDecodeError:
        out[f"{name}_base64"] = base64.b64encode(data).decode()


def format_json(partition: int, batch: bytes, skip_below: int) -> list[bytes]:
    lines = []
    for r in decode_batch(batch):
        if r.offset < skip_below:
            continue
        obj: dict = {"partition": partition, "offset": r.offset, "timestamp": r.timestamp}
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


FORMATS: dict[str, Callable[[int, bytes, int], list[bytes]]] = {
    "value": format_value,
    "offset": format_offset,
    "json": format_json,
}


class Consumer:
    """Reads partitions round-robin from given offsets until their ends (or forever)."""

    def __init__(
        self,
        log: Log,
        topic: str,
        offsets: dict[int, int],
        *,
        fetch_size: int = 1024,
        fmt: str = "value",
        commit: Callable[[dict[int, int], dict[int, int]], Awaitable[None]] | None = None,
        whole_topic: bool = False,
        on_gap: Callable[[int, int, int], None] | None = None,
        epochs: dict[int, int] | None = None,
        on_truncation: Callable[[int, int, int], None] | None = None,
        read_committed: bool = True,
    ) -> None:
        """``commit`` is called with the partitions' next offsets (and their epochs) after
        records were written and flushed (at-least-once: a crash re-reads at most one fetch).
        ``whole_topic``: when following, partitions added meanwhile are read too, from
        their start. ``on_gap(partition, first, last)`` is told of each gap read across:
        offsets retention dropped before archiving.

        ``epochs``: the leader epoch each partition's offset was read (or committed) under;
        missing ones are taken at the first read. When a partition's epoch moves on and
        its new log ends that epoch below our offset (KIP-320's check), the records we
        read there are gone: ``on_truncation(partition, truncated_at, offset)`` is told and
        reading goes on from the truncation point; without it, LogTruncated is raised.

        ``read_committed`` (as librdkafka's default isolation.level): read only up to the
        last stable offset, skipping records of aborted transactions; otherwise every user
        record. Transaction markers are never written out."""
        self.read_committed = read_committed
        self.on_gap = on_gap
        self.epochs = dict(epochs or {})
        self.on_truncation = on_truncation
        self.whole_topic = whole_topic
        self.log = log
        self.partitions = Partitions(log)  # the broker's layer; with a notifier to follow
        self.commit = commit
        self.topic = topic
        self.offsets = dict(offsets)
        self.fetch_size = fetch_size
        self.format = FORMATS[fmt]

    async def _poll(self, partition: int) -> tuple[list[bytes], list[Sequence[int]]]:
        """One fetch from a partition: its formatted lines, and per batch the offsets of its
        lines; the partition's offset advanced. Gaps (offsets retention dropped
        before archiving) are read across and reported to ``on_gap``."""
        offset = self.offsets[partition]
        result = await self.partitions.read(
            self.topic,
            partition,
            offset,
            max_records=self.fetch_size,
            committed=self.read_committed,
        )
        known = self.epochs.setdefault(partition, result.leader_epoch)
        if result.leader_epoch != known:
            truncated_at = await self._diverged(partition, offset, known)
            self.epochs[partition] = result.leader_epoch
            if truncated_at is not None:
                self.offsets[partition] = truncated_at
                return await self._poll(partition)
        if result.below_start or result.past_end:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range for {self.topic}[{partition}] "
                f"(offsets {result.log_start}..{result.log_end})"
            )
        lines: list[bytes] = []
        segments: list[Sequence[int]] = []
        for batch in result.batches:
            base = base_offset(batch)
            offset = self._skip_gap(partition, offset, base)
            if is_control(batch) or (self.read_committed and is_aborted(batch, result.aborted)):
                offset = max(offset, next_offset(batch))  # no user records to write
                continue
            formatted = self.format(partition, batch, offset)
            lines += formatted
            segments.append(_line_offsets(batch, offset, len(formatted)))
            offset = max(offset, next_offset(batch))
        if not result.batches and result.skipped_to is not None:
            offset = self._skip_gap(partition, offset, result.skipped_to)
        self.offsets[partition] = offset
        return lines, segments

    async def _diverged(self, partition: int, offset: int, epoch: int) -> int | None:
        """Where the log was truncated below ``offset`` since ``epoch``, or None if the
        records up to ``offset`` are the ones read (a new epoch, nothing lost)."""
        _, end = await self.log.epoch_end_offset(self.topic, partition, epoch)
        if end < 0 or offset <= end:
            return None
        if self.on_truncation is None:
            raise LogTruncated(
                f"{self.topic}[{partition}] was truncated at offset {end} (Redis lost "
                f"records it had not archived): offsets {end}..{offset - 1}, read before, "
                "now hold other records; --on-truncation rewind reads on from there"
            )
        self.on_truncation(partition, end, offset)
        return end

    def _skip_gap(self, partition: int, offset: int, following: int) -> int:
        """The offset to go on from: ``following`` if offsets from ``offset`` on are
        missing (reported once), else ``offset``."""
        if following <= offset:
            return offset
        if self.on_gap is not None:
            self.on_gap(partition, offset, following - 1)
        return following

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
                got_any = False
                for p in await self._to_poll(following=follow):
                    before = self.offsets[p]
                    lines, segments = await self._poll(p)
                    if not lines:
                        # Markers and aborted records only: read on past them.
                        got_any = got_any or self.offsets[p] != before
                        continue
                    got_any = True
                    if max_records is not None and written + len(lines) >= max_records:
                        lines = lines[: max_records - written]
                        self.offsets[p] = _offset_after(segments, len(lines))  # printed
                        _write(out, lines)
                        await self._commit(out)
                        return written + len(lines)
                    _write(out, lines)
                    written += len(lines)
                if got_any:
                    await self._commit(out)
                    continue
                if not follow:
                    return written
                out.flush()
                await self._long_poll()
                if self.whole_topic:
                    await self._add_new_partitions()
        finally:
            if notifier is not None:
                await notifier.stop()

    async def _long_poll(self) -> None:
        """Wait until a partition has records past our offsets, as a Kafka consumer's
        fetch does: the partition layer's one long poll (``Partitions.fetch``), whose
        answer is dropped (``_poll`` reads by records, and formats). It reads before it
        waits, so an append since our reads is not missed; the timeout is a safety net
        should a notification be missed, and lets new partitions be found."""
        requests = [FetchRequest(self.topic, p, offset, 1) for p, offset in self.offsets.items()]
        await self.partitions.fetch(
            requests, max_bytes=1, max_wait=FOLLOW_WAKEUP, committed=self.read_committed
        )

    async def _to_poll(self, following: bool) -> list[int]:
        """The partitions to read now. Following, only those whose log end moved from
        our offset (one round trip for all), so an idle follow of many partitions costs
        Redis next to nothing; otherwise all (a read also reports what is out of range)."""
        partitions = list(self.offsets)
        if not following:
            return partitions
        if self.read_committed:
            ends = await self.log.last_stable_offsets(self.topic, partitions)
        else:
            ends = await self.log.log_ends(self.topic, partitions)
        return [p for p, end in zip(partitions, ends, strict=True) if end != self.offsets[p]]

    async def _add_new_partitions(self) -> None:
        """Follow partitions added to the topic (`alter`, CreatePartitions) since."""
        partitions = (await self.log.topic(self.topic)).partitions
        for p in range(len(self.offsets), partitions):
            found = await self.partitions.list_offset(self.topic, p, EARLIEST)
            self.offsets[p] = found.offset if found is not None else 0

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


def _write(out: BinaryIO, lines: Sequence[bytes]) -> None:
    out.write(b"\n".join(lines))
    out.write(b"\n")
