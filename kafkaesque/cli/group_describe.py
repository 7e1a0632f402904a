"""A consumer group's description, of either protocol: loaded from the coordinators
(direct mode), as the JSON document ``group`` prints, and for people (as
kafka-consumer-groups --describe [--members]). The wire mode builds the same document
from the Kafka admin API (groups.py ``over_the_wire``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from kafkaesque.cli.group_view import CLASSIC, CONSUMER, GroupView, MemberView, by_topic
from kafkaesque.cli.output import JSON, echo_document, echo_json, echo_table
from kafkaesque.cli.share_groups import SHARE, load_share_group, share_starts
from kafkaesque.errors import KafkaesqueError
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.coordinator import GroupCoordinator, decode_consumer_assignment
from kafkaesque.hot.log import Log
from kafkaesque.tables import json_rows
from kafkaesque.types import TopicPartition

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


async def load_group(log: Log, coordinator: GroupCoordinator, group: str) -> GroupView | None:
    """The group, classic, consumer (KIP-848) or share (KIP-932); None if there is none."""
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
        return await load_share_group(log, group)
    view = GroupView(
        group, CONSUMER, str(consumer.state), CONSUMER, consumer.assignor, consumer.epoch
    )
    for cm in consumer.members.values():
        view.members.append(
            MemberView(
                cm.member_id,
                cm.instance_id,
                cm.client_id,
                cm.client_host,
                by_topic(sorted(cm.assigned)),
            )
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
    if view.type == SHARE:  # its share-partitions' start offsets, where commits would be
        offsets = await share_starts(log, view.group)
    else:
        offsets = await coordinator.admin.committed(view.group)
    committed = {tp: c.offset for tp, c in offsets.items()}
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
            assigned = by_topic((a["topic"], a["partition"]) for a in m["assignment"])
            shown = ",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in assigned.items())
            rows.append(
                [
                    m["member_id"],
                    m["host"] or None,
                    m["client_id"] or None,
                    len(m["assignment"]),
                    shown or None,
                ]
            )
        echo_table(MEMBER_HEADERS, rows)
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
    echo_table(OFFSET_HEADERS, rows)


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
    """group GROUP: its document, as JSON or for people."""
    echo_document(output_format, document, lambda: show(document, show_members))
