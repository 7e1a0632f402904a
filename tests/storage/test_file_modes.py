"""The embedded servers' data is their user's only: another local user can read none of
the files under the data directory (Valkey's AOF, PostgreSQL's cluster, the password)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from kafkaesque.hot.embedded import EmbeddedRedis
from storage_pg.embedded import EmbeddedPostgres
from tests.storage.test_embedded import query

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root only: reads as another user")

NOBODY = 65534


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory every user can traverse (as /srv or a home directory often is), unlike
    pytest's tmp_path (mode 700), so only the data directory's own modes protect it."""
    directory = Path(tempfile.mkdtemp(prefix="kafkaesque-modes-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def every_path(home: Path) -> list[Path]:
    """Every file and directory under ``home``, following the link to PostgreSQL's cluster
    (in the shared root when the home is not reachable by its service user)."""
    found = [home]
    for root, dirs, files in os.walk(home, followlinks=True):
        found += [Path(root, name) for name in (*dirs, *files)]
    return found


def readable_by_nobody(paths: list[Path]) -> list[str]:
    """The paths user nobody (no groups) can open: files read, directories listed."""
    script = (
        'for p in "$@"; do if [ -d "$p" ]; then ls "$p" >/dev/null 2>&1 && echo "$p"; '
        'else head -c1 "$p" >/dev/null 2>&1 && echo "$p"; fi; done; true'
    )
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    command += ["sh", "-c", script, "sh", *map(str, paths)]
    result = subprocess.run(command, capture_output=True, text=True, check=True, cwd="/")
    return result.stdout.split()


def test_another_user_reads_nothing_under_the_data_directory(open_base: Path) -> None:
    """Records in Valkey (AOF on) and a table in PostgreSQL, both embedded; then user nobody
    tries every file and directory under the data directory: none opens. The data
    directory is 0700, Valkey's files 0600 in 0700 directories, PostgreSQL's cluster 0700."""
    home = open_base / "home"
    shared_root = open_base / "shared" / "lib"
    valkey = EmbeddedRedis(home)
    pg = EmbeddedPostgres(home, shared_root=shared_root)
    try:
        client = redis.Redis.from_url(valkey.ensure_started())
        client.set("secret-record", b"card 4111-1111-1111-1111")
        client.close()
        dsn = pg.ensure_started()
        asyncio.run(query(dsn, "CREATE TABLE kept (x text); INSERT INTO kept VALUES ('secret')"))
        paths = every_path(home)
        aof = [p for p in paths if ".aof" in p.name]
        assert aof, paths
        assert len(paths) > 20  # PostgreSQL's cluster is in the walk
        readable = readable_by_nobody(paths)
        assert readable == [], f"{len(readable)} readable by nobody: {readable[:10]}"
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for path in aof:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE((home / "pg").resolve().stat().st_mode) == 0o700
    finally:
        pg.stop()
        valkey.stop()
