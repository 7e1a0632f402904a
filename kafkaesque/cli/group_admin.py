"""Changing a consumer group from the command line (direct mode): ``group --delete`` and
``group --reset-offsets / --to-datetime / --shift-by``, for classic groups, consumer
(KIP-848) groups and share groups (KIP-932: their share-partitions' start offsets) alike."""

from __future__ import annotations

import click

from kafkaesque.cli.group_describe import load_group
from kafkaesque.cli.output import echo_rows
from kafkaesque.cli.share_groups import (
    SHARE,
    delete_share_group,
    expire_share_members,
    reset_share_offsets,
    share_starts,
)
from kafkaesque.errors import Code
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.groups.resets import ResetMode, plan_reset, reset_partitions
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.tables import plural

RESET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]


def reset_target(
    reset_offsets: str | None, to_datetime: int | None, shift_by: int | None
) -> tuple[ResetMode, int]:
    """The one reset option given, as ``plan_reset``'s mode and value."""
    if to_datetime is not None:
        return "time", to_datetime
    if shift_by is not None:
        return "shift-by", shift_by
    if reset_offsets == "earliest":
        return "earliest", 0
    if reset_offsets == "latest":
        return "latest", 0
    assert reset_offsets is not None
    return "offset", int(reset_offsets)


async def delete_group(log: Log, coordinator: GroupCoordinator, group: str) -> None:
    """DeleteGroups, of a classic group or else a consumer one: refused with members."""
    code = await coordinator.admin.delete(group)
    if code == Code.GROUP_ID_NOT_FOUND:  # a consumer group (KIP-848), if any
        refused = await ConsumerGroupCoordinator(log).delete(group)
        code = code if refused is None else refused
    name = code.name
    if code == Code.GROUP_ID_NOT_FOUND:  # a share group (KIP-932), if any
        name = await delete_share_group(log, group) or name
    deleted(group, name)


def deleted(group: str, code: str) -> None:
    """What DeleteGroups answered (an error code's name), said: NONE is done."""
    if code == "GROUP_ID_NOT_FOUND":
        raise click.ClickException(f"no such group: {group}")
    if code == "NON_EMPTY_GROUP":
        raise click.ClickException(
            f"group {group} is not empty (NON_EMPTY_GROUP): its members must leave first"
        )
    if code != "NONE":
        raise click.ClickException(f"group {group} was not deleted: {code}")
    click.echo(f"deleted group {group}", err=True)


async def reset(
    log: Log,
    coordinator: GroupCoordinator,
    group: str,
    topic: str | None,
    mode: ResetMode,
    value: int,
    execute: bool,
    output_format: str,
) -> None:
    """Reset the group's offsets of ``topic`` (None: of every topic it has offsets of) as
    ``plan_reset`` computes them. Shown as a dry run, or with ``execute`` applied; only
    while the group has no members."""
    await coordinator.tick(group)  # members whose session ended are gone, as in Kafka
    await expire_share_members(log, group)
    view = await load_group(log, coordinator, group)
    if view is not None and view.members:
        raise click.ClickException(
            f"group {group} has active members (state {view.state}); stop them first: "
            "offsets are reset only in an empty group"
        )
    share = view is not None and view.type == SHARE  # its share-partitions' starts move
    if share:
        committed = await share_starts(log, group)
    else:
        committed = await coordinator.admin.committed(group)
    layer = Partitions(log)
    partitions = await reset_partitions(layer, committed, topic)
    new = await plan_reset(layer, group, committed, partitions, mode, value)
    if execute and share:
        await reset_share_offsets(log, group, new)  # NON_EMPTY_GROUP if members came
    elif execute:
        await coordinator.admin.reset_offsets(group, new)  # GroupBusy if members came
    rows = [[group, t, p, offset] for (t, p), offset in sorted(new.items())]
    echo_rows(output_format, RESET_HEADERS, rows)
    what = f"{plural(len(new), 'partition')} of {topic or 'every topic'} for group {group}"
    if execute:
        click.echo(f"reset {what}", err=True)
    else:
        click.echo(f"dry run: would reset {what} (--execute applies it)", err=True)
