"""Log compaction: closed pages of topics whose cleanup.policy has ``compact`` keep only
the latest record per key, as Kafka's log cleaner does.

A partition's closed pages split in three, oldest first (Kafka's names):

- the *clean* part: pages compacted before (their stats carry the time they were first
  compacted, ``cleaned_ms``);
- the *dirty* part: from the first page never compacted to the end of the *cleanable*
  range. That range ends before the open page (never touched), before the first page
  holding a record newer than ``min.compaction.lag.ms``, and, when an archive exists
  (``ks:archiving``), before the first page not wholly archived, so the archive has every
  record ever produced and compaction only ever shrinks what Redis holds;
- the rest, left alone this time.

A pass runs when the dirty part is at least ``min.cleanable.dirty.ratio`` of the cleanable
bytes, when its oldest record is older than ``max.compaction.lag.ms``, or when a
tombstone's time is up. It maps every key of the dirty part to its latest offset, then
rewrites each cleanable page oldest first: a record goes if a later record has its key, if
it has no key (Kafka's cleaner drops those too), or if it is a tombstone (null value) whose
page was first compacted ``delete.retention.ms`` ago (Kafka's delete horizon, kept per page
here rather than per batch). Surviving records keep their offsets; a batch keeps its base
offset and last offset delta (kafkaesque.records.build.rebuild_batch), so the page's batch index
and every record's global sequence number stay true.

Transactions (as Kafka's cleaner treats them): a transaction marker is always kept; the
records of an aborted transaction are dropped; those of a transaction still open are kept
as they are and hide no older record (it may yet abort); those of a committed one are
ordinary records.

Each page is rewritten by one script (kafkaesque/hot/lua/compact.lua) that refuses if the page
changed since it was read. A pass stops at the first refusal: a page is only compacted
after every older one was, so a tombstone can never outlive a value it hides. The next
pass picks up where this one stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from kafkaesque.clock import now_ms as _now_ms
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.config.topic_keys import LONG_MAX
from kafkaesque.errors import Conflict, InvalidConfig, InvalidRecord, UnknownTopic
from kafkaesque.hot.compaction_types import PartitionCompaction, Policy, TopicCompaction
from kafkaesque.hot.log import Log
from kafkaesque.hot.outage import background_step
from kafkaesque.records.batch import (
    BatchHeader,
    decode_batch_and_header,
    read_header,
    record_keys,
)
from kafkaesque.records.build import rebuild_batch
from kafkaesque.tables import plural
from kafkaesque.tasks import sleep_unless_stopped

log = logging.getLogger(__name__)

KEEP, DROP = b"=", b""  # compact.lua's actions for a batch kept as is or dropped whole
MAX_KEYS = 1_000_000  # keys mapped per pass at most (Kafka's dedupe buffer); the rest waits


@dataclass(frozen=True, slots=True)
class _Transactions:
    """A partition's open transactions (producer id -> first offset) and aborted ones
    (producer id, first offset, ABORT marker's offset) when a pass began."""

    open: dict[int, int]
    aborted: list[tuple[int, int, int]]

    def untouchable(self, header: BatchHeader) -> bool:
        """A marker, or a batch of a transaction still open: kept as it is, its keys hide
        nothing."""
        if header.is_control:
            return True
        first = self.open.get(header.producer_id)
        return header.is_transactional and first is not None and header.base_offset >= first

    def aborted_batch(self, header: BatchHeader) -> bool:
        return header.is_transactional and any(
            pid == header.producer_id and first <= header.base_offset < last
            for pid, first, last in self.aborted
        )


@dataclass(frozen=True, slots=True)
class _Page:
    """A closed page as the plan sees it (its stats: "records bytes max_timestamp
    cleaned_ms tombstones", the last three optional)."""

    number: int
    first: int  # first offset (its index score)
    next: int  # the next page's first offset, or the log end
    records: int
    bytes: int
    max_ts: int | None
    cleaned_ms: int | None  # when first compacted; None: dirty
    tombstones: int


def _page(number: int, first: int, following: int, stats: bytes | None) -> _Page:
    fields = [int(f) for f in (stats or b"0 0").split()]
    fields += [None] * (5 - len(fields))  # type: ignore[list-item]
    records, size, max_ts, cleaned, tombstones = fields
    return _Page(number, first, following, records, size, max_ts, cleaned, tombstones or 0)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """One page read atomically, as compact.lua will compare it."""

    first: int | None  # None: the page is gone
    stats: bytes
    bidx: bytes
    batches: list[bytes]
    has_successor: bool  # a later page exists to take its offsets if it empties


@dataclass(frozen=True, slots=True)
class _Plan:
    pages: list[_Page]  # the cleanable range, oldest first
    first_dirty: int  # index into pages; len(pages): nothing dirty
    idle: str  # why no pass is due ("" when one is)
    due_ms: float  # when something may become due without a new page (for the cache)


class Compactor:
    """Compacts the partitions of compact topics (see the module docstring).

    ``max_keys`` bounds the memory of a pass (the keys it maps); ``clock`` gives the time
    in ms (tests move it)."""

    def __init__(
        self, log: Log, *, max_keys: int = MAX_KEYS, clock: Callable[[], int] = _now_ms
    ) -> None:
        self.log = log
        self.max_keys = max_keys
        self.clock = clock
        # Per partition, what its last plan saw (open page, archived mark, policy) and when
        # it may become due: while nothing changed, a pass costs one HMGET per partition.
        self._quiet: dict[tuple[str, int], tuple[tuple[object, ...], float]] = {}

    # -- passes ---------------------------------------------------------------------------
    async def run_once(
        self,
        topics: list[str] | None = None,
        *,
        force: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> list[TopicCompaction]:
        """Compact the named topics (every compact topic when None). ``force`` ignores
        min.cleanable.dirty.ratio (the lags and the archive still hold). A named topic
        that does not exist or is not compact raises UnknownTopic / InvalidConfig."""
        results = []
        for name in topics if topics is not None else await self.log.list_topics():
            try:
                config = await self.log.topic(name)
            except UnknownTopic:
                if topics is not None:
                    raise
                continue  # deleted meanwhile
            if not config.compact:
                if topics is not None:
                    policy = config.value("cleanup.policy")
                    raise InvalidConfig(f"topic {name} is not compacted (cleanup.policy={policy})")
                continue
            if progress is not None:
                progress(f"compacting {name} ({plural(config.partitions, 'partition')})")
            results.append(await self.compact_topic(config, force=force))
        return results

    async def compact_topic(self, config: TopicConfig, *, force: bool = False) -> TopicCompaction:
        result = TopicCompaction(config.name)
        policy = Policy.of(config)
        for partition in await self._stirring(config, policy, force):
            try:
                done = await self.compact_partition(config.name, partition, policy, force=force)
            except UnknownTopic:
                break  # deleted meanwhile
            result.partitions.append(done)
        return result

    async def run_forever(self, interval: float = 5.0, stop: asyncio.Event | None = None) -> None:
        """A pass every ``interval`` seconds until ``stop`` is set (or the task is
        cancelled): the broker's compaction. Cheap while nothing changes."""
        while stop is None or not stop.is_set():
            with background_step("compaction pass", log):
                for done in await self.run_once():
                    if done.compacted:
                        log.info("compaction: %s", done.format())
            await sleep_unless_stopped(interval, stop)

    async def _stirring(self, config: TopicConfig, policy: Policy, force: bool) -> list[int]:
        """The partitions worth planning: all when forced, else those whose open page or
        archived mark moved, or whose next due time came, since their last plan."""
        partitions = range(config.partitions)
        if force or not self._quiet:
            return list(partitions)
        pipe = self.log.redis.pipeline(transaction=False)
        for p in partitions:
            pipe.hmget(self.log.keys.partition(config.name, p).meta, "page", "archived")
        now = self.clock()
        stirring = []
        for p, seen in zip(partitions, await pipe.execute(), strict=True):
            quiet = self._quiet.get((config.name, p))
            if quiet is None or quiet[0] != (*seen, policy) or now >= quiet[1]:
                stirring.append(p)
        return stirring

    # -- one partition ----------------------------------------------------------------------
    async def compact_partition(
        self, topic: str, partition: int, policy: Policy, *, force: bool = False
    ) -> PartitionCompaction:
        """One pass over a partition: plan, map the dirty part's keys, rewrite the
        cleanable pages oldest first."""
        result = PartitionCompaction(topic, partition)
        now = self.clock()
        seen, plan = await self._plan(topic, partition, policy, now, force)
        result.idle = plan.idle
        for page in plan.pages:
            result.records_before += page.records
            result.bytes_before += page.bytes
        result.records_after, result.bytes_after = result.records_before, result.bytes_before
        if plan.idle:
            self._quiet[(topic, partition)] = ((*seen, policy), plan.due_ms)
            return result
        self._quiet.pop((topic, partition), None)  # planned afresh next time
        # Open ones first: a transaction ending in between is then seen open (kept), never
        # as neither open nor aborted (which would count an abort as committed).
        txns = _Transactions(dict(await self.log.open_transactions(topic, partition)), [])
        txns.aborted.extend(await self.log.aborted_transactions(topic, partition))
        latest, pages = await self._map_keys(topic, partition, plan, txns)
        if plan.first_dirty == len(plan.pages):
            # Only tombstones are due: no other record of the clean part can go, so only
            # their pages are read (the values they hid went when they were first compacted).
            pages = [
                pg
                for pg in pages
                if pg.tombstones and pg.cleaned_ms + policy.delete_retention_ms <= now  # type: ignore[operator]
            ]
        for page in pages:
            if not await self._rewrite(topic, partition, page, latest, policy, now, result, txns):
                break
        return result

    async def _plan(
        self, topic: str, partition: int, policy: Policy, now: int, force: bool
    ) -> tuple[tuple[object, ...], _Plan]:
        """The cleanable pages and whether a pass is due (one round trip; one more for
        max.compaction.lag.ms when the dirty ratio is too low)."""
        keys = self.log.keys
        p = keys.partition(topic, partition)
        pipe = self.log.redis.pipeline(transaction=True)
        pipe.hmget(p.meta, "page", "archived", "end", "archiving")
        pipe.zrange(p.index, 0, -1, withscores=True)
        pipe.hgetall(p.stats)
        (open_page, archived, log_end, archiving), index, stats = await pipe.execute()
        if log_end is None:
            raise UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
        seen = (open_page, archived)
        closed = [(int(n), int(s)) for n, s in index if int(n) < int(open_page)]
        follows = [int(s) for _, s in index[1:]] + [int(log_end)]
        pages: list[_Page] = []
        blocked_until = float("inf")  # when min.compaction.lag.ms lets the next page in
        for (number, first), following in zip(closed, follows, strict=False):
            page = _page(number, first, following, stats.get(str(number).encode()))
            if archiving == b"1" and page.next > int(archived):
                break  # not wholly archived yet: the archive must get it uncompacted
            if page.max_ts is not None and page.max_ts > now - policy.min_lag_ms:
                blocked_until = page.max_ts + policy.min_lag_ms
                break
            pages.append(page)
        first_dirty = next((i for i, pg in enumerate(pages) if pg.cleaned_ms is None), len(pages))
        horizons = [
            pg.cleaned_ms + policy.delete_retention_ms
            for pg in pages
            if pg.tombstones and pg.cleaned_ms is not None
        ]
        tombstones_due = min(horizons, default=float("inf"))
        due = min(blocked_until, tombstones_due)
        if first_dirty == len(pages):
            if tombstones_due <= now:
                return seen, _Plan(pages, first_dirty, "", due)
            idle = "nothing new to compact" if pages else "no page ready to compact"
            return seen, _Plan(pages, first_dirty, idle, due)
        dirty = sum(pg.bytes for pg in pages[first_dirty:])
        total = sum(pg.bytes for pg in pages)
        ratio = dirty / total if total else 1.0
        if force or ratio >= policy.min_dirty_ratio or tombstones_due <= now:
            return seen, _Plan(pages, first_dirty, "", due)
        if policy.max_lag_ms < LONG_MAX:
            oldest = await self._first_timestamp(topic, partition, pages[first_dirty].number)
            if oldest is not None:
                if oldest + policy.max_lag_ms <= now:
                    return seen, _Plan(pages, first_dirty, "", due)
                due = min(due, oldest + policy.max_lag_ms)
        idle = f"dirty ratio {ratio:.2f} below {policy.min_dirty_ratio:g}"
        return seen, _Plan(pages, first_dirty, idle, due)

    async def _first_timestamp(self, topic: str, partition: int, page: int) -> int | None:
        """The first batch's baseTimestamp: how old the page's oldest record is."""
        # Replies are bytes: the client does not decode them.
        batch = await self.log.redis.lindex(self.log.keys.partition(topic, partition).page(page), 0)
        return None if batch is None else read_header(cast(bytes, batch)).base_timestamp

    async def _snapshot(self, topic: str, partition: int, page: int) -> _Snapshot:
        """The page as compact.lua will compare it, read in one MULTI."""
        p = self.log.keys.partition(topic, partition)
        pipe = self.log.redis.pipeline(transaction=True)
        pipe.zscore(p.index, page)
        pipe.hget(p.stats, page)
        pipe.get(p.batch_index(page))
        pipe.lrange(p.page(page), 0, -1)
        pipe.zrank(p.index, page)
        pipe.zcard(p.index)
        first, stats, bidx, batches, rank, count = await pipe.execute()
        return _Snapshot(
            None if first is None else int(first),
            stats or b"",
            bidx or b"",
            batches,
            rank is not None and rank < count - 1,
        )

    async def _map_keys(
        self, topic: str, partition: int, plan: _Plan, txns: _Transactions
    ) -> tuple[dict[bytes, int], list[_Page]]:
        """Every key of the dirty part with its latest offset, and the pages this pass
        rewrites: the map stops growing after the page that fills it to ``max_keys``, and
        the pass then ends with that page."""
        latest: dict[bytes, int] = {}
        end = len(plan.pages)
        for i in range(plan.first_dirty, len(plan.pages)):
            snapshot = await self._snapshot(topic, partition, plan.pages[i].number)
            for batch in snapshot.batches:
                try:
                    header, records = record_keys(batch)
                except InvalidRecord:
                    continue  # kept as it is (the archiver keeps it raw too)
                if txns.untouchable(header) or txns.aborted_batch(header):
                    continue
                for offset, key, _ in records:
                    if key is not None:
                        latest[key] = offset
            if len(latest) >= self.max_keys:
                end = i + 1
                break
        return latest, plan.pages[:end]

    async def _rewrite(
        self,
        topic: str,
        partition: int,
        page: _Page,
        latest: dict[bytes, int],
        policy: Policy,
        now: int,
        result: PartitionCompaction,
        txns: _Transactions,
    ) -> bool:
        """Compact one page; False when the pass must stop here (it changed meanwhile, or
        it would empty with no later page to take its offsets)."""
        snapshot = await self._snapshot(topic, partition, page.number)
        if snapshot.first is None:
            return True  # retention dropped it meanwhile (older pages went first)
        if not snapshot.batches:
            # Expired (its TTL) but still indexed until the next trim: not a page compaction
            # emptied, so its offsets must not pass to the next page (that would move the
            # log start back and hide the archive's records from the readers).
            return True
        before = _page(page.number, snapshot.first, page.next, snapshot.stats)
        expired = before.cleaned_ms is not None and (
            before.cleaned_ms + policy.delete_retention_ms <= now
        )

        def retained(offset: int, key: bytes | None, tombstone: bool) -> bool:
            if key is None:
                return False  # Kafka's cleaner drops keyless records of compact topics
            newest = latest.get(key)
            if newest is not None and offset < newest:
                return False
            return not (expired and tombstone)

        actions: list[bytes] = []
        records = tombstones = 0
        max_ts: int | None = None
        for batch in snapshot.batches:
            try:
                header, keys = record_keys(batch)
            except InvalidRecord:  # kept as it is (the archiver keeps it raw too)
                header, keys = read_header(batch), []
                kept = None
            else:
                if txns.untouchable(header):
                    kept = None
                elif txns.aborted_batch(header):
                    kept = []
                else:
                    kept = [k for k in keys if retained(*k)]
            if kept is None or len(kept) == len(keys):
                actions.append(KEEP)
                new_header = header
            elif not kept:
                actions.append(DROP)
                continue
            else:  # only now are the values and headers decoded
                offsets = {offset for offset, _, _ in kept}
                records_of = decode_batch_and_header(batch)[1]
                rebuilt = rebuild_batch(header, [r for r in records_of if r.offset in offsets])
                actions.append(rebuilt)
                new_header = read_header(rebuilt)
            records += new_header.record_count
            tombstones += sum(1 for k in (keys if kept is None else kept) if k[2])
            if max_ts is None or new_header.max_timestamp > max_ts:
                max_ts = new_header.max_timestamp
        if not records and not snapshot.has_successor:
            return False  # the next append opens a page that can take its offsets
        unchanged = all(a is KEEP for a in actions)
        if unchanged and before.cleaned_ms is not None and tombstones == before.tombstones:
            return True
        cleaned = before.cleaned_ms if before.cleaned_ms is not None else now
        stats = f"{records} {max_ts if max_ts is not None else 0} {cleaned} {tombstones}"
        p = self.log.keys.partition(topic, partition)
        read = (page.number, snapshot.first, snapshot.stats, snapshot.bidx)
        try:
            old_bytes, new_bytes = await self.log.scripts.compact(
                keys=[p.meta, p.index, p.stats], args=[p.prefix, *read, stats, *actions]
            )
        except Conflict:
            result.conflict = True
            return False
        result.records_after += records - before.records
        result.bytes_after += new_bytes - old_bytes
        if not unchanged:
            result.pages += 1
            result.pages_removed += not records
        return True
