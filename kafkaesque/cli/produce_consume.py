"""Records from the command line: produce and consume (as kafka-console-producer and
-consumer)."""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

import click

from kafkaesque.cli.base import (
    Context,
    group_id_option,
    main,
    pass_context,
    run_async,
    topic_argument,
)
from kafkaesque.cli.line_consumer import Consumer
from kafkaesque.cli.line_producer import LineProducer
from kafkaesque.errors import Code
from kafkaesque.records.batch import Compression
from kafkaesque.tables import plural


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
