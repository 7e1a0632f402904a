"""The archive behind a running Log: cold reads, recovery and the archiver on one pool.

``Archive(dsn)`` is what the CLI and the broker attach to a ``kafkaesque.hot.log.Log``:

- as its ``cold`` store: offsets Redis no longer holds are read from PostgreSQL;
- as where a deleted topic's records, and records deleted by DeleteRecords, are deleted
  from too;
- as its ``recover`` callback: after Redis lost its data, offsets are restored from the
  archive before any append;
- as the source of the archiver the broker runs on an interval.

The pool is created on first use, so a command that never reaches below Redis' oldest
offset never connects. PostgreSQL being unreachable never stops hot traffic: only what
needs the archive fails (a read below Redis' oldest offset, the earliest offset or a time
lookup once Redis no longer starts at 0), with ``StorageUnavailable`` (KAFKA_STORAGE_ERROR
on the wire, which clients retry).
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from kafkaesque.errors import StorageUnavailable
from kafkaesque.hot.log import Log
from storage_pg.archiver import Archiver
from storage_pg.cold import ArchiveReader
from storage_pg.deletion import delete_records, delete_topic
from storage_pg.pool import PG_CONNECTION_ERRORS, create_pool
from storage_pg.recovery import bind_cluster, recover


class Archive:
    """One archive database, connected lazily; implements kafkaesque.hot.log_types.ColdStore."""

    def __init__(self, dsn: str, *, max_connections: int = 4) -> None:
        """An unreachable archive fails every request that asks about old offsets with
        StorageUnavailable (a retriable KAFKA_STORAGE_ERROR on the wire): the earliest
        offset is never Redis' own instead, or a consumer reset to the earliest, or a
        `consume` from the start, would quietly skip what only the archive holds."""
        self.dsn = dsn
        self.max_connections = max_connections
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()
        self._reader: ArchiveReader | None = None
        self._log: Log | None = None  # the log it is attached to, checked on first use

    async def pool(self) -> asyncpg.Pool:
        """The connection pool; created on first use, after checking that the archive
        belongs to the attached log's Redis (ClusterMismatch if it does not)."""
        async with self._lock:
            if self._pool is None:
                pool = await create_pool(self.dsn, max_size=self.max_connections)
                try:
                    if self._log is not None:
                        async with pool.acquire() as conn:
                            await bind_cluster(self._log, conn)
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
                self._reader = ArchiveReader(pool)
            return self._pool

    async def bind(self) -> None:
        """Check now that the archive belongs to the attached log's Redis (a broker does,
        before it starts)."""
        try:
            await self.pool()
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def _cold_reader(self) -> ArchiveReader:
        await self.pool()
        assert self._reader is not None
        return self._reader

    async def start_offset(self, topic: str, partition: int) -> int | None:
        try:
            return await (await self._cold_reader()).start_offset(topic, partition)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def archived_through(self, topic: str, partition: int) -> int:
        try:
            return await (await self._cold_reader()).archived_through(topic, partition)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def watermark(self) -> int:
        try:
            return await (await self._cold_reader()).watermark()
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def dropped_ranges(self, topic: str) -> list[tuple[int, int, int]]:
        """(partition, first offset, last offset) of each of the topic's gaps: offsets
        retention dropped before an archive held them."""
        try:
            return await (await self._cold_reader()).dropped_ranges(topic)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def partition_bytes(self, topic: str) -> dict[int, int]:
        try:
            return await (await self._cold_reader()).partition_bytes(topic)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def find_time(
        self, topic: str, partition: int, timestamp: int, below: int
    ) -> tuple[int, int] | None:
        try:
            return await (await self._cold_reader()).find_time(topic, partition, timestamp, below)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        try:
            return await (await self._cold_reader()).read(topic, partition, offset, max_bytes)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(f"the archive is unreachable: {exc}") from exc

    async def delete_topic(self, topic: str, topic_id: bytes | None, partitions: int) -> bool:
        """Delete the topic's records from the archive (a delete that cannot reach the
        archive must fail, not leave the records behind)."""
        try:
            async with (await self.pool()).acquire() as conn:
                incarnation = None if topic_id is None else uuid.UUID(bytes=topic_id)
                return await delete_topic(conn, topic, incarnation, partitions)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(
                f"the archive is unreachable, so topic {topic} was not deleted: {exc}"
            ) from exc

    async def delete_records(
        self, topic: str, topic_id: bytes, partition: int, before: int
    ) -> None:
        """Delete the partition's archived records below ``before`` (a failure is raised:
        Redis' floor must not move while the archive still serves what is below)."""
        try:
            async with (await self.pool()).acquire() as conn:
                await delete_records(conn, topic, uuid.UUID(bytes=topic_id), partition, before)
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(
                f"the archive is unreachable, so no records of {topic}[{partition}] were "
                f"deleted: {exc}"
            ) from exc

    async def recover(self, log: Log) -> None:
        """The Log's ``recover`` callback: restore offsets from the archive."""
        try:
            await recover(log, await self.pool())
        except PG_CONNECTION_ERRORS as exc:
            raise StorageUnavailable(
                f"Redis lost its data and the archive, needed to restore the offsets, "
                f"is unreachable: {exc}"
            ) from exc

    async def archiver(self, log: Log, **options: object) -> Archiver:
        return Archiver(log, await self.pool(), **options)  # type: ignore[arg-type]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def attach(log: Log, archive: Archive) -> Log:
    """``log`` with ``archive`` as its cold store and recovery."""
    log.cold = archive
    log.recover = archive.recover
    archive._log = log
    return log
