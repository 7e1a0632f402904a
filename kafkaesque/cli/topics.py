"""Topics: create, topics, describe, delete, alter."""

from __future__ import annotations

import click

from kafkaesque.cli.base import (
    Context,
    echo_table,
    key_values,
    main,
    pass_context,
    run_async,
    topic_argument,
)
from kafkaesque.config.topic_config import (
    DEFAULT_PAGE_SIZE,
    MAX_PARTITIONS,
    MAX_SETTING,
    AlterOp,
    TopicConfig,
    altered,
)
from kafkaesque.config.topic_config import describe as describe_configs
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
