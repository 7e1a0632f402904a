"""The ``kafkaesque`` command line: the composition root that wires the parts together."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import click
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from kafkaesque.consume import Consumer
from kafkaesque.embedded import EmbeddedError, EmbeddedRedis, default_home
from kafkaesque.groups import GroupCoordinator, GroupError, decode_consumer_assignment
from kafkaesque.log import DEFAULT_PAGE_SIZE, Log, LogError, TopicConfig, check_topic_name
from kafkaesque.produce import LineProducer
from kafkaesque.records import Compression

log = logging.getLogger("kafkaesque")


class Context:
    """What every command needs: where Redis is, started on demand when embedded."""

    def __init__(self, redis_url: str | None, home: str | None) -> None:
        self.redis_url = redis_url
        self.home = default_home() if home is None else click.format_filename(home)

    def embedded(self) -> EmbeddedRedis:
        from pathlib import Path

        return EmbeddedRedis(Path(self.home))

    def url(self) -> str:
        return self.redis_url or self.embedded().ensure_started()

    def log(self) -> Log:
        return Log(redis.asyncio.Redis.from_url(self.url(), socket_connect_timeout=5))

    def groups(self, log: Log) -> GroupCoordinator:
        return GroupCoordinator(log.redis, namespace=log.ns)


def run_async(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Run an async command, turning expected failures into one line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return asyncio.run(fn(*args, **kwargs))
        except LogError as exc:
            raise click.ClickException(str(exc)) from None
        except RedisConnectionError as exc:
            raise click.ClickException(f"cannot reach Redis: {exc}") from None
        except RedisError as exc:
            raise click.ClickException(f"Redis error: {exc}") from None
        except EmbeddedError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper


def topic_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            check_topic_name(value)
        except LogError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    return click.argument("topic", callback=check)(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--redis-url",
    envvar="KAFKAESQUE_REDIS_URL",
    help="Redis to use (redis://host:port/db or unix:///path). "
    "Default: a private redis-server under the data directory.",
)
@click.option(
    "--home",
    envvar="KAFKAESQUE_HOME",
    type=click.Path(file_okay=False),
    help="Data directory of the embedded servers. Default: ./.kafkaesque",
)
@click.option("-v", "--verbose", is_flag=True, help="Log details to stderr.")
@click.version_option(package_name="kafkaesque")
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, home: str | None, verbose: bool) -> None:
    """A Kafka-compatible log service whose hot data lives in Redis."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    ctx.obj = Context(redis_url, home)


pass_context = click.make_pass_decorator(Context)


@main.command()
@topic_argument
@click.option("--partitions", type=click.IntRange(1, 10_000), default=1, show_default=True)
@click.option(
    "--page-size",
    type=click.IntRange(1),
    default=DEFAULT_PAGE_SIZE,
    show_default=True,
    help="Records per page; a full page closes.",
)
@click.option(
    "--ttl",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Seconds a closed page is kept (0: forever).",
)
@click.option(
    "--max-pages",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Closed pages kept per partition; older ones are dropped (0: no limit).",
)
@pass_context
@run_async
async def create(
    ctx: Context, topic: str, partitions: int, page_size: int, ttl: int, max_pages: int
) -> None:
    """Create TOPIC."""
    config = TopicConfig(topic, partitions, page_size, ttl, max_pages)
    await ctx.log().create_topic(config)
    click.echo(f"created topic {topic} with {partitions} partition(s)", err=True)


@main.command()
@pass_context
@run_async
async def topics(ctx: Context) -> None:
    """List topics."""
    for name in await ctx.log().list_topics():
        click.echo(name)


@main.command()
@topic_argument
@pass_context
@run_async
async def describe(ctx: Context, topic: str) -> None:
    """Show TOPIC's config and, per partition, offsets, pages and bytes held."""
    log = ctx.log()
    config = await log.topic(topic)
    click.echo(f"topic       {config.name}")
    click.echo(f"partitions  {config.partitions}")
    click.echo(f"page size   {config.page_size} records")
    click.echo(f"ttl         {config.ttl or 'none'}{' s' if config.ttl else ''}")
    click.echo(f"max pages   {config.max_pages or 'no limit'}")
    click.echo("partition  start_offset  end_offset  pages  bytes")
    for p in range(config.partitions):
        s = await log.state(topic, p)
        click.echo(f"{p:>9}  {s.log_start:>12}  {s.log_end:>10}  {s.pages:>5}  {s.bytes}")


@main.command()
@topic_argument
@pass_context
@run_async
async def delete(ctx: Context, topic: str) -> None:
    """Delete TOPIC and all its records."""
    await ctx.log().delete_topic(topic)
    click.echo(f"deleted topic {topic}", err=True)


