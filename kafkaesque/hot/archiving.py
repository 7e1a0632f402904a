"""The archiver's side of the log: switching archiving on, closed pages, what is archived.

A part of kafkaesque.hot.log.Log, built with its context (kafkaesque.hot.log_context).
"""

from __future__ import annotations

import contextlib
import struct
import time
from dataclasses import dataclass
from typing import cast

from redis.exceptions import AskError, ResponseError, WatchError

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import NotDurable, UnknownTopic
from kafkaesque.hot.durability import Durability, has_waitaof
from kafkaesque.hot.keys import serving
from kafkaesque.hot.log_context import LogContext
from kafkaesque.hot.log_steps import Steps
from kafkaesque.hot.sequence import Ids
from kafkaesque.hot.slots import slot_of

# The archiving switch's value once every partition's meta has its `archiving` field and
# the TTLs of unarchived pages were taken back (older versions set "1" without taking the
# TTLs back, "2" without the field: the step is redone then).
_ARCHIVING_ON = b"3"


@dataclass(frozen=True, slots=True)
class ClosedPage:
    """A closed page as the archiver sees it."""

    page: int
    first_offset: int
    next_offset: int  # first offset after this page
    batches: list[bytes]  # as stored: baseOffset patched
    sequences: list[int]  # per batch, the record id of its first record
    id_step: int = 1  # between the ids of consecutive records (kafkaesque.hot.sequence.Ids)


