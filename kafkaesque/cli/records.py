"""Records: delete-records (Kafka's kafka-delete-records)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from kafkaesque.cli.base import Context, main, pass_context, run_async, topic_argument
from kafkaesque.cli.options import check_partitions
from kafkaesque.cli.wire import wire_client
from kafkaesque.hot.log import HIGH_WATERMARK
from kafkaesque.tables import plural

if TYPE_CHECKING:
    from kafkaesque.cli.wire_client import WireClient

_END = "end"


def before_option(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """An offset >= 0, or 'end' (also -1, as Kafka's tool): the log end."""
    if value == _END:
        return HIGH_WATERMARK
    try:
        offset = int(value)
    except ValueError:
        offset = None
    if offset is None or offset < HIGH_WATERMARK:
        raise click.BadParameter(f"expected an offset >= 0 or '{_END}', got {value!r}")
    return offset


@main.command("delete-records")
@topic_argument
@click.option(
    "--partition",
    "partitions",
    type=click.IntRange(0),
    multiple=True,
    help="The partition (repeatable). Default: every partition.",
)
@click.option(
    "--before",
    required=True,
    callback=before_option,
    metavar="OFFSET|end",
    help="Delete the records below OFFSET, which becomes the log start; 'end' (or -1): "
    "every record up to the log end.",
)
@pass_context
@run_async
async def delete_records(
    ctx: Context, topic: str, partitions: tuple[int, ...], before: int
) -> None:
    """Delete TOPIC's records below an offset, in Redis and in the archive, for good (as
    kafka-delete-records). A partition whose log already starts at or after it stays; an
    offset past any partition's end changes none."""
    if ctx.wire is not None:
        over_the_wire(wire_client(ctx.wire), topic, partitions, before)
        return
    log = ctx.log()
    config = await log.topic(topic)
    wanted = sorted(set(partitions)) or range(config.partitions)
    check_partitions(topic, config.partitions, *wanted)
    # All or nothing: every partition is checked before any is changed, so a refusal
    # leaves the topic as it was (an offset past one partition's end refused the others
    # after the first had been cut). Log ends only grow, so what passes stays valid.
    if before != HIGH_WATERMARK:
        ends = await log.log_ends(topic, wanted)
        refuse_past_ends(topic, before, zip(wanted, ends, strict=True))
    for p in wanted:
        was = await log.earliest_offset(topic, p)
        now = await log.delete_records(topic, p, before)
        click.echo(f"{topic}[{p}]: log start {was} -> {now}", err=True)


def refuse_past_ends(topic: str, before: int, ends: Iterable[tuple[int, int]]) -> None:
    """Refuse (nothing deleted) an offset past any partition's log end (partition, end)."""
    past = [(p, end) for p, end in ends if before > end]
    if past:
        listed = ", ".join(f"{topic}[{p}] ends at {end}" for p, end in past)
        raise click.ClickException(
            f"offset {before} is past the log end of {plural(len(past), 'partition')} "
            f"({listed}); nothing was deleted"
        )


def over_the_wire(client: WireClient, topic: str, partitions: tuple[int, ...], before: int) -> None:
    """delete-records in wire mode (DeleteRecords): the same checks first, all or nothing."""
    count = client.partition_count(topic)
    wanted = sorted(set(partitions)) or list(range(count))
    check_partitions(topic, count, *wanted)
    tps = [(topic, p) for p in wanted]
    if before != HIGH_WATERMARK:
        ends = client.list_offsets(tps, "latest")
        refuse_past_ends(topic, before, [(p, ends[topic, p].offset) for p in wanted])
    starts = client.list_offsets(tps, "earliest")
    now = client.delete_records(topic, {p: before for p in wanted})
    for p in wanted:
        click.echo(f"{topic}[{p}]: log start {starts[topic, p].offset} -> {now[p]}", err=True)