@main.command()
@topic_argument
@click.argument("file", type=click.File("rb"), default="-")
@click.option("--batch-size", type=click.IntRange(1, 1_000_000), default=1024, show_default=True)
@click.option("--partition", type=click.IntRange(0), help="Send every record to this partition.")
@click.option(
    "--key-separator",
    help="Split each line at the first SEP into key and value (no SEP: null key).",
)
@click.option(
    "--compression",
    type=click.Choice([c.name.lower() for c in Compression]),
    default="none",
    show_default=True,
)
@pass_context
@run_async
async def produce(
    ctx: Context,
    topic: str,
    file: Any,
    batch_size: int,
    partition: int | None,
    key_separator: str | None,
    compression: str,
) -> None:
    """Append each line of FILE (default: stdin) to TOPIC as one record."""
    log = ctx.log()
    config = await log.topic(topic)
    if partition is not None and partition >= config.partitions:
        raise click.BadParameter(
            f"topic {topic} has {config.partitions} partition(s)", param_hint="--partition"
        )
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    producer = LineProducer(
        log,
        config,
        batch_size=batch_size,
        partition=partition,
        key_separator=None if key_separator is None else os.fsencode(key_separator),
        compression=Compression[compression.upper()],
    )
    size = _file_size(file)
    if size and sys.stderr.isatty():
        with click.progressbar(length=size, label="producing", file=sys.stderr) as bar:
            summary = await producer.produce(file, bar.update)
    else:
        summary = await producer.produce(file)
    rate = summary.records / summary.seconds if summary.seconds else 0.0
    click.echo(
        f"produced {summary.records} records ({summary.bytes} bytes) to {topic} "
        f"in {summary.seconds:.2f} s ({rate:,.0f} records/s)",
        err=True,
    )


