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
from kafkaesque.groups.coordinator import decode_consumer_assignment
from kafkaesque.tables import plural


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
    loaded = await coordinator.store.load(group)
    if loaded is None:
        raise click.ClickException(f"no such group: {group}")
    committed = await coordinator.admin.committed(group)
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
