"""The PostgreSQL archive of kafkaesque: every record, durably, in one total order.

- ``create_pool(dsn)``: the asyncpg pool every part below expects;
- ``ensure_schema(pool)``: create or migrate the tables (also done by the archiver);
- ``Archiver(log, pool)``: drain closed Redis pages into the ``record`` table, exactly once;
- ``ArchiveReader(pool)``: the Log's cold store, reading evicted offsets back as batches;
- ``recover(log, pool)``: restore Redis' topics, offsets and counters after it lost data;
- ``watermark(pool)``, ``status(pool)``: for ``kafkaesque archive --status``;
- ``EmbeddedPostgres(home)``: the private PostgreSQL used when no DSN is configured.

storage_pg imports kafkaesque, never the reverse; only the CLI wires them together.
"""

from storage_pg.archiver import Archiver, ArchiveSummary
from storage_pg.cold import ArchiveReader, ArchiveStatus, PartitionStatus, status, watermark
from storage_pg.embedded import EmbeddedPostgres, EmbeddedPostgresError
from storage_pg.pool import ArchiveError, create_pool, init_connection
from storage_pg.recovery import recover
from storage_pg.schema import SCHEMA_VERSION, ensure_schema

__all__ = [
    "SCHEMA_VERSION",
    "ArchiveError",
    "ArchiveReader",
    "ArchiveStatus",
    "ArchiveSummary",
    "Archiver",
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PartitionStatus",
    "create_pool",
    "ensure_schema",
    "init_connection",
    "recover",
    "status",
    "watermark",
]
