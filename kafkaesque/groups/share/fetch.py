"""Share fetches: records acquired from the log for a member, and acknowledgements.

A fetch asks each share-partition where to read (share_prepare.lua: locks that expired
are released first), reads the log there through the partition layer (one round trip for
every partition, read_committed stopping at the last stable offset), and acquires what it
read (share_acquire.lua): AVAILABLE records again, new records past the end, never a
transaction marker or, under read_committed, an aborted transaction's record. With
nothing acquired it waits, up to the request's max wait, for an append, for records
released here, or for the earliest acquisition lock to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.errors import KafkaesqueError, OffsetOutOfRange
from kafkaesque.groups.share.config import ShareGroupConfig
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.sessions import ShareSession, ShareSessions
from kafkaesque.partition.layer import Partitions
from kafkaesque.partition.read_types import FetchRequest
from kafkaesque.records import batch as record_batch
from kafkaesque.types import TopicPartition

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps
NO_END = 2**62  # a log end not yet known


@dataclass(slots=True)
class Acquired:
    """One share-partition's part of a ShareFetch answer."""

    error: KafkaesqueError | None = None
    batches: list[bytes] = field(default_factory=list)
    runs: list[tuple[int, int, int]] = field(default_factory=list)  # first, last, deliveries
    leader_epoch: int = -1


def _ranges(
    batches: Sequence[bytes], committed: bool, aborted: list
) -> list[tuple[int, int, bool]]:
    """(first, last, acquirable) per batch read: markers and, under read_committed,
    aborted transactions' batches are not acquirable."""
    out = []
    for b in batches:
        first = record_batch.base_offset(b)
        last = first + record_batch.offset_count(b) - 1
        skip = record_batch.is_control(b) or (committed and record_batch.is_aborted(b, aborted))
        out.append((first, last, not skip))
    return out


def _overlaps(first: int, last: int, runs: Iterable[tuple[int, int, int]]) -> bool:
    return any(lo <= last and first <= hi for lo, hi, _ in runs)


# What the broker counts of its share groups' records (kafkaesque_share_records_total).
ACK_KINDS = {0: "gap", 1: "accepted", 2: "released", 3: "rejected", 4: "renewed"}


