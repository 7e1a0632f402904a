"""The archive over TLS: `kafkaesque archive` with a DSN's sslmode. A PostgreSQL with
ssl=on that refuses connections without TLS (tests.pg, ``tls=True``) takes the records with
sslmode=verify-full and the test CA; sslmode=require against the session's server, which
has no SSL, fails with one line and never shows the DSN's password."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.pg import PostgresServer
from tests.storage.common import archived_rows
from tests.storage.test_served import cli, ok
from tests.wire.certificates import make_certificates

PASSWORD = "pw-never-shown-7c1e"
VALUES = [b"tls-%03d" % i for i in range(50)]


@pytest.fixture(scope="module")
def tls_pg() -> Iterator[PostgresServer]:
    server = PostgresServer(tls=True)
    yield server
    server.destroy()


def with_password(dsn: str) -> str:
    """postgresql://postgres@... with PASSWORD (trust auth ignores it; it must not show)."""
    return dsn.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)


def test_archive_with_sslmode_verify_full(
    redis_url: str, tls_pg: PostgresServer, tmp_path: Path
) -> None:
    assert tls_pg.certs is not None
    with tls_pg.database() as plain:
        dsn = f"{with_password(plain)}?sslmode=verify-full&sslrootcert={tls_pg.certs.ca}"

        def run(*args: str, input: bytes | None = None):
            return cli(redis_url, tmp_path, *args, input=input, pg_dsn=dsn)

        ok(run("create", "t", "--page-size", "10"))
        ok(run("produce", "t", input=b"".join(v + b"\n" for v in VALUES)))
        archived = run("archive", "--once")
        assert archived.returncode == 0, archived.stderr.decode()
        assert "archived 50 records (" in archived.stderr.decode()
        assert [r.value for r in asyncio.run(archived_rows(dsn))] == VALUES
        # The server takes nothing without TLS: the archiver's connections had it.
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encrypt"):
            asyncio.run(archived_rows(f"{plain}?sslmode=disable"))


def test_sslmode_require_against_a_server_without_ssl(
    redis_url: str, pg_dsn: str, tmp_path: Path
) -> None:
    ok(cli(redis_url, tmp_path, "create", "t", pg_dsn=pg_dsn))
    ok(cli(redis_url, tmp_path, "produce", "t", input=b"a\nb\n", pg_dsn=pg_dsn))
    dsn = f"{with_password(pg_dsn)}?sslmode=require"
    result = cli(redis_url, tmp_path, "archive", "--once", pg_dsn=dsn)
    assert result.returncode != 0
    assert PASSWORD not in (result.stdout + result.stderr).decode()
    assert result.stdout == b""
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("Error: ") and "rejected SSL upgrade" in line, line


def test_verify_full_with_another_ca(
    redis_url: str, tls_pg: PostgresServer, tmp_path: Path
) -> None:
    """A server certificate the DSN's sslrootcert did not sign is refused, in one line."""
    other = make_certificates(tmp_path / "other-ca")
    with tls_pg.database() as plain:
        dsn = f"{with_password(plain)}?sslmode=verify-full&sslrootcert={other.ca}"
        result = cli(redis_url, tmp_path, "archive", "--once", pg_dsn=dsn)
    assert result.returncode != 0
    assert PASSWORD not in (result.stdout + result.stderr).decode()
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("Error: ") and "CERTIFICATE_VERIFY_FAILED" in line, line
