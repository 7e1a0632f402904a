"""The archiver's side of the log: switching archiving on, closed pages, what is archived.

Mixed into kafkaesque.log.Log, which provides the keys, the scripts and the errors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import ResponseError, WatchError

from kafkaesque.scripts import Scripts

# The archiving flag's value once the TTLs of unarchived pages were taken back (older
# versions set "1" without doing so: the step is redone then).
_ARCHIVING_ON = b"2"


@dataclass(frozen=True, slots=True)
class ClosedPage:
    """A closed page as the archiver sees it."""

    page: int
    first_offset: int
    next_offset: int  # first offset after this page
    batches: list[bytes]  # as stored: baseOffset patched
    sequences: list[int]  # per batch, the global sequence number of its first record


class ArchivingLog:
    """Methods of kafkaesque.log.Log the archiver uses."""

    redis: Redis
    scripts: Scripts
    _topics_key: str
    _archiving_key: str

    def _keys(self, topic: str, partition: int) -> list[str]:
        raise NotImplementedError

    def _prefix(self, topic: str, partition: int) -> str:
        raise NotImplementedError

    def _config_key(self, topic: str) -> str:
        raise NotImplementedError

    def _fail(self, exc: ResponseError) -> None:
        """Raise the log error a script's error reply stands for."""
        raise NotImplementedError

    def _unknown(self, topic: str, partition: int) -> Exception:
        raise NotImplementedError

    def _partitions_of(self, name: str, raw: bytes) -> int:
        """The partition count of a topic's stored config."""
        raise NotImplementedError

    async def enable_archiving(self) -> None:
        """From now on pages expire (TTL, max pages) only once archived: in one atomic step,
        set the archiving flag and take back the TTL of every closed page not archived yet
        (archive_on.lua per partition, all in one MULTI/EXEC, which WATCH restarts if a
        topic or partition appears meanwhile). Does nothing once done."""
        if await self.redis.get(self._archiving_key) == _ARCHIVING_ON:
            return
        while True:
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(self._topics_key)
                names = sorted(n.decode() for n in await pipe.smembers(self._topics_key))
                config_keys = [self._config_key(name) for name in names]
                if config_keys:
                    await pipe.watch(*config_keys)
                    raws = await pipe.mget(config_keys)
                else:
                    raws = []
                pipe.multi()
                for name, raw in zip(names, raws, strict=True):
                    if raw is None:
                        continue  # being deleted
                    for p in range(self._partitions_of(name, raw)):
                        meta, index, *_ = self._keys(name, p)
                        await self.scripts.archive_on(
                            keys=[meta, index, self._archiving_key],
                            args=[self._prefix(name, p), _ARCHIVING_ON],
                            client=pipe,
                        )
                pipe.set(self._archiving_key, _ARCHIVING_ON)
                try:
                    await pipe.execute()
                    return
                except WatchError:
                    continue  # a topic was created, grown or deleted: list them again

    async def closed_pages(
        self, topic: str, partition: int, from_offset: int, max_pages: int = 16
    ) -> list[ClosedPage]:
        """Closed pages holding offsets >= from_offset, oldest first, whole."""
        meta, index, *_ = self._keys(topic, partition)
        try:
            flat = await self.scripts.closed_pages(
                keys=[meta, index], args=[self._prefix(topic, partition), from_offset, max_pages]
            )
        except ResponseError as exc:
            self._fail(exc)
            raise
        pages, i = [], 0
        while i < len(flat):
            page, first, following, bidx, count = flat[i : i + 5]
            batches = flat[i + 5 : i + 5 + count]
            sequences = [
                int.from_bytes(bidx[j + 8 : j + 16], "big") for j in range(0, len(bidx), 16)
            ]
            pages.append(ClosedPage(page, first, following, batches, sequences))
            i += 5 + count
        return pages

    async def mark_archived(self, topic: str, partition: int, through: int) -> None:
        """Offsets below ``through`` are archived: their pages may now expire."""
        meta, index, stats, _ = self._keys(topic, partition)
        try:
            await self.scripts.mark_archived(
                keys=[meta, index, stats], args=[self._prefix(topic, partition), through]
            )
        except ResponseError as exc:
            self._fail(exc)

    async def close_idle_pages(self, topic: str, partition: int, older_than_ms: int) -> bool:
        """Close the open page if its first record is older than that (ms), so quiet
        partitions get archived too."""
        meta, _, stats, _ = self._keys(topic, partition)
        try:
            closed = await self.scripts.close_idle(
                keys=[meta, stats, self._archiving_key],
                args=[self._prefix(topic, partition), int(time.time() * 1000) - older_than_ms],
            )
        except ResponseError as exc:
            self._fail(exc)
            raise
        return bool(closed)

    async def first_unarchived_sequence(self, topic: str, partition: int) -> int | None:
        """The global sequence number of the first record not yet archived, if any; 1 when
        Redis no longer holds that record (retention dropped it before archiving, and the
        archiver has not recorded the gap yet), which holds the watermark back."""
        meta = self._keys(topic, partition)[0]
        archived, log_end = await self.redis.hmget(meta, "archived", "end")
        if log_end is None:
            raise self._unknown(topic, partition)
        archived = int(archived or 0)
        if archived >= int(log_end):
            return None
        found = await self.sequence_at(topic, partition, archived)
        if found is None and not await self.redis.exists(meta):
            raise self._unknown(topic, partition)
        return 1 if found is None else found

    async def sequence_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The global sequence number of the record at ``offset`` (below the log end); None
        if Redis does not hold it."""
        index = self._keys(topic, partition)[1]
        found = await self.redis.zrevrangebyscore(index, offset, "-inf", start=0, num=1)
        raw = found and await self.redis.get(
            self._prefix(topic, partition) + f"bidx:{int(found[0])}"
        )
        if not raw:
            return None
        for j in range(len(raw) - 16, -1, -16):
            base = int.from_bytes(raw[j : j + 8], "big")
            if base <= offset:
                return int.from_bytes(raw[j + 8 : j + 16], "big") + offset - base
        return None