class Archiving:
    """What the archiver asks of kafkaesque.hot.log.Log; on a cluster archiving is switched
    on in ``steps``."""

    def __init__(self, context: LogContext, steps: Steps) -> None:
        self.redis = context.redis
        self.scripts = context.scripts
        self.keys = context.keys
        self.steps = steps

    def ids(self, topic: str, partition: int) -> Ids:
        """How the partition's sequence numbers become record ids."""
        return Ids(slot_of(topic, partition) if self.keys.cluster else None)

    async def enable_archiving(self) -> None:
        """From now on pages expire (TTL, max pages) only once archived: in one atomic step,
        set the archiving switch and, in every partition's meta, its `archiving` field, and
        take back the TTL of every closed page not archived yet (archive_on.lua per
        partition, all in one MULTI/EXEC, which WATCH restarts if a topic or partition
        appears meanwhile; a topic created later reads the switch). Does nothing once
        done."""
        k = self.keys
        if await self.redis.get(k.archiving) == _ARCHIVING_ON:
            return
        if k.cluster:  # the partitions are in different slots: in steps
            await self.steps.enable_archiving_in_steps(_ARCHIVING_ON)
            return
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(k.topics)
                members = cast("set[bytes]", await pipe.smembers(k.topics))  # replies are bytes
                names = sorted(n.decode() for n in members)
                config_keys = [k.topic(name) for name in names]
                if config_keys:
                    await pipe.watch(*config_keys)
                    raws = await pipe.mget(config_keys)
                else:
                    raws = []
                pipe.multi()
                for name, raw in zip(names, raws, strict=True):
                    if raw is None:
                        continue  # being deleted
                    config = TopicConfig.unpack(name, cast(bytes, raw))  # replies are bytes
                    for p in range(config.partitions):
                        part = k.partition(name, p)
                        await self.scripts.archive_on(
                            keys=[part.meta, part.index], args=[part.prefix], client=pipe
                        )
                pipe.set(k.archiving, _ARCHIVING_ON)
                try:
                    await pipe.execute()
                    return
                except WatchError:
                    continue  # a topic was created, grown or deleted: list them again

    async def closed_pages(
        self, topic: str, partition: int, from_offset: int, max_pages: int = 16
    ) -> list[ClosedPage]:
        """Closed pages holding offsets >= from_offset, oldest first, whole."""
        p = self.keys.partition(topic, partition)
        flat = await self.scripts.closed_pages(
            keys=[p.meta, p.index], args=[p.prefix, from_offset, max_pages]
        )
        ids = self.ids(topic, partition)
        pages, i = [], 0
        while i < len(flat):
            page, first, following, bidx, count = flat[i : i + 5]
            batches = flat[i + 5 : i + 5 + count]
            sequences = [ids.id(sequence) for _, sequence in batch_index_entries(bidx)]
            pages.append(ClosedPage(page, first, following, batches, sequences, ids.step))
            i += 5 + count
        return pages

    async def replicated(
        self, topic: str, partition: int, replicas: int, timeout_ms: int
    ) -> tuple[bool, Durability | None]:
        """Whether everything read from the partition so far is durable on the server
        serving it (on a cluster, its shard's primary): fsynced to its AOF when it has
        one, and at every replica of it in sync, at least ``replicas``; and what that
        took (None: the partition's slot had just moved). One write in the partition's
        slot (archive_barrier.lua), then the waits an acks=all append makes (Durability)
        on that connection: they count its last write, whose offset covers every earlier
        write of the server, so the pages read are covered too."""
        meta = self.keys.partition(topic, partition).meta
        try:
            return await self._replicated(meta, replicas, timeout_ms)
        except AskError:  # MOVED too: the slot moved; the next pass asks its new node
            await self.redis.refresh_slots()  # type: ignore[attr-defined]
            return False, None

    async def _replicated(
        self, meta: str, replicas: int, timeout_ms: int
    ) -> tuple[bool, Durability | None]:
        async with (await serving(self.redis, meta)).client() as connection:
            persistence = await connection.info("persistence")
            replication = await connection.info("replication")
            # A replica still in its first sync (not "online") is one WAIT never counts.
            online = sum(
                1
                for name, value in replication.items()
                if name.startswith("slave")
                and isinstance(value, dict)
                and value.get("state") == "online"
            )
            # Redis 6.2-7.1 has an AOF but no WAITAOF to wait for its fsync (as acks=all);
            # a WAITAOF refused otherwise (NOPERM) is tried, and the chunk waits, told why.
            fsync = int(persistence.get("aof_enabled", 0)) == 1
            if fsync:
                with contextlib.suppress(ResponseError):
                    fsync = await has_waitaof(connection)
            wanted = Durability(fsync, max(replicas, online))
            if not wanted.waits:
                return True, wanted
            await self.scripts.archive_barrier([meta], [], client=connection)
            try:
                await wanted.wait(connection, timeout_ms)
            except NotDurable:
                return False, wanted
        return True, wanted

    async def mark_archived(
        self, topic: str, partition: int, through: int, release: bool = False
    ) -> None:
        """Offsets below ``through`` are archived: their pages may now expire; with
        ``release``, every archived closed page is deleted from Redis now."""
        p = self.keys.partition(topic, partition)
        await self.scripts.mark_archived(
            keys=[p.meta, p.index, p.stats], args=[p.prefix, through, int(release)]
        )

    async def release_archived(self) -> int:
        """Delete every archived closed page from Redis (their offsets stay readable from
        the archive), to make room when Redis runs short of memory; returns how many
        partitions were visited (none unless an archiver archives this log)."""
        k = self.keys
        if await self.redis.get(k.archiving) != _ARCHIVING_ON:
            return 0
        visited = 0
        members = cast("set[bytes]", await self.redis.smembers(k.topics))  # replies are bytes
        for name in sorted(n.decode() for n in members):
            raw = cast("bytes | None", await self.redis.get(k.topic(name)))  # replies are bytes
            if raw is None:
                continue  # being deleted
            for partition in range(TopicConfig.unpack(name, raw).partitions):
                try:
                    await self.mark_archived(name, partition, 0, release=True)
                except UnknownTopic:  # deleted meanwhile
                    break
                visited += 1
        return visited

    async def close_idle_pages(self, topic: str, partition: int, older_than_ms: int) -> bool:
        """Close the open page if its first record is older than that (ms), so quiet
        partitions get archived too."""
        p = self.keys.partition(topic, partition)
        closed = await self.scripts.close_idle(
            keys=[p.meta, p.stats],
            args=[p.prefix, int(time.time() * 1000) - older_than_ms],
        )
        return bool(closed)

    async def first_unarchived_sequence(self, topic: str, partition: int) -> int | None:
        """The record id of the first record not yet archived, if any; 1 when
        Redis no longer holds that record (retention dropped it before archiving, and the
        archiver has not recorded the gap yet), which holds the watermark back. Records
        below DeleteRecords' floor never will be archived: they hold nothing back."""
        meta = self.keys.partition(topic, partition).meta
        archived, log_end, floor = await self.redis.hmget(meta, "archived", "end", "floor")
        if log_end is None:
            raise _unknown(topic, partition)
        first = max(int(archived or 0), int(floor or 0))
        if first >= int(log_end):
            return None
        found = await self.sequence_at(topic, partition, first)
        if found is None and not await self.redis.exists(meta):
            raise _unknown(topic, partition)
        return 1 if found is None else found

    async def sequence_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The record id of the record at ``offset`` (below the log end); None
        if Redis does not hold it. Where the compactor removed that record, the number it
        had, or that of the next record held when its whole batch went (never higher than
        the next record's: the watermark may lag, never run ahead)."""
        p = self.keys.partition(topic, partition)
        # Replies are bytes, and without scores the range is a list of members.
        found = cast(
            "list[bytes]",
            await self.redis.zrevrangebyscore(p.index, offset, "-inf", start=0, num=1),
        )
        raw = found and cast("bytes | None", await self.redis.get(p.batch_index(int(found[0]))))
        if not raw:
            return None
        entries = batch_index_entries(raw)
        ids = self.ids(topic, partition)
        for base, sequence in reversed(entries):
            if base <= offset:
                return ids.id(sequence + offset - base)
        return ids.id(entries[0][1])  # the page took over a page the compactor emptied


# A page's batch index ("bidx:N"): per batch its base offset and the global sequence
# number of its first record, two big-endian 8-byte integers (append.lua writes them).
_BATCH_INDEX_ENTRY = struct.Struct(">QQ")


def batch_index_entries(raw: bytes) -> list[tuple[int, int]]:
    """(base offset, first global sequence) per batch of a page's batch index."""
    return list(_BATCH_INDEX_ENTRY.iter_unpack(raw))


def _unknown(topic: str, partition: int) -> UnknownTopic:
    return UnknownTopic(f"unknown topic or partition: {topic}[{partition}]")
