"""The command line's shared parts: the click group, the context, error handling."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import sys
import urllib.parse
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from kafkaesque.cli.wire import WireSettings, bootstrap_option, wire_settings
from kafkaesque.config.topic_config import check_topic_name
from kafkaesque.errors import KafkaesqueError
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.connect import (
    DEFAULT_MAX_CONNECTIONS,
    SENTINEL_FORM,
    SENTINEL_SCHEME,
    check_url,
    parse_sentinel_url,
    redis_client,
)
from kafkaesque.hot.embedded import EmbeddedError, EmbeddedRedis, NoStore, default_home, in_use
from kafkaesque.hot.log import Log
from kafkaesque.hot.outage import REDIS
from kafkaesque.hot.redis_errors import failure_message as redis_failure_message
from kafkaesque.tables import format_table

if TYPE_CHECKING:
    from storage_pg.embedded import EmbeddedPostgres
    from storage_pg.tiered import Archive

# A click command's function, as its option decorators take and return it.
Command = TypeVar("Command", bound=Callable[..., Any])

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
        log = Log(redis_client(self.url(), max_connections, password))
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


def run_async(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Run an async command, turning expected failures into one line and exit code 1."""

    async def run_and_close(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        finally:
            context = click.get_current_context(silent=True)
            if context is not None and (obj := context.find_object(Context)) is not None:
                await obj.aclose()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with one_line_errors():
            return asyncio.run(run_and_close(*args, **kwargs))

    return wrapper


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """The one place the CLI turns expected failures into one line on stderr and exit
    code 1 (130 on Ctrl-C); anything else is a bug and keeps its traceback."""
    try:
        yield
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        raise  # the reader went away (`| head`): click exits quietly
    except click.ClickException:
        raise
    except Exception as exc:
        message = failure_message(exc)
        if message is None:
            raise
        raise click.ClickException(message) from None


def failure_message(exc: BaseException) -> str | None:
    """One line for people about an expected failure; None for anything else."""
    if isinstance(exc, KafkaesqueError | EmbeddedError):
        return str(exc)
    redis_failure = redis_failure_message(exc)
    if redis_failure is not None:
        return redis_failure
    # The archive's and Spark's modules are loaded only by the commands that use them.
    if "storage_pg" in sys.modules:
        from storage_pg.pool import describe_failure

        message = describe_failure(exc)
        if message is not None:
            return message
    if "storage_pg.spark" in sys.modules:
        from storage_pg.spark import SparkJobError

        if isinstance(exc, SparkJobError):
            return str(exc)
    if isinstance(exc, OSError):
        # Reading the input, the data directory, listening on a port, ...
        return exc.strerror if exc.filename is None and exc.strerror else str(exc)
    return None


def group_id_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A consumer group id: any non-empty string, as Kafka (which answers an empty one
    with INVALID_GROUP_ID)."""
    if value == "":
        raise click.BadParameter("a group id must not be empty")
    return value


def key_values(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    """Repeated KEY=VALUE options (Kafka configs) as a dict; a key given twice is refused."""
    settings: dict[str, str] = {}
    for item in value:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        if key.strip() in settings:
            raise click.BadParameter(f"{key.strip()} is given twice")
        settings[key.strip()] = text.strip()
    return settings


def topic_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            check_topic_name(value)
        except KafkaesqueError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    return click.argument("topic", callback=check)(fn)


class OneLineUsageError(click.ClickException):
    """A usage mistake told in one line (click's own takes four), exit code 2."""

    exit_code = 2

    def __init__(self, error: click.UsageError) -> None:
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
        super().__init__(error.format_message() + hint)


class Commands(click.Group):
    """The top-level group: usage errors of every command come out as one line; a command
    that fails stops the embedded servers it started; Redis going away is a command's
    error, not a retry (only ``serve`` retries, once it reached Redis: see REDIS)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        retrying, stopped = REDIS.retrying, REDIS.stopped
        REDIS.retrying = False
        try:
            return super().invoke(ctx)
        except BaseException as exc:
            if _failed(exc) and isinstance(ctx.obj, Context):
                ctx.obj.stop_started()
            if isinstance(exc, click.UsageError):
                raise OneLineUsageError(exc) from None
            raise
        finally:
            REDIS.retrying, REDIS.stopped = retrying, stopped


def _failed(exc: BaseException) -> bool:
    """Whether the command failed: not when it exits 0, is interrupted (Ctrl-C, 130) or
    its reader went away (``| head``)."""
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code != 0
    if isinstance(exc, SystemExit):
        return exc.code not in (None, 0, 130)
    return not isinstance(exc, KeyboardInterrupt | BrokenPipeError)


def url_option(*schemes: str, form: str) -> Callable[..., str | None]:
    """An option callback checking a URL's scheme and port now, so a typo is a usage
    error rather than a traceback when the command connects."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        if value.startswith(SENTINEL_SCHEME + "://") and SENTINEL_SCHEME in schemes:
            try:
                parse_sentinel_url(value)
            except ValueError as exc:  # its message never holds a password
                raise click.BadParameter(str(exc)) from None
            return value
        try:
            url = urllib.parse.urlsplit(value)  # ValueError: a broken [IPv6] host
            # several host:port pairs (libpq's failover form) are left to the driver
            port = None if "," in url.netloc else url.port  # ValueError: not a port number
            valid = url.scheme in schemes and port != 0
            if url.scheme in ("redis", "rediss", "unix"):
                check_url(value)  # ValueError: a bad db or option
        except ValueError:  # also a port that is not a number, or out of 0..65535
            valid = False
        if not valid:
            shown = re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", value)  # never echo a password
            raise click.BadParameter(f"expected {form}, got {shown!r}")
        return value

    return check


def home_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The data directory may be created, but only in a directory that exists: a typo in
    its parent is an error, not a new tree with a server running in it."""
    if value is not None:
        parent = Path(value).absolute().parent
        if not parent.is_dir():
            shown = click.format_filename(parent)
            what = "is not a directory" if parent.exists() else "does not exist"
            raise click.BadParameter(f"{shown} {what}; the data directory goes in an existing one")
    return value


# The check every --pg-dsn option (global, archive, spark) runs.
check_pg_dsn = url_option("postgresql", "postgres", form="postgresql://user:password@host:port/db")


def pg_dsn_option(help: str) -> Callable[[Command], Command]:
    """The --pg-dsn option (global, archive, spark): the archive's DSN, checked now, also
    from KAFKAESQUE_PG_DSN; ``help`` says what it defaults to there."""
    return click.option("--pg-dsn", envvar="KAFKAESQUE_PG_DSN", callback=check_pg_dsn, help=help)


def option_group(*decorators: Callable[[Command], Command]) -> Callable[[Command], Command]:
    """One decorator applying ``decorators`` (click options) as if stacked above the
    command in the order given: a group of options several commands take."""

    def apply(command: Command) -> Command:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--redis-url",
    envvar="KAFKAESQUE_REDIS_URL",
    callback=url_option(
        "redis",
        "rediss",
        "unix",
        "redis+cluster",
        "rediss+cluster",
        SENTINEL_SCHEME,
        form="redis://host:port/db, rediss://..., unix:///path, redis+cluster://host:port,... "
        f"or {SENTINEL_FORM}",
    ),
    help="Redis to use (redis://host:port/db or unix:///path; a Redis Cluster: "
    "redis+cluster://host:port,host:port; the primary Sentinel names: "
    f"{SENTINEL_FORM}[?password=...&sentinel_password=...]). "
    "Default: a private Valkey server under the data directory.",
)
@click.option(
    "--home",
    envvar="KAFKAESQUE_HOME",
    type=click.Path(file_okay=False),
    callback=home_option,
    help="Data directory of the embedded servers (created by the commands that write, "
    "in an existing directory). Default: $XDG_DATA_HOME/kafkaesque, else "
    "~/.local/share/kafkaesque, wherever the command runs.",
)
@pg_dsn_option(
    help="PostgreSQL archive (postgresql://user:password@host:port/db). Default: the "
    "private PostgreSQL under the data directory (serve and archive start it; other "
    "commands use it once it exists).",
)
@click.option(
    "--redis-password-file",
    type=click.File("r"),
    help="A file holding the password of --redis-url (its first line), when the URL has "
    "none. Default: the REDIS_PASSWORD environment variable, if set.",
)
@click.option(
    "-b",
    "--bootstrap-server",
    envvar="KAFKAESQUE_BOOTSTRAP_SERVER",
    callback=bootstrap_option,
    metavar="HOST:PORT[,...]",
    help="Speak the Kafka protocol to these brokers instead of reaching Redis (the wire "
    "mode of produce, consume, topics, describe, create, delete, alter, delete-records, "
    "groups, group, users, acls).",
)
@click.option(
    "--command-config",
    type=click.Path(exists=True, dir_okay=False),
    help="With -b: the client's properties, key=value lines in librdkafka's names "
    "(security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...).",
)
@click.option("-v", "--verbose", count=True, help="Log details to stderr (-v: INFO, -vv: DEBUG).")
@click.version_option(package_name="kafkaesque")
@click.pass_context
def main(
    ctx: click.Context,
    redis_url: str | None,
    home: str | None,
    pg_dsn: str | None,
    redis_password_file: Any,
    bootstrap_server: str | None,
    command_config: str | None,
    verbose: int,
) -> None:
    """A Kafka-compatible log service whose hot data lives in Redis."""
    levels = {0: logging.WARNING, 1: logging.INFO}
    logging.basicConfig(
        level=levels.get(verbose, logging.DEBUG),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    password = os.environ.get("REDIS_PASSWORD") or None
    if redis_password_file is not None:
        password = redis_password_file.readline().rstrip("\r\n")
    if redis_url is not None and urllib.parse.urlsplit(redis_url).password is not None:
        password = None  # the URL's own wins
    ctx.obj = Context(redis_url, home, pg_dsn, password)
    ctx.obj.wire = wire_settings(bootstrap_server, command_config, ctx.invoked_subcommand)


pass_context = click.make_pass_decorator(Context)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows as columns under their headers (numbers right-aligned)."""
    for line in format_table(headers, rows):
        click.echo(line)
