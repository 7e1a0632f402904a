"""Consumer groups from the command line: groups, group (Kafka's kafka-consumer-groups
--list / --describe [--members] / --delete / --reset-offsets), for classic groups and
consumer (KIP-848) groups alike, through their coordinators."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from kafkaesque.cli.base import Context, group_id_option, main, pass_context, run_async
from kafkaesque.cli.group_view import CLASSIC, CONSUMER, GroupView, MemberView
from kafkaesque.cli.output import JSON, echo_json, echo_rows, format_option
from kafkaesque.cli.wire import no_wire_form, wire_client
from kafkaesque.errors import Code, KafkaesqueError
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.coordinator import GroupCoordinator, decode_consumer_assignment
from kafkaesque.hot.log import Log
from kafkaesque.tables import json_rows, plural
from kafkaesque.types import TopicPartition

if TYPE_CHECKING:
    from kafkaesque.cli.wire_client import WireClient

OFFSET_HEADERS = [
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-START",
    "LOG-END",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]
MEMBER_HEADERS = ["CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
RESET_HEADERS = ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]


async def load_group(log: Log, coordinator: GroupCoordinator, group: str) -> GroupView | None:
    """The group, classic or consumer (KIP-848); None if there is none."""
    classic = await coordinator.store.load(group)
    if classic is not None:
        view = GroupView(
            group,
            CLASSIC,
            str(classic.state),
            classic.protocol_type or "",
            classic.protocol or "",
            classic.generation,
        )
        for m in classic.members.values():
            assigned = None
            if classic.protocol_type == "consumer":
                assigned = decode_consumer_assignment(m.assignment)
            view.members.append(
                MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, assigned or {})
            )
        return view
    consumer = await ConsumerGroupCoordinator(log).load(group)
    if consumer is None:
        return None
    view = GroupView(
        group, CONSUMER, str(consumer.state), CONSUMER, consumer.assignor, consumer.epoch
    )
    for cm in consumer.members.values():
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(cm.assigned):
            by_topic.setdefault(t, []).append(p)
        view.members.append(
            MemberView(cm.member_id, cm.instance_id, cm.client_id, cm.client_host, by_topic)
        )
    return view


async def listing(log: Log, coordinator: GroupCoordinator) -> list[GroupView]:
    """Every group there is, of either protocol, by id (as ListGroups)."""
    found = []
    for group in await coordinator.admin.list_groups():
        view = await load_group(log, coordinator, group)
        if view is not None:  # listed, but gone since
            found.append(view)
    return found


# -- groups ---------------------------------------------------------------------------------


@main.command("groups")
@format_option
@pass_context
@run_async
async def list_groups(ctx: Context, output_format: str) -> None:
    """List the groups, classic and consumer (KIP-848): state and type."""
    if ctx.wire is not None:
        rows = wire_client(ctx.wire).list_groups()
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
        over_the_wire(wire_client(ctx.wire), group, topic, show_members, delete, output_format)
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
        spec: str | int = reset_offsets or 0
        how = (
            "to-datetime"
            if to_datetime is not None
            else "shift-by"
            if shift_by is not None
            else "to"
        )
        if to_datetime is not None:
            spec = to_datetime
        elif shift_by is not None:
            spec = shift_by
        await reset(log, coordinator, group, topic, how, spec, execute, output_format)
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


def show_all(documents: list[dict[str, Any]], show_members: bool, output_format: str) -> None:
    """group --all-groups: every group's document, as JSON (a list) or for people."""
    if output_format == JSON:
        echo_json(documents)
        return
    if not documents:
        click.echo("no consumer groups", err=True)
    for i, document in enumerate(documents):
        if i:
            click.echo()
        show(document, show_members)


def show_one(document: dict[str, Any], show_members: bool, output_format: str) -> None:
    if output_format == JSON:
        echo_json(document)
    else:
        show(document, show_members)


def over_the_wire(
    client: WireClient,
    group: str | None,
    topic: str | None,
    show_members: bool,
    delete: bool,
    output_format: str,
) -> None:
    """group in wire mode: the same documents, from the Kafka admin API."""
    if delete:
        assert group is not None
        deleted(group, client.delete_group(group))
        return
    if topic is not None:
        client.partition_count(topic)  # an unknown topic is an error, not an empty table

    def document(view: GroupView) -> dict[str, Any]:
        committed = client.committed(view.group)
        tps = partitions_of(view, committed, topic)
        return group_document(view, committed, client.bounds(tps), topic)

    if group is None:
        views = [client.describe_group(str(row[0])) for row in client.list_groups()]
        documents = [document(v) for v in views if v is not None]
        show_all(documents, show_members, output_format)
        return
    view = client.describe_group(group)
    if view is None:
        raise click.ClickException(f"no such group: {group}")
    show_one(document(view), show_members, output_format)


def partitions_of(
    view: GroupView, committed: Mapping[TopicPartition, object], topic: str | None
) -> list[TopicPartition]:
    """The partitions a group's description covers: those it has offsets of or owns (of
    ``topic`` only, if given)."""
    partitions = sorted(set(committed) | set(view.owners()))
    if topic is not None:
        partitions = [tp for tp in partitions if tp[0] == topic]
    return partitions


async def describe(
    log: Log, coordinator: GroupCoordinator, view: GroupView, topic: str | None
) -> dict[str, Any]:
    """The group's document (``group_document``), from the coordinators and the log."""
    committed = {tp: c.offset for tp, c in (await coordinator.admin.committed(view.group)).items()}
    bounds: dict[TopicPartition, tuple[int | None, int | None]] = {}
    for t, p in partitions_of(view, committed, topic):
        try:
            end: int | None = (await log.state(t, p)).log_end
            start: int | None = await log.earliest_offset(t, p)  # the archive's, if any
        except KafkaesqueError:  # the topic is gone
            end = start = None
        bounds[t, p] = (start, end)
    return group_document(view, committed, bounds, topic)


