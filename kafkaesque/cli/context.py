"""The context every command gets (``Context``, through ``pass_context``): where Redis
is (the embedded one started on demand, only by the commands that create), the archive
attached to the log, the wire mode's settings."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kafkaesque.cli.wire import WireSettings
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.connect import DEFAULT_MAX_CONNECTIONS, open_log
from kafkaesque.hot.embedded import EmbeddedError, EmbeddedRedis, NoStore, default_home, in_use
from kafkaesque.hot.log import Log

if TYPE_CHECKING:
    from storage_pg.embedded import EmbeddedPostgres
    from storage_pg.tiered import Archive

# The commands that may create a store in a data directory that has none (starting its
# embedded servers): they make something new. Every other command only reads, or changes
# what must exist already (delete, alter, group --reset-offsets, compact, ...): with no
# store it says so and starts nothing (``NoStore``).
CREATING_COMMANDS = frozenset(
    {"create", "produce", "serve", "archive", "users add", "acls add", "quotas set"}
)

log = logging.getLogger(__name__)


def command_name() -> str:
    """The running subcommand's name ("users add"); "" outside a command."""
    names: list[str] = []
    context = click.get_current_context(silent=True)
    while context is not None and context.parent is not None:
        names.append(context.info_name or "")
        context = context.parent
    return " ".join(reversed(names))


class Context:
    """What every command needs: where Redis is, started on demand when embedded."""

    def __init__(
        self,
        redis_url: str | None,
        home: str | None,
        pg_dsn: str | None = None,
        redis_password: str | None = None,
    ) -> None:
        self.redis_url = redis_url
        # For a --redis-url without a password of its own (never the embedded Redis).
        self.redis_password = redis_password
        self.home = default_home() if home is None else click.format_filename(home)
        self.pg_dsn = pg_dsn
        self._archives: list[Archive] = []
        self._redis: EmbeddedRedis | None = None
        self._postgres: EmbeddedPostgres | None = None
        # -b: the wire mode's settings (kafkaesque/cli/wire.py); None: the direct mode
        self.wire: WireSettings | None = None

    def embedded_postgres(self) -> EmbeddedPostgres:
        from storage_pg.embedded import EmbeddedPostgres

        if self._postgres is None:
            self._postgres = EmbeddedPostgres(Path(self.home))
        return self._postgres

    def archive_dsn(self, start: bool = True) -> str | None:
        """The archive of this command's Redis: the configured DSN, else, only with the
        embedded Redis, the embedded PostgreSQL's (an explicit --redis-url never gets the
        archive of the data directory, which belongs to the embedded Redis). With ``start``
        false the embedded one is used only if it was set up before (by ``serve`` or
        ``archive``): reading or producing does not create an archive, but uses one."""
        if self.pg_dsn:
            return self.pg_dsn
        if not self.embedded_redis():
            return None
        return self.embedded_archive_dsn(start)

    def required_archive_dsn(self) -> str:
        """The archive for ``serve`` and ``archive``: configured, or embedded with the
        embedded Redis (started, and set up on first use)."""
        dsn = self.archive_dsn(start=True)
        if dsn is None:
            raise click.UsageError(
                "with --redis-url the archive must be given too (--pg-dsn or "
                "KAFKAESQUE_PG_DSN): the embedded one belongs to the embedded Redis"
            )
        return dsn

    def embedded_archive_dsn(self, start: bool) -> str | None:
        """The embedded PostgreSQL's DSN; None when ``start`` is false and it was never
        set up."""
        embedded = self.embedded_postgres()
        if not start and not embedded.initialised():
            return None
        return embedded.ensure_started()

    def embedded_redis(self) -> bool:
        """Whether the Redis is the data directory's own (no URL, or its socket's)."""
        if self.redis_url is None:
            return True
        try:
            return self.redis_url == self.embedded().url
        except EmbeddedError:  # a data directory too deep for a socket has none
            return False

    def embedded(self) -> EmbeddedRedis:
        if self._redis is None:
            self._redis = EmbeddedRedis(Path(self.home))
        return self._redis

    def url(self, create: bool | None = None) -> str:
        """The Redis URL; the embedded server started if need be. Only with ``create``
        (default: whether the command is one of CREATING_COMMANDS) in a data directory
        that has no store yet: otherwise NoStore, and nothing created or started."""
        if self.redis_url is not None:
            return self.redis_url
        embedded = self.embedded()
        if create is None:
            name = command_name()
            create = name == "" or name in CREATING_COMMANDS
        if not create and not embedded.exists():
            raise NoStore(embedded.home)
        return embedded.ensure_started()

    def stop_started(self) -> None:
        """Stop the embedded servers this command started (it failed): unless a broker
        uses them meanwhile. A failure to stop is logged, not raised over the command's."""
        servers = [self._postgres, self._redis]
        started = [server for server in servers if server is not None and server.started]
        if not started or in_use(Path(self.home).absolute()):
            return
        for server in started:
            try:
                server.stop()
            except Exception as exc:  # the command's own error comes first
                log.warning("could not stop the server this command started: %s", exc)
            server.started = False

    def log(self, archive: bool = True, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Log:
        """The log on Redis (at most ``max_connections`` to it; requests beyond wait for
        one); with ``archive``, and an archive configured or set up before, tiered over
        it: old offsets read from it, offsets restored from it if Redis lost its data."""
        password = None if self.embedded_redis() else self.redis_password
        log = open_log(self.url(), max_connections, password)
        dsn = self.archive_dsn(start=False) if archive else None
        if dsn is not None:
            self.attach_archive(log, dsn)
        return log

    def attach_archive(self, log: Log, dsn: str) -> Archive:
        """Attach the archive at ``dsn`` (see storage_pg.tiered.Archive)."""
        from storage_pg.tiered import Archive, attach

        archive = Archive(dsn)
        self._archives.append(archive)
        attach(log, archive)
        return archive

    async def bind_archives(self) -> None:
        """Check now that each attached archive belongs to this Redis (ClusterMismatch
        otherwise), rather than at its first use, which a read may never reach."""
        for archive in self._archives:
            await archive.bind()

    async def aclose(self) -> None:
        """Close the archive connections the command opened."""
        while self._archives:
            await self._archives.pop().close()

    def groups(self, log: Log) -> GroupCoordinator:
        return GroupCoordinator(log)


pass_context = click.make_pass_decorator(Context)
