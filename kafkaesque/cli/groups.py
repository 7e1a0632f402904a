"""Consumer groups from the command line: groups, group."""

from __future__ import annotations

import re

import click

from kafkaesque.cli.base import (
    Context,
    echo_table,
    group_id_option,
    main,
    pass_context,
    run_async,
)
from kafkaesque.errors import KafkaesqueError
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.coordinator import GroupCoordinator, decode_consumer_assignment
from kafkaesque.hot.log import Log
from kafkaesque.tables import plural
from kafkaesque.types import TopicPartition


@main.command("groups")
@pass_context
@run_async
async def list_groups(ctx: Context) -> None:
    """List consumer groups."""
    names = await ctx.groups(ctx.log()).admin.list_groups()
    for name in names:
        click.echo(name)
    if not names:  # on stderr: stdout stays a list, empty
        click.echo("no consumer groups", err=True)


@main.command("group")
@click.argument("group", callback=group_id_option)
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
        if reset_offsets not in ("earliest", "latest") and not re.fullmatch(
            "[0-9]+", reset_offsets
        ):
            raise click.BadParameter(
                "use earliest, latest or an offset", param_hint="--reset-offsets"
            )
        config = await log.topic(topic)
        new = {}
        for p in range(config.partitions):
            state = await log.state(topic, p)
            earliest = await log.earliest_offset(topic, p)  # the archive's, if it has one
            if reset_offsets == "earliest":
                new[topic, p] = earliest
            elif reset_offsets == "latest":
                new[topic, p] = state.log_end
            else:  # clamped to what the partition holds, as Kafka's tool does
                new[topic, p] = min(max(int(reset_offsets), earliest), state.log_end)
        await coordinator.admin.reset_offsets(group, new)
        click.echo(f"reset {plural(len(new), 'partition')} of {topic} for group {group}", err=True)
    if topic is not None and reset_offsets is None:
        await log.topic(topic)  # an unknown topic is an error, not an empty table
    owners = await _show_members(log, coordinator, group)
    committed = await coordinator.admin.committed(group)
    rows = sorted(set(committed) | set(owners))
    if topic is not None:
        rows = [r for r in rows if r[0] == topic]
    table = []
    for t, p in rows:
        try:
            end = (await log.state(t, p)).log_end
        except KafkaesqueError:
            end = None
        c = committed.get((t, p))
        lag = end - c.offset if c is not None and end is not None else None
        table.append([t, p, c.offset if c else None, end, lag, owners.get((t, p))])
    echo_table(["topic", "partition", "committed", "end", "lag", "member"], table)


async def _show_members(
    log: Log, coordinator: GroupCoordinator, group: str
) -> dict[TopicPartition, str]:
    """Print the group's state and members, classic or consumer (KIP-848) alike; returns
    which member owns each partition."""
    owners: dict[TopicPartition, str] = {}
    members: list[tuple[str, str, dict[str, list[int]]]] = []  # id, host, assignment
    classic = await coordinator.store.load(group)
    if classic is not None:
        click.echo(f"group       {group}")
        click.echo("type        classic")
        click.echo(f"state       {classic.state}")
        click.echo(f"protocol    {classic.protocol_type or '-'}/{classic.protocol or '-'}")
        click.echo(f"generation  {classic.generation}")
        for m in classic.members.values():
            assigned = None
            if classic.protocol_type == "consumer":
                assigned = decode_consumer_assignment(m.assignment)
            members.append((m.member_id, m.client_host, assigned or {}))
    else:
        consumer = await ConsumerGroupCoordinator(log).load(group)
        if consumer is None:
            raise click.ClickException(f"no such group: {group}")
        click.echo(f"group       {group}")
        click.echo("type        consumer")
        click.echo(f"state       {consumer.state}")
        click.echo(f"protocol    consumer/{consumer.assignor}")
        click.echo(f"epoch       {consumer.epoch}")
        for cm in consumer.members.values():
            by_topic: dict[str, list[int]] = {}
            for t, p in cm.assigned:
                by_topic.setdefault(t, []).append(p)
            members.append((cm.member_id, cm.client_host, by_topic))
    click.echo(f"members     {len(members)}")
    for member_id, host, assigned in members:
        for t, parts in assigned.items():
            owners.update({(t, p): member_id for p in parts})
        shown = ", ".join(f"{t}{sorted(ps)}" for t, ps in assigned.items()) or "-"
        click.echo(f"  {member_id}  {host or '-'}  {shown}")
    return owners