def group_document(
    view: GroupView,
    committed: Mapping[TopicPartition, int],
    bounds: Mapping[TopicPartition, tuple[int | None, int | None]],
    topic: str | None,
) -> dict[str, Any]:
    """The group as a JSON document: its header, members, and per partition (of ``topic``,
    else every one it has offsets of or owns) its offsets (``bounds``: log start and end,
    None for a topic that is gone), lag and owner."""
    owners = view.owners()
    rows = []
    for t, p in partitions_of(view, committed, topic):
        start, end = bounds.get((t, p), (None, None))
        current = committed.get((t, p))
        lag = end - current if current is not None and end is not None else None
        owner = owners.get((t, p))
        rows.append(
            [
                t,
                p,
                current,
                start,
                end,
                lag,
                owner.member_id if owner else None,
                owner.host if owner else None,
                owner.client_id if owner else None,
            ]
        )
    members = [
        {
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "assignment": [
                {"topic": t, "partition": p} for t, ps in m.assignment.items() for p in ps
            ],
        }
        for m in view.members
    ]
    return {**view.header(), "members": members, "offsets": json_rows(OFFSET_HEADERS, rows)}


def show(document: dict[str, Any], show_members: bool) -> None:
    """A group's document for people: its header, then its offsets (as kafka-consumer-groups
    --describe: a member owning nothing gets a row of its own) or its members."""
    for key in ("group", "type", "state"):
        click.echo(f"{key:<12}{document[key]}")
    click.echo(f"{'protocol':<12}{document['protocol_type'] or '-'}/{document['protocol'] or '-'}")
    for key in ("generation", "epoch"):
        if key in document:  # None: not told (the wire mode's DescribeGroups)
            click.echo(f"{key:<12}{'-' if document[key] is None else document[key]}")
    members = document["members"]
    click.echo(f"{'members':<12}{len(members)}")
    if show_members:
        rows = []
        for m in members:
            by_topic: dict[str, list[int]] = {}
            for a in m["assignment"]:
                by_topic.setdefault(a["topic"], []).append(a["partition"])
            shown = ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in by_topic.items())
            rows.append(
                [
                    m["member_id"],
                    m["host"] or None,
                    m["client_id"] or None,
                    len(m["assignment"]),
                    shown or None,
                ]
            )
        echo_rows("table", MEMBER_HEADERS, rows)
        return
    rows = [[row[key] for key in row] for row in document["offsets"]]
    owning = {row["consumer_id"] for row in document["offsets"]}
    rows += [
        [
            None,
            None,
            None,
            None,
            None,
            None,
            m["member_id"],
            m["host"] or None,
            m["client_id"] or None,
        ]
        for m in members
        if m["member_id"] not in owning and not m["assignment"]
    ]
    echo_rows("table", OFFSET_HEADERS, rows)


async def delete_group(log: Log, coordinator: GroupCoordinator, group: str) -> None:
    """DeleteGroups, of a classic group or else a consumer one: refused with members."""
    code = await coordinator.admin.delete(group)
    if code == Code.GROUP_ID_NOT_FOUND:  # a consumer group (KIP-848), if any
        refused = await ConsumerGroupCoordinator(log).delete(group)
        code = code if refused is None else refused
    deleted(group, code.name)


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
    how: str,
    spec: str | int,
    execute: bool,
    output_format: str,
) -> None:
    """Reset the group's offsets of ``topic`` (None: of every topic it has offsets of):
    ``how`` "to" earliest/latest/an offset, "to-datetime" ms, "shift-by" N. Shown as a
    dry run, or with ``execute`` applied; only while the group has no members."""
    await coordinator.tick(group)  # members whose session ended are gone, as in Kafka
    view = await load_group(log, coordinator, group)
    if view is not None and view.members:
        raise click.ClickException(
            f"group {group} has active members (state {view.state}); stop them first: "
            "offsets are reset only in an empty group"
        )
    committed = await coordinator.admin.committed(group)
    if topic is not None:
        partitions = [(topic, p) for p in range((await log.topic(topic)).partitions)]
    else:
        partitions = sorted(committed)
    new: dict[TopicPartition, int] = {}
    for t, p in partitions:
        earliest = await log.earliest_offset(t, p)  # the archive's, if it has one
        latest = (await log.state(t, p)).log_end
        if how == "to-datetime":
            assert isinstance(spec, int)
            found = await log.offset_for_timestamp(t, p, spec)
            wanted = latest if found is None else found[0]
        elif how == "shift-by":
            assert isinstance(spec, int)
            c = committed.get((t, p))
            if c is None:
                raise click.ClickException(
                    f"cannot shift {t}[{p}]: group {group} has no committed offset of it"
                )
            wanted = c.offset + spec
        elif spec == "earliest":
            wanted = earliest
        elif spec == "latest":
            wanted = latest
        else:
            wanted = int(spec)
        new[t, p] = min(max(wanted, earliest), latest)  # clamped, as Kafka's tool does
    if execute:
        await coordinator.admin.reset_offsets(group, new)  # GroupBusy if members came
    rows = [[group, t, p, offset] for (t, p), offset in sorted(new.items())]
    echo_rows(output_format, RESET_HEADERS, rows)
    what = f"{plural(len(new), 'partition')} of {topic or 'every topic'} for group {group}"
    if execute:
        click.echo(f"reset {what}", err=True)
    else:
        click.echo(f"dry run: would reset {what} (--execute applies it)", err=True)
