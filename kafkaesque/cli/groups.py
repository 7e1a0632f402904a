"""Consumer groups from the command line: groups, group (Kafka's kafka-consumer-groups
--list / --describe [--members] / --delete / --reset-offsets), for classic groups,
consumer (KIP-848) groups and share groups (KIP-932, share_groups.py) alike, through their
coordinators (or, with -b, a Kafka admin client). The descriptions are group_describe.py's,
the changes group_admin.py's."""

from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING, Any

import click

from kafkaesque.cli.base import Context, group_id_option, main, pass_context, run_async
from kafkaesque.cli.group_admin import delete_group, deleted, reset, reset_target
from kafkaesque.cli.group_describe import (
    describe,
    group_document,
    listing,
    load_group,
    partitions_of,
    show_all,
    show_one,
)
from kafkaesque.cli.group_view import GroupView
from kafkaesque.cli.output import echo_rows, format_option
from kafkaesque.cli.wire import no_wire_form, wire_groups

if TYPE_CHECKING:
    from kafkaesque.cli.wire_groups import WireGroups


# -- groups ---------------------------------------------------------------------------------


@main.command("groups")
@format_option
@pass_context
@run_async
async def list_groups(ctx: Context, output_format: str) -> None:
    """List the groups, classic, consumer (KIP-848) and share (KIP-932): state and type."""
    if ctx.wire is not None:
        rows = wire_groups(ctx.wire).list_groups()
    else:
        log = ctx.log()
        rows = [[g.group, g.state, g.type] for g in await listing(log, ctx.groups(log))]
    # on stderr: stdout stays a table, empty
    echo_rows(output_format, ["GROUP", "STATE", "TYPE"], rows, empty="no consumer groups")


# -- group ----------------------------------------------------------------------------------


def reset_spec(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if (
        value is not None
        and value not in ("earliest", "latest")
        and not re.fullmatch("[0-9]+", value)
    ):
        raise click.BadParameter("use earliest, latest or an offset")
    return value


def datetime_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """An ISO 8601 date and time as ms since the epoch; without a zone, local time (as
    kafka-consumer-groups --to-datetime)."""
    if value is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"expected an ISO 8601 date and time (2024-05-01T12:00:00Z), got {value!r}"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time
    return int(when.timestamp() * 1000)


@main.command("group")
@click.argument("group", required=False, callback=group_id_option)
@click.argument("topic", required=False)
@click.option(
    "--members", "show_members", is_flag=True, help="Show the members instead of the offsets."
)
@click.option("--all-groups", is_flag=True, help="Describe every group (no GROUP).")
@click.option(
    "--delete",
    is_flag=True,
    help="Delete GROUP and its committed offsets (refused while it has members).",
)
@click.option(
    "--reset-offsets",
    metavar="earliest|latest|OFFSET",
    callback=reset_spec,
    help="Reset GROUP's committed offsets of TOPIC (or --all-topics) to the log start, the "
    "log end, or OFFSET (clamped to the log). A dry run unless --execute; the group must "
    "have no members.",
)
@click.option(
    "--to-datetime",
    metavar="ISO8601",
    callback=datetime_option,
    help="Reset to the first offset at or after this time (2024-05-01T12:00:00Z; no zone: "
    "local time); the log end if none.",
)
@click.option(
    "--shift-by",
    type=int,
    metavar="N",
    help="Reset to the committed offset plus N (negative: back), clamped to the log.",
)
@click.option("--all-topics", is_flag=True, help="Reset every topic the group has offsets of.")
@click.option("--execute", is_flag=True, help="Apply the reset (default: only show it).")
@format_option
@pass_context
@run_async
async def describe_group(
    ctx: Context,
    group: str | None,
    topic: str | None,
    show_members: bool,
    all_groups: bool,
    delete: bool,
    reset_offsets: str | None,
    to_datetime: int | None,
    shift_by: int | None,
    all_topics: bool,
    execute: bool,
    output_format: str,
) -> None:
    """Show GROUP: its state, and per partition its committed offset, log start and end,
    lag and owner (as kafka-consumer-groups --describe); --members its members. Or reset
    its offsets (a dry run unless --execute), or --delete it."""
    resets = [
        o
        for o, v in (
            ("--reset-offsets", reset_offsets),
            ("--to-datetime", to_datetime),
            ("--shift-by", shift_by),
        )
        if v is not None
    ]
    if len(resets) > 1:
        raise click.UsageError(f"{' and '.join(resets)} exclude each other: give one")
    if all_groups:
        if group is not None or resets or delete:
            raise click.UsageError("--all-groups describes every group: no GROUP, reset or delete")
    elif group is None:
        raise click.UsageError("give a GROUP, or --all-groups")
    if (execute or all_topics) and not resets:
        raise click.UsageError(
            "--execute and --all-topics go with a reset (--reset-offsets, "
            "--to-datetime or --shift-by)"
        )
    if delete and (resets or topic is not None or show_members):
        raise click.UsageError("--delete takes the GROUP alone")
    if ctx.wire is not None:
        no_wire_form(ctx.wire, **{r.lstrip("-").replace("-", "_"): True for r in resets})
        over_the_wire(wire_groups(ctx.wire), group, topic, show_members, delete, output_format)
        return
    log = ctx.log()
    coordinator = ctx.groups(log)
    if delete:
        assert group is not None
        await delete_group(log, coordinator, group)
        return
    if resets:
        assert group is not None
        if (topic is None) == (not all_topics):
            raise click.UsageError("a reset needs a TOPIC or --all-topics (not both)")
        mode, value = reset_target(reset_offsets, to_datetime, shift_by)
        await reset(log, coordinator, group, topic, mode, value, execute, output_format)
        return
    if topic is not None:
        await log.topic(topic)  # an unknown topic is an error, not an empty table
    if all_groups:
        views = await listing(log, coordinator)
        documents = [await describe(log, coordinator, v, topic) for v in views]
        show_all(documents, show_members, output_format)
        return
    assert group is not None
    view = await load_group(log, coordinator, group)
    if view is None:
        raise click.ClickException(f"no such group: {group}")
    show_one(await describe(log, coordinator, view, topic), show_members, output_format)


def over_the_wire(
    groups: WireGroups,
    group: str | None,
    topic: str | None,
    show_members: bool,
    delete: bool,
    output_format: str,
) -> None:
    """group in wire mode: the same documents, from the Kafka admin API."""
    if delete:
        assert group is not None
        deleted(group, groups.delete_group(group))
        return
    if topic is not None:
        groups.client.partition_count(topic)  # an unknown topic is an error, not an empty table

    def document(view: GroupView) -> dict[str, Any]:
        committed = groups.committed(view.group)
        tps = partitions_of(view, committed, topic)
        return group_document(view, committed, groups.client.bounds(tps), topic)

    if group is None:
        views = [groups.describe_group(str(row[0])) for row in groups.list_groups()]
        documents = [document(v) for v in views if v is not None]
        show_all(documents, show_members, output_format)
        return
    view = groups.describe_group(group)
    if view is None:
        raise click.ClickException(f"no such group: {group}")
    show_one(document(view), show_members, output_format)
