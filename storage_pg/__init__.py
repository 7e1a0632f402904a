"""The PostgreSQL archive of kafkaesque: every record, durably, in one total order.

- ``create_pool(dsn)``: the asyncpg pool every part below expects;
- ``ensure_schema(pool)``: create or migrate the tables (also done by the archiver);
- ``Archiver(log, pool)``: drain closed Redis pages into the ``record`` table, exactly once;
- ``ArchiveReader(pool)``: the Log's cold store, reading evicted offsets back as batches;
- ``recover(log, pool)``: restore Redis' topics, offsets and counters after it lost data;
- ``watermark(pool)``, ``status(pool)``: for ``kafkaesque archive --status``;
- ``EmbeddedPostgres(home)``: the private PostgreSQL used when no DSN is configured;
- ``Archive(dsn)``: all of the above attached to a running Log (tiered reads, recovery).

storage_pg imports kafkaesque, never the reverse; only the CLI wires them together.
"""

import importlib
from typing import Any

# Loaded on first use (PEP 562): the CLI imports storage_pg.embedded on every command, and
# the archive's heavier modules (asyncpg) only matter to commands that use the archive.
_WHERE = {
    "Archiver": "archiver",
    "ArchiveSummary": "archiver",
    "ArchiveReader": "cold",
    "ArchiveStatus": "cold",
    "PartitionStatus": "cold",
    "status": "cold",
    "watermark": "cold",
    "EmbeddedPostgres": "embedded",
    "EmbeddedPostgresError": "embedded",
    "ArchiveError": "pool",
    "create_pool": "pool",
    "init_connection": "pool",
    "recover": "recovery",
    "SCHEMA_VERSION": "schema",
    "ensure_schema": "schema",
    "Archive": "tiered",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'storage_pg' has no attribute {name!r}")
    return getattr(importlib.import_module(f"storage_pg.{_WHERE[name]}"), name)
