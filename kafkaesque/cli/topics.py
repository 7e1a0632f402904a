"""Topics: create, topics, describe, delete, alter."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from kafkaesque.cli.base import (
    Context,
    key_values,
    main,
    pass_context,
    run_async,
    topic_argument,
)
from kafkaesque.cli.options import number_option
from kafkaesque.cli.output import JSON, echo_document, echo_rows, format_option, kafka_uuid
from kafkaesque.cli.wire import wire_client
from kafkaesque.config.topic_config import (
    DEFAULT_PAGE_SIZE,
    MAX_PARTITIONS,
    MAX_SETTING,
    AlterOp,
    TopicConfig,
    altered,
)
from kafkaesque.config.topic_config import describe as describe_configs
from kafkaesque.errors import InvalidConfig
from kafkaesque.hot.log import Log
from kafkaesque.tables import json_rows, plural

if TYPE_CHECKING:
    from kafkaesque.cli.wire_client import TopicInfo


@contextlib.contextmanager
def bad_config_is_usage_error() -> Iterator[None]:
    """A --config the topic configs refuse (unknown, or a bad value) is a usage mistake:
    exit code 2, as any other bad option."""
    try:
        yield
    except InvalidConfig as exc:
        raise click.BadParameter(str(exc), param_hint="--config") from None


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
@number_option("--partitions", 1, low=1, high=MAX_PARTITIONS)
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
    if ctx.wire is not None:
        settings = dict(configs)
        for name, value in (
            ("kafkaesque.page.size", page_size),
            ("retention.ms", None if ttl is None else ttl * 1000 or -1),
            ("kafkaesque.max.pages", max_pages),
        ):
            if value is not None:
                settings[name] = str(value)
        wire_client(ctx.wire).create_topic(topic, partitions, settings)
        click.echo(f"created topic {topic} with {plural(partitions, 'partition')}", err=True)
        return
    config = TopicConfig(topic, partitions, page_size, ttl, max_pages, configs=configs)
    with bad_config_is_usage_error():
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
@format_option
@pass_context
@run_async
async def topics(ctx: Context, output_format: str) -> None:
    """List topics (JSON: name, partitions, topic id)."""
    details = output_format == JSON
    if ctx.wire is not None:
        rows = wire_client(ctx.wire).topic_rows(details)
    else:
        rows = await topic_rows(ctx.log(), details)
    if details:
        rows = [row for row in rows if row[1] is not None]  # deleted meanwhile
        echo_rows(output_format, ["NAME", "PARTITIONS", "TOPIC ID"], rows)
        return
    for row in rows:
        click.echo(row[0])
    if not rows:  # on stderr: stdout stays a list, empty
        click.echo("no topics", err=True)


async def topic_rows(log: Log, details: bool) -> list[list[object]]:
    """Every topic: [name, partitions, topic id] (with ``details``; else the name and
    None; None too for a topic deleted meanwhile)."""
    names = await log.list_topics()
    if not details:
        return [[n, None, None] for n in names]
    configs = {c.name: c for c in await log.topic_configs()}
    return [
        [n, configs[n].partitions, kafka_uuid(configs[n].topic_id)]
        if n in configs
        else [n, None, None]
        for n in names
    ]


@main.command()
@topic_argument
@format_option
@pass_context
@run_async
async def describe(ctx: Context, topic: str, output_format: str) -> None:
    """Show TOPIC's config, the cluster id, Redis' memory headroom and, per partition,
    offsets, pages, bytes held, the broker leading it and its leader epoch."""
    if ctx.wire is not None:
        document = wire_document(wire_client(ctx.wire).describe_topic(topic))
    else:
        document = await topic_document(ctx.log(), topic)
    show_topic(document, output_format)


PARTITION_HEADERS = [
    "partition",
    "start_offset",
    "end_offset",
    "pages",
    "bytes",
    "leader",
    "epoch",
]


async def topic_document(log: Log, topic: str) -> dict[str, Any]:
    """describe's document, from the log (direct mode)."""
    config = await log.topic(topic)
    cluster = await log.stores.cluster_id()
    memory = (await log.stores.memory_use()).describe()
    configs = [
        (entry.name, entry.value, "topic" if entry.source == "topic" else "broker default")
        for entry in describe_configs(config)
        if entry.source != "default"  # what was set, on the topic or for every topic
    ]
    rows = []
    leaders = await log.leaders([(topic, p) for p in range(config.partitions)])
    for p, seen in enumerate(leaders):
        s = await log.state(topic, p)
        # None: no broker yet
        leader = int(seen[0]) if seen is not None and str(seen[0]).isdigit() else None
        rows.append([p, s.log_start, s.log_end, s.pages, s.bytes, leader, s.leader_epoch])
    gaps = [] if log.cold is None else await log.cold.dropped_ranges(topic)
    return {
        "topic": config.name,
        "topic_id": kafka_uuid(config.topic_id),
        "cluster_id": cluster,
        "partitions": config.partitions,
        "page_size": config.page_size,
        "ttl_s": config.ttl or None,
        "max_pages": config.max_pages or None,
        "configs": [{"name": n, "value": v, "source": o} for n, v, o in configs],
        "redis": memory,
        "partition_states": json_rows(PARTITION_HEADERS, rows),
        "gaps": [{"partition": p, "first": f, "last": last} for p, f, last in gaps],
    }


