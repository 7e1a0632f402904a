"""The archive over TLS: `kafkaesque archive` with a DSN's sslmode. The session's embedded
PostgreSQL has no SSL, so a TLS proxy in PostgreSQL mode (tests/tls_proxy.py) stands in
front of it as a server that takes TLS only: sslmode=verify-full with the test CA archives
the records through it, a client without TLS is refused, a wrong CA fails in one line;
sslmode=require against the server itself (no SSL) fails in one line. The DSN's password
never shows."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from tests.pg import PostgresServer
from tests.storage.common import archived_rows
from tests.storage.test_served import cli, ok
from tests.tls_proxy import TlsProxy, server_context
from tests.wire.certificates import Certificates, make_certificates

PASSWORD = "pw-never-shown-7c1e"
VALUES = [b"tls-%03d" % i for i in range(50)]


@dataclass(frozen=True)
class TlsPostgres:
    """The proxy's port in front of ``server``; ``certs.ca`` signed its certificate."""

    server: PostgresServer
    proxy: TlsProxy
    certs: Certificates

    def dsn(self, plain: str, **params: str) -> str:
        """``plain`` (a DSN of ``server``) through the proxy, with PASSWORD and ``params``."""
        dsn = with_password(plain).replace(f":{self.server.port}/", f":{self.proxy.port}/", 1)
        return dsn + "?" + "&".join(f"{k}={v}" for k, v in params.items())


@pytest.fixture(scope="module")
def tls_pg(
    pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsPostgres]:
    certs = make_certificates(tmp_path_factory.mktemp("pg-certs"))
    context = server_context(certs.server_cert, certs.server_key)
    with TlsProxy(pg_server.port, context, postgres=True) as proxy:
        yield TlsPostgres(pg_server, proxy, certs)


def with_password(dsn: str) -> str:
    """postgresql://postgres@... with PASSWORD (trust auth ignores it; it must not show)."""
    return dsn.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)


def test_archive_with_sslmode_verify_full(
    redis_url: str, tls_pg: TlsPostgres, pg_dsn: str, tmp_path: Path
) -> None:
    dsn = tls_pg.dsn(pg_dsn, sslmode="verify-full", sslrootcert=tls_pg.certs.ca)

    def run(*args: str, input: bytes | None = None):
        return cli(redis_url, tmp_path, *args, input=input, pg_dsn=dsn)

    handshakes = tls_pg.proxy.connections
    ok(run("create", "t", "--page-size", "10"))
    ok(run("produce", "t", input=b"".join(v + b"\n" for v in VALUES)))
    archived = run("archive", "--once")
    assert archived.returncode == 0, archived.stderr.decode()
    assert "archived 50 records (" in archived.stderr.decode()
    assert tls_pg.proxy.connections > handshakes  # the archiver's connections had TLS
    assert [r.value for r in asyncio.run(archived_rows(dsn))] == VALUES
    # The proxy takes nothing without TLS, as a PostgreSQL with `hostnossl ... reject`.
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
        asyncio.run(archived_rows(tls_pg.dsn(pg_dsn, sslmode="disable")))


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
    redis_url: str, tls_pg: TlsPostgres, pg_dsn: str, tmp_path: Path
) -> None:
    """A server certificate the DSN's sslrootcert did not sign is refused, in one line."""
    other = make_certificates(tmp_path / "other-ca")
    dsn = tls_pg.dsn(pg_dsn, sslmode="verify-full", sslrootcert=other.ca)
    result = cli(redis_url, tmp_path, "archive", "--once", pg_dsn=dsn)
    assert result.returncode != 0
    assert PASSWORD not in (result.stdout + result.stderr).decode()
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("Error: ") and "CERTIFICATE_VERIFY_FAILED" in line, line
