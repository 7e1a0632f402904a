"""Topics and records: create, topics, describe, delete, produce, consume, stop."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import click

from kafkaesque.cli.base import (
    Context,
    echo_table,
    group_id_option,
    key_values,
    main,
    one_line_errors,
    pass_context,
    run_async,
    topic_argument,
)
from kafkaesque.cli.line_consumer import Consumer
from kafkaesque.cli.line_producer import LineProducer
from kafkaesque.config.topic_config import (
    DEFAULT_PAGE_SIZE,
    MAX_PARTITIONS,
    MAX_SETTING,
    AlterOp,
    TopicConfig,
    altered,
)
from kafkaesque.config.topic_config import describe as describe_configs
from kafkaesque.errors import Code
from kafkaesque.hot.embedded import in_use
from kafkaesque.records.batch import Compression
from kafkaesque.tables import plural

# The --config option of create and alter: topic configs as KEY=VALUE.
config_option = click.option(
    "--config",
    "configs",
    multiple=True,
    callback=key_values,
    help="A Kafka topic config (repeatable), e.g. cleanup.policy=compact.",
)


@main.command()
@topic_argument
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), default=1, show_default=True)
@config_option
@click.option(
    "--page-size",
    type=click.IntRange(1, MAX_SETTING),
    help=f"Records per page; a full page closes (kafkaesque.page.size, {DEFAULT_PAGE_SIZE}).",
)
@click.option(
    "--ttl",
    type=click.IntRange(0, MAX_SETTING),
    help="Seconds a closed page is kept, 0 forever (retention.ms in seconds).",
)
@click.option(
    "--max-pages",
    type=click.IntRange(0, MAX_SETTING),
    help="Closed pages kept per partition, 0 no limit (kafkaesque.max.pages).",
)
@pass_context
@run_async
async def create(
    ctx: Context,
    topic: str,
    partitions: int,
    configs: dict[str, str],
    page_size: int | None,
    ttl: int | None,
    max_pages: int | None,
) -> None:
    """Create TOPIC."""
    config = TopicConfig(topic, partitions, page_size, ttl, max_pages, configs=configs)
    config.validate()
    log = ctx.log()
    if log.cold is not None:
        # There is an archive: retention must wait for it from the first record on. It
        # must answer first (a wrong --pg-dsn would hold every page back for good).
        await log.cold.start_offset(topic, 0)
        await log.enable_archiving()
    await log.create_topic(config)
    click.echo(f"created topic {topic} with {plural(partitions, 'partition')}", err=True)


@main.command()
@pass_context
@run_async
async def topics(ctx: Context) -> None:
    """List topics."""
    names = await ctx.log().list_topics()
    for name in names:
        click.echo(name)
    if not names:  # on stderr: stdout stays a list, empty
        click.echo("no topics", err=True)


@main.command()
@topic_argument
@pass_context
@run_async
async def describe(ctx: Context, topic: str) -> None:
    """Show TOPIC's config, Redis' memory headroom and, per partition, offsets, pages,
    bytes held, the broker leading it and its leader epoch."""
    log = ctx.log()
    config = await log.topic(topic)
    click.echo(f"topic       {config.name}")
    click.echo(f"partitions  {config.partitions}")
    click.echo(f"page size   {config.page_size} records")
    click.echo(f"ttl         {config.ttl or 'none'}{' s' if config.ttl else ''}")
    click.echo(f"max pages   {config.max_pages or 'no limit'}")
    for entry in describe_configs(config):
        if entry.source != "default":  # what was set, on the topic or for every topic
            origin = "topic" if entry.source == "topic" else "broker default"
            click.echo(f"config      {entry.name}={entry.value} ({origin})")
    click.echo(f"redis       {(await log.stores.memory_use()).describe()}")
    rows = []
    leaders = await log.leaders([(topic, p) for p in range(config.partitions)])
    for p, seen in enumerate(leaders):
        s = await log.state(topic, p)
        leader = seen[0] if seen is not None and seen[0] else "-"  # "-": no broker yet
        rows.append([p, s.log_start, s.log_end, s.pages, s.bytes, leader, s.leader_epoch])
    headers = ["partition", "start_offset", "end_offset", "pages", "bytes", "leader", "epoch"]
    echo_table(headers, rows)
    if log.cold is not None:
        for p, first, last in await log.cold.dropped_ranges(topic):
            click.echo(
                f"gap: partition {p} offsets {first}..{last} "
                "(dropped by retention before archiving)"
            )


@main.command()
@topic_argument
@pass_context
@run_async
async def delete(ctx: Context, topic: str) -> None:
    """Delete TOPIC and all its records."""
    log = ctx.log()
    await log.delete_topic(topic)
    await ctx.groups(log).admin.forget_topic(topic)
    click.echo(f"deleted topic {topic}", err=True)


@main.command()
@topic_argument
@click.option(
    "--partitions",
    type=click.IntRange(1, MAX_PARTITIONS),
    help="The new partition count: larger than the current one (partitions only grow).",
)
@config_option
@click.option(
    "--delete-config",
    "deleted",
    multiple=True,
    metavar="KEY",
    help="Return a topic config to its default (repeatable).",
)
@pass_context
@run_async
async def alter(
    ctx: Context,
    topic: str,
    partitions: int | None,
    configs: dict[str, str],
    deleted: tuple[str, ...],
) -> None:
    """Change TOPIC's configs or grow it to more partitions (as kafka-configs --alter and
    kafka-topics --alter --partitions)."""
    if partitions is None and not configs and not deleted:
        raise click.UsageError("nothing to change: give --partitions, --config or --delete-config")
    operations: list[tuple[AlterOp, str, str | None]] = [
        (AlterOp.SET, k, v) for k, v in configs.items()
    ]
    operations += [(AlterOp.DELETE, k, None) for k in deleted]
    log = ctx.log()
    before = await log.topic(topic)

    def change(config: TopicConfig) -> TopicConfig:
        changed = altered(config, operations)
        return changed if partitions is None else changed.grown(partitions)

    after = await log.configure_topic(topic, change)
    if after.partitions != before.partitions:
        click.echo(
            f"topic {topic}: {before.partitions} -> {plural(after.partitions, 'partition')}",
            err=True,
        )
    for name in sorted({k for _, k, _ in operations}):
        click.echo(f"topic {topic}: {name}={after.value(name)} ({after.source(name)})", err=True)


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
    await ctx.bind_archives()  # a read from offset 0 may never touch the archive
    config = await log.topic(topic)
    if partition is not None and partition >= config.partitions:
        raise click.BadParameter(
            f"topic {topic} has {plural(config.partitions, 'partition')}", param_hint="--partition"
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
        f"produced {plural(summary.records, 'record')} ({plural(summary.bytes, 'byte')}) "
        f"to {topic} "
        f"in {summary.seconds:.2f} s ({rate:,.0f} records/s)",
        err=True,
    )


def _file_size(file: Any) -> int | None:
    """The size of a regular file, None for pipes and terminals."""
    try:
        st = os.fstat(file.fileno())
    except (OSError, AttributeError, ValueError):
        return None
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
@click.option("--max-records", type=click.IntRange(1), help="Stop after N records.")
@click.option(
    "--on-truncation",
    type=click.Choice(["error", "rewind"]),
    default="error",
    show_default=True,
    help="When Redis lost records already read (the log was truncated below the position): "
    "stop with an error, or rewind to the truncation point and read the new records there.",
)
@click.option(
    "--group",
    callback=group_id_option,
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
@click.option(
    "--isolation",
    type=click.Choice(["read_committed", "read_uncommitted"]),
    default="read_committed",
    show_default=True,
    help="read_committed: only records of committed transactions, up to the last stable "
    "offset; read_uncommitted: every record, up to the log end.",
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
    on_truncation: str,
    group: str | None,
    fmt: str,
    isolation: str,
) -> None:
    """Print TOPIC's records, one per line, from the beginning to the end of the log."""
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    log = ctx.log()
    await ctx.bind_archives()  # a read from offset 0 may never touch the archive
    config = await log.topic(topic)
    if partition is not None and partition >= config.partitions:
        raise click.BadParameter(
            f"topic {topic} has {plural(config.partitions, 'partition')}", param_hint="--partition"
        )
    partitions = range(config.partitions) if partition is None else [partition]
    committed = {}
    epochs: dict[int, int] = {}
    commit = None
    if group is not None:
        coordinator = ctx.groups(log)
        existing = await coordinator.store.load(group)
        if existing is not None and existing.members:
            raise click.ClickException(f"group {group} has active members; use another group")
        for (t, p), c in (await coordinator.admin.committed(group)).items():
            if t == topic:
                committed[p] = c.offset
                if c.leader_epoch >= 0:  # checked at the first read, as Kafka's clients do
                    epochs[p] = c.leader_epoch

        async def commit(offsets: dict[int, int], read_epochs: dict[int, int]) -> None:
            stored: dict[tuple[str, int], tuple[int, str | None, int]] = {
                (topic, p): (o, "", read_epochs.get(p, -1)) for p, o in offsets.items()
            }
            if await coordinator.admin.commit(group, -1, "", None, stored) != Code.NONE:
                raise click.ClickException(f"group {group} gained members; stopped")

    offsets = {}
    for p in partitions:
        if offset is not None:
            offsets[p] = offset
        elif p in committed and not from_beginning:
            offsets[p] = committed[p]
        elif log.cold is not None:
            # From the first offset DeleteRecords left (0 if none): a gap at the start
            # (records retention dropped before archiving) is read across and reported.
            offsets[p] = (await log.state(topic, p)).floor
        else:
            offsets[p] = await log.earliest_offset(topic, p)
    # The archive leaves out transaction markers and aborted records too: only a gap it
    # recorded (retention dropped records before archiving) is news.
    dropped = [] if log.cold is None else await log.cold.dropped_ranges(topic)

    def report_gap(p: int, first: int, last: int) -> None:
        if any(dp == p and df <= last and first <= dl for dp, df, dl in dropped):
            click.echo(
                f"offsets {first}..{last} of {topic}[{p}] were dropped by retention before "
                "archiving: not in the log",
                err=True,
            )

    consumer = Consumer(
        log,
        topic,
        offsets,
        fetch_size=fetch_size,
        fmt=fmt,
        commit=commit,
        whole_topic=partition is None,
        # A compact topic's offsets have gaps wherever compaction removed records.
        on_gap=None if config.compact else report_gap,
        epochs={p: e for p, e in epochs.items() if p in offsets},
        read_committed=isolation == "read_committed",
        on_truncation=None
        if on_truncation == "error"
        else lambda p, at, was: click.echo(
            f"{topic}[{p}] was truncated at offset {at} (Redis lost records it had not "
            f"archived): reading again from {at}, where {was - at} offsets read before now "
            "hold other records",
            err=True,
        ),
    )
    out = sys.stdout.buffer
    try:
        await consumer.run(out, follow=follow, max_records=max_records)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


@main.command()
@click.option("--force", is_flag=True, help="Stop them even while a broker uses them.")
@pass_context
def stop(ctx: Context, force: bool) -> None:
    """Stop the embedded servers of the data directory."""
    home = Path(ctx.home)
    if not home.is_dir():
        click.echo("nothing was running", err=True)
        return
    if in_use(home) and not force:
        raise click.ClickException(
            f"a broker (kafkaesque serve) is using the servers of {click.format_filename(home)}: "
            "stop it first (they stop with it under scripts/run.sh), or use stop --force"
        )
    stopped = []
    with one_line_errors():
        if ctx.embedded_postgres().stop():
            stopped.append("PostgreSQL")
        if ctx.embedded().stop():
            stopped.append("redis-server")
    click.echo(f"stopped {' and '.join(stopped)}" if stopped else "nothing was running", err=True)