def wire_document(info: TopicInfo) -> dict[str, Any]:
    """describe's document, from what the Kafka admin API tells (wire mode): no Redis
    memory, pages, bytes or archive gaps (null); the kafkaesque settings from the topic's
    configs, where the broker has them."""
    values = {name: value for name, value, _ in info.configs}

    def number(name: str) -> int | None:
        try:
            return int(values[name])
        except (KeyError, ValueError):
            return None

    retention = number("retention.ms")
    rows = [[p.partition, p.start, p.end, None, None, p.leader, p.epoch] for p in info.partitions]
    return {
        "topic": info.name,
        "topic_id": info.topic_id,
        "cluster_id": info.cluster_id,
        "partitions": len(info.partitions),
        "page_size": number("kafkaesque.page.size"),
        "ttl_s": (retention // 1000 or None) if retention is not None and retention > 0 else None,
        "max_pages": number("kafkaesque.max.pages") or None,
        "configs": [
            {"name": n, "value": v, "source": o} for n, v, o in info.configs if o != "default"
        ],
        "redis": None,
        "partition_states": json_rows(PARTITION_HEADERS, rows),
        "gaps": [],
    }


def show_topic(document: dict[str, Any], output_format: str) -> None:
    """describe's output: the document as JSON, or for people."""

    def text() -> None:
        click.echo(f"topic       {document['topic']}")
        click.echo(f"topic id    {document['topic_id']}")
        click.echo(f"cluster id  {document['cluster_id']}")
        click.echo(f"partitions  {document['partitions']}")
        if document["page_size"] is not None:
            click.echo(f"page size   {document['page_size']} records")
        ttl = document["ttl_s"]
        click.echo(f"ttl         {ttl or 'none'}{' s' if ttl else ''}")
        click.echo(f"max pages   {document['max_pages'] or 'no limit'}")
        for entry in document["configs"]:
            click.echo(f"config      {entry['name']}={entry['value']} ({entry['source']})")
        if document["redis"] is not None:
            click.echo(f"redis       {document['redis']}")
        rows = [list(row.values()) for row in document["partition_states"]]
        echo_rows(output_format, PARTITION_HEADERS, rows)
        for gap in document["gaps"]:
            click.echo(
                f"gap: partition {gap['partition']} offsets {gap['first']}..{gap['last']} "
                "(dropped by retention before archiving)"
            )

    echo_document(output_format, document, text)


@main.command()
@topic_argument
@pass_context
@run_async
async def delete(ctx: Context, topic: str) -> None:
    """Delete TOPIC and all its records."""
    if ctx.wire is not None:
        wire_client(ctx.wire).delete_topic(topic)
        click.echo(f"deleted topic {topic}", err=True)
        return
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
    if ctx.wire is not None:
        client = wire_client(ctx.wire)
        count = client.partition_count(topic)
        client.alter_topic(topic, partitions, configs, deleted)
        if partitions is not None and partitions != count:
            click.echo(f"topic {topic}: {count} -> {plural(partitions, 'partition')}", err=True)
        if operations:
            now = client.topic_configs(topic)
            for name in sorted({k for _, k, _ in operations}):
                value, source = now.get(name, ("-", "default"))
                click.echo(f"topic {topic}: {name}={value} ({source})", err=True)
        return
    log = ctx.log()
    before = await log.topic(topic)
    with bad_config_is_usage_error():
        altered(before, operations)  # the options' own mistakes, before any change

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