class ShareFetcher:
    """Acquisition and acknowledgement for the share groups of one broker; holds its
    share sessions."""

    def __init__(
        self, coordinator: ShareGroupCoordinator, partitions: Partitions, clock: Clock = SYSTEM
    ) -> None:
        self.coordinator = coordinator
        self.store = coordinator.store
        self.partitions = partitions
        self.clock = clock
        self.sessions = ShareSessions(self._session_ended)
        coordinator.on_departure = self.sessions.drop
        self._released = asyncio.Event()  # records went back to a group here
        self._seen: dict[tuple[str, TopicPartition], tuple[int, int]] = {}  # log start, end
        self._tasks: set[asyncio.Task[None]] = set()
        # Records acquired, redelivered (acquired again) and acknowledged, by kind.
        self.counts: dict[str, int] = dict.fromkeys(("acquired", "redelivered"), 0)
        self.counts |= dict.fromkeys(ACK_KINDS.values(), 0)
        # (group, topic, partition) -> (records in flight, archived so far), as the last
        # fetch here saw them (the metrics' gauges).
        self.in_flight: dict[tuple[str, str, int], tuple[int, int]] = {}

    # -- sessions ---------------------------------------------------------------------------
    def _session_ended(self, session: ShareSession) -> None:
        """A replaced or evicted session: its member's records go back (in the background)."""
        task = asyncio.get_running_loop().create_task(self.release(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def release(self, session: ShareSession) -> None:
        """The member's acquired records on the session's share-partitions go back."""
        config = await self.coordinator.group_config(session.group_id)
        released = await self.store.release(
            session.group_id, session.partitions, session.member_id, config
        )
        if released:
            self._wake()

    def _wake(self) -> None:
        self._released.set()
        self._released = asyncio.Event()

    # -- acknowledgements -------------------------------------------------------------------
    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        acks: dict[TopicPartition, list[tuple[int, int, Sequence[int]]]],
        config: ShareGroupConfig | None = None,
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Each share-partition's acknowledgements, all or nothing per partition:
        (error code, message) each."""
        config = config or await self.coordinator.group_config(group_id)
        out = {}
        now = self.clock.now_ms()
        for tp, batches in acks.items():
            code, message, _ = await self.store.acknowledge(
                group_id, tp, member_id, now, config, batches
            )
            if code == 0:
                # Released records, or room in the in-flight window: fetches waiting here
                # may acquire now.
                self._wake()
                self._count_acks(batches)
            out[tp] = (code, message)
        return out

    def _count_acks(self, batches: Sequence[tuple[int, int, Sequence[int]]]) -> None:
        for first, last, types in batches:
            if len(types) == 1:
                self.counts[ACK_KINDS[types[0]]] += last - first + 1
            else:
                for t in types:
                    self.counts[ACK_KINDS[t]] += 1

    # -- fetches ----------------------------------------------------------------------------
    async def fetch(
        self,
        group_id: str,
        member_id: str,
        tps: Sequence[TopicPartition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        max_records: int,
        config: ShareGroupConfig | None = None,
        strict: bool = False,
    ) -> dict[TopicPartition, Acquired]:
        """Acquire records of ``tps`` for the member, waiting up to ``max_wait_ms`` while
        none can be; whole batches up to ``max_records``, or with ``strict`` (ShareFetch
        v2's record_limit mode) no more than that."""
        config = config or await self.coordinator.group_config(group_id)
        deadline = self.clock.monotonic() + max_wait_ms / 1000
        topics = {t for t, _ in tps}
        async with self.partitions.appends(topics) as appended:
            while True:
                released = self._released
                results, lock_deadline = await self._attempt(
                    group_id, member_id, tps, max_bytes, max_records, config, strict
                )
                got = any(a.runs or a.error for a in results.values())
                wait = deadline - self.clock.monotonic()
                if got or wait <= 0 or not tps or self.partitions.closed:
                    return results
                if lock_deadline >= 0:
                    wait = min(wait, max(0.001, (lock_deadline - self.clock.now_ms()) / 1000))
                await self._wait(appended, released, wait)
                appended.take()

    async def _wait(self, appended: object, released: asyncio.Event, timeout: float) -> None:
        """Until an append, a release here, or ``timeout`` seconds."""
        waits = [
            asyncio.ensure_future(appended.wait(timeout)),  # type: ignore[attr-defined]
            asyncio.ensure_future(released.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            for w in waits:
                with contextlib.suppress(asyncio.CancelledError):
                    await w

    async def _init_offset(self, tp: TopicPartition, config: ShareGroupConfig) -> int:
        """Where a share-partition without state starts (share.auto.offset.reset)."""
        reset = config.auto_offset_reset.lower()
        if reset == "earliest":
            return await self.partitions.log.earliest_offset(*tp)
        if reset.startswith("by_duration:"):
            ms = _duration_ms(reset.removeprefix("by_duration:"))
            found = await self.partitions.log.offset_for_timestamp(*tp, self.clock.now_ms() - ms)
            if found is not None:
                return found[0]
        return (await self.partitions.log.state(*tp)).log_end

    async def _attempt(
        self,
        group_id: str,
        member_id: str,
        tps: Sequence[TopicPartition],
        max_bytes: int,
        max_records: int,
        config: ShareGroupConfig,
        strict: bool,
    ) -> tuple[dict[TopicPartition, Acquired], int]:
        """One pass: prepare, read, acquire; and the earliest lock deadline seen (-1)."""
        now = self.clock.now_ms()
        results: dict[TopicPartition, Acquired] = {}
        requests = []
        lock_deadline = -1
        for tp in tps:
            try:
                self.partitions.check_leader(*tp)
                start, end = self._seen.get((group_id, tp), (0, NO_END))
                prepared = await self.store.prepare(group_id, tp, now, config, -1, start, end)
                if prepared.start < 0:  # no state yet: share.auto.offset.reset says where
                    init = await self._init_offset(tp, config)
                    prepared = await self.store.prepare(group_id, tp, now, config, init, start, end)
            except KafkaesqueError as exc:
                results[tp] = Acquired(exc)
                continue
            if prepared.lock_deadline >= 0:
                lock_deadline = (
                    prepared.lock_deadline
                    if lock_deadline < 0
                    else min(lock_deadline, prepared.lock_deadline)
                )
            results[tp] = Acquired()
            in_flight = prepared.acquired + prepared.available
            self.in_flight[(group_id, *tp)] = (in_flight, prepared.archived)
            if prepared.next_offset >= 0:
                requests.append(FetchRequest(tp[0], tp[1], prepared.next_offset, max_bytes))
        committed = config.isolation_level == "read_committed"
        reads = await self.partitions.read_all(requests, max_bytes, None, committed)
        remaining = max_records
        for r in requests:
            tp = (r.topic, r.partition)
            fetched = reads[tp]
            result = results[tp]
            result.leader_epoch = fetched.leader_epoch
            if fetched.error is not None:
                if isinstance(fetched.error, OffsetOutOfRange):
                    # Retention moved the log start past the share-partition's: the next
                    # prepare moves it too.
                    earliest = await self.partitions.log.earliest_offset(*tp)
                    self._seen[(group_id, tp)] = (earliest, NO_END)
                    continue
                result.error = fetched.error
                continue
            self._seen[(group_id, tp)] = (max(0, fetched.log_start), fetched.high_watermark)
            if not fetched.batches or remaining <= 0:
                continue
            ranges = _ranges(fetched.batches, committed, fetched.aborted)
            runs = await self.store.acquire(
                group_id, tp, member_id, now, config, remaining, ranges, strict
            )
            result.runs = runs
            for first, last, delivered in runs:
                self.counts["acquired"] += last - first + 1
                if delivered > 1:
                    self.counts["redelivered"] += last - first + 1
            result.batches = [
                b
                for b, (first, last, _) in zip(fetched.batches, ranges, strict=True)
                if _overlaps(first, last, runs)
            ]
            remaining -= sum(last - first + 1 for first, last, _ in runs)
        return results, lock_deadline

    async def close(self) -> None:
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task


def _duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMnS, as share.auto.offset.reset's by_duration) in ms."""
    m = re.fullmatch(r"p(?:(\d+)d)?(?:t(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?)?", text.lower())
    if m is None:
        return 0
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)