def _file_size(file: Any) -> int | None:
    """The size of a regular file, None for pipes and terminals."""
    try:
        st = os.fstat(file.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    import stat

    return st.st_size if stat.S_ISREG(st.st_mode) else None


@main.command()
@topic_argument
@click.option(
    "--fetch-size",
    type=click.IntRange(1),
    default=1024,
    show_default=True,
    help="Records per fetch (whole batches: a fetch may return more).",
)
@click.option("--partition", type=click.IntRange(0), help="Read only this partition.")
@click.option("--offset", type=click.IntRange(0), help="Start at this offset (needs --partition).")
@click.option("--from-beginning", is_flag=True, help="Start at the log start (the default).")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records.")
@click.option("--max-records", type=click.IntRange(0), help="Stop after N records.")
@click.option(
    "--group",
    help="Start at GROUP's committed offsets and commit as records are printed.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["value", "offset", "json"]),
    default="value",
    show_default=True,
    help="value: the value; offset: partition TAB offset TAB value; json: all fields.",
)
@pass_context
@run_async
async def consume(
    ctx: Context,
    topic: str,
    fetch_size: int,
    partition: int | None,
    offset: int | None,
    from_beginning: bool,
    follow: bool,
    max_records: int | None,
    group: str | None,
    fmt: str,
) -> None:
    """Print TOPIC's records, one per line, from the beginning to the end of the log."""
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    log = ctx.log()
    config = await log.topic(topic)
    if partition is not None and partition >= config.partitions:
        raise click.BadParameter(
            f"topic {topic} has {config.partitions} partition(s)", param_hint="--partition"
        )
    partitions = range(config.partitions) if partition is None else [partition]
    committed = {}
    commit = None
    if group is not None:
        coordinator = ctx.groups(log)
        existing = await coordinator.load(group)
        if existing is not None and existing.members:
            raise click.ClickException(f"group {group} has active members; use another group")
        committed = {
            p: c.offset for (t, p), c in (await coordinator.committed(group)).items() if t == topic
        }

        async def commit(offsets: dict[int, int]) -> None:
            stored = {(topic, p): (o, "", -1) for p, o in offsets.items()}
            if await coordinator.commit(group, -1, "", None, stored) != GroupError.NONE:
                raise click.ClickException(f"group {group} gained members; stopped")

    offsets = {}
    for p in partitions:
        if offset is not None:
            offsets[p] = offset
        elif p in committed and not from_beginning:
            offsets[p] = committed[p]
        else:
            offsets[p] = await log.earliest_offset(topic, p)
    consumer = Consumer(log, topic, offsets, fetch_size=fetch_size, fmt=fmt, commit=commit)
    out = sys.stdout.buffer
    try:
        await consumer.run(out, follow=follow, max_records=max_records)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def host_port(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    """Parse HOST:PORT (IPv6 hosts in brackets)."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


@main.command()
@click.option(
    "--listen",
    envvar="KAFKAESQUE_LISTEN",
    default="127.0.0.1:9092",
    show_default=True,
    callback=host_port,
    help="Address to accept Kafka clients on (env KAFKAESQUE_LISTEN).",
)
@click.option(
    "--advertised-host",
    help="Host given to clients in metadata. Default: the listen host, or 127.0.0.1 "
    "when listening on all interfaces.",
)
@click.option(
    "--auto-create-topics/--no-auto-create-topics",
    default=True,
    show_default=True,
    help="Create unknown topics when a client's metadata request allows it.",
)
@click.option("--default-partitions", type=click.IntRange(1, 10_000), default=1, show_default=True)
@click.option("--metrics", callback=host_port, help="Serve Prometheus metrics on HOST:PORT.")
@click.option(
    "--group-initial-rebalance-delay-ms",
    type=click.IntRange(0),
    default=3000,
    show_default=True,
    help="How long a new group waits for more members before its first rebalance.",
)
@click.option(
    "--group-min-session-timeout-ms",
    type=click.IntRange(1),
    default=6000,
    show_default=True,
    help="Smallest session timeout a consumer may ask for.",
)
@pass_context
def serve(
    ctx: Context,
    listen: tuple[str, int],
    advertised_host: str | None,
    auto_create_topics: bool,
    default_partitions: int,
    metrics: tuple[str, int] | None,
    group_initial_rebalance_delay_ms: int,
    group_min_session_timeout_ms: int,
) -> None:
    """Serve the Kafka protocol: unmodified Kafka clients produce and fetch here."""
    from kafkaesque.groups import CoordinatorConfig
    from wire.broker import BrokerConfig
    from wire.server import run

    host, port = listen
    if advertised_host is None:
        advertised_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if logging.getLogger().level > logging.INFO:
        logging.getLogger().setLevel(logging.INFO)
    config = BrokerConfig(
        host=advertised_host,
        port=port,
        auto_create_topics=auto_create_topics,
        default_partitions=default_partitions,
        groups=CoordinatorConfig(
            initial_rebalance_delay_ms=group_initial_rebalance_delay_ms,
            min_session_timeout_ms=group_min_session_timeout_ms,
        ),
    )
    try:
        url = ctx.url()
        asyncio.run(run(url, host, port, config, metrics))
    except EmbeddedError as exc:
        raise click.ClickException(str(exc)) from None
    except RedisConnectionError as exc:
        raise click.ClickException(f"cannot reach Redis: {exc}") from None
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    except KeyboardInterrupt:
        sys.exit(130)


@main.command("groups")
@pass_context
@run_async
async def list_groups(ctx: Context) -> None:
    """List consumer groups."""
    for name in await ctx.groups(ctx.log()).list_groups():
        click.echo(name)


@main.command("group")
@click.argument("group")
@click.argument("topic", required=False)
@click.option(
    "--reset-offsets",
    metavar="earliest|latest|OFFSET",
    help="Set GROUP's committed offsets for every partition of TOPIC (the group must have "
    "no members).",
)
@pass_context
@run_async
async def describe_group(
    ctx: Context, group: str, topic: str | None, reset_offsets: str | None
) -> None:
    """Show GROUP: state, members, and per partition its committed offset, end offset and lag."""
    log = ctx.log()
    coordinator = ctx.groups(log)
    if reset_offsets is not None:
        if topic is None:
            raise click.UsageError("--reset-offsets needs a TOPIC")
        if reset_offsets not in ("earliest", "latest") and not reset_offsets.isdigit():
            raise click.BadParameter(
                "use earliest, latest or an offset", param_hint="--reset-offsets"
            )
        config = await log.topic(topic)
        new = {}
        for p in range(config.partitions):
            state = await log.state(topic, p)
            if reset_offsets == "earliest":
                new[topic, p] = state.log_start
            elif reset_offsets == "latest":
                new[topic, p] = state.log_end
            else:  # clamped to what the partition holds, as Kafka's tool does
                new[topic, p] = min(max(int(reset_offsets), state.log_start), state.log_end)
        await coordinator.reset_offsets(group, new)
        click.echo(f"reset {len(new)} partition(s) of {topic} for group {group}", err=True)
    loaded = await coordinator.load(group)
    if loaded is None:
        raise click.ClickException(f"no such group: {group}")
    committed = await coordinator.committed(group)
    owners: dict[tuple[str, int], str] = {}
    click.echo(f"group       {group}")
    click.echo(f"state       {loaded.state}")
    click.echo(f"protocol    {loaded.protocol_type or '-'}/{loaded.protocol or '-'}")
    click.echo(f"generation  {loaded.generation}")
    click.echo(f"members     {len(loaded.members)}")
    for m in loaded.members.values():
        assigned = (
            decode_consumer_assignment(m.assignment) if loaded.protocol_type == "consumer" else None
        )
        for t, parts in (assigned or {}).items():
            owners.update({(t, p): m.member_id for p in parts})
        shown = ", ".join(f"{t}{sorted(ps)}" for t, ps in (assigned or {}).items()) or "-"
        click.echo(f"  {m.member_id}  {m.client_host or '-'}  {shown}")
    rows = sorted(set(committed) | set(owners))
    if topic is not None:
        rows = [r for r in rows if r[0] == topic]
    click.echo("topic  partition  committed  end  lag  member")
    for t, p in rows:
        try:
            end = (await log.state(t, p)).log_end
        except LogError:
            end = None
        c = committed.get((t, p))
        lag = end - c.offset if c is not None and end is not None else None
        click.echo(
            f"{t}  {p}  {c.offset if c else '-'}  {'-' if end is None else end}  "
            f"{'-' if lag is None else lag}  {owners.get((t, p), '-')}"
        )


@main.command()
@pass_context
def stop(ctx: Context) -> None:
    """Stop the embedded servers of the data directory."""
    try:
        stopped = ctx.embedded().stop()
    except EmbeddedError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("stopped redis-server" if stopped else "nothing was running", err=True)
