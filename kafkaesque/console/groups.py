"""The Groups pages: every group (classic, consumer as KIP-848, share as KIP-932) with its
state and members; a group's lag per partition in records and in seconds (the age of its
oldest unread record), refreshed live, with a sparkline of the last minutes (a share
group: its share-partitions); and, in admin mode, resetting a classic or consumer group's
offsets (earliest, latest, an offset, a time) with a preview, only while the group is
empty, as Kafka's kafka-consumer-groups --reset-offsets (the offsets are computed again
when the reset is applied, as that tool does: "latest" is the log end then)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiohttp import web

from kafkaesque.console.context import (
    console,
    fragment,
    may_see_group,
    may_see_topic,
    posted,
    render,
    require,
    session,
)
from kafkaesque.console.html import (
    Raw,
    duration,
    facts,
    form,
    hidden,
    join,
    link,
    message,
    path,
    query,
    select,
    sparkline,
    table,
    tag,
)
from kafkaesque.console.html import (
    field as input_field,
)
from kafkaesque.console.records import BadInput, bounds, parse_time, read_forward
from kafkaesque.errors import UnknownTopic
from kafkaesque.groups.consumer import ConsumerGroupCoordinator
from kafkaesque.groups.coordinator import decode_consumer_assignment
from kafkaesque.groups.resets import RESET_MODES, plan_reset, reset_partitions
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.security.acls import Operation, ResourceType
from kafkaesque.types import TopicPartition


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    assigned: list[TopicPartition] = field(default_factory=list)


@dataclass
class Group:
    """A group of either protocol, as the pages show it."""

    name: str
    type: str  # classic or consumer
    state: str
    members: list[Member] = field(default_factory=list)


async def load(request: web.Request, name: str) -> Group | None:
    """The group from its coordinator (classic first, then KIP-848); None if none."""
    state = console(request)
    classic = await state.groups.store.load(name)
    if classic is not None:
        members = []
        for m in classic.members.values():
            assigned: list[TopicPartition] = []
            if classic.protocol_type == "consumer":
                decoded = decode_consumer_assignment(m.assignment) or {}
                assigned = [(t, p) for t, ps in decoded.items() for p in ps]
            members.append(Member(m.member_id, m.client_id, m.client_host, assigned))
        return Group(name, "classic", str(classic.state), members)
    consumer = await ConsumerGroupCoordinator(state.log).load(name)
    if consumer is not None:
        members = [
            Member(m.member_id, m.client_id, m.client_host, sorted(m.assigned))
            for m in consumer.members.values()
        ]
        return Group(name, "consumer", str(consumer.state), members)
    share = await ShareGroupCoordinator(state.log).load(name)
    if share is None:
        return None
    members = [
        Member(m.member_id, m.client_id, m.client_host, sorted(m.assigned))
        for m in share.members.values()
    ]
    return Group(name, "share", share.state, members)


async def visible(request: web.Request, name: str) -> Group | None:
    """The group, if this user may see it: one it may not see is as none."""
    return await load(request, name) if may_see_group(request, name) else None


async def named_group(request: web.Request) -> Group:
    """The group the path names, if this user may see it; BadInput as for none."""
    name = request.match_info["group"]
    group = await visible(request, name)
    if group is None:
        raise BadInput(f"no group named {name!r}")
    return group


async def group_list(request: web.Request) -> web.Response:
    state = console(request)
    rows = []
    for name in await state.groups.admin.list_groups():
        group = await visible(request, name)
        if group is None:  # not for this user, or listed but gone since
            continue
        history = state.sampler.history(name)
        rows.append(
            [
                link(path("groups", name), name),
                group.type,
                group.state,
                len(group.members),
                f"{int(history[-1]):,}" if history else None,
                sparkline(history),
            ]
        )
    body = table(
        ["Group", "Type", "State", "Members", "Lag (records)", "Lag, last minutes"],
        rows,
        numeric=[3, 4],
        empty="no groups",
        id="groups",
    )
    return render(request, f"Groups ({len(rows):,})", body, "/groups")


async def group_page(request: web.Request) -> web.Response:
    state = console(request)
    group = await named_group(request)
    name = group.name
    body: list[object] = []
    if "done" in request.query:
        body.append(message(request.query["done"], "ok"))
    body.append(
        facts([("type", group.type), ("state", group.state), ("members", len(group.members))])
    )
    body.append(tag("h2", "Lag"))
    history = sparkline(state.sampler.history(name), 320, 40)
    body.append(tag("p", join(["Total lag over the last minutes: ", history]), class_="muted"))
    body.append(
        tag(
            "div",
            await lag_table(request, group),
            id="lag",
            data_poll=path("groups", name, "lag"),
            data_every=2,
        )
    )
    body.append(tag("h2", "Members"))
    body.append(
        table(
            ["Member id", "Client id", "Host", "Assigned"],
            [
                [
                    m.member_id,
                    m.client_id,
                    m.host,
                    ", ".join(f"{t}[{p}]" for t, p in m.assigned) or None,
                ]
                for m in group.members
            ],
            empty="no members: the group is empty",
        )
    )
    if state.admin:
        body.append(tag("h2", "Reset offsets"))
        body.append(reset_form(request, group, await topics_of(request, group)))
    return render(request, f"Group {name}", join(body), "/groups")


async def lag_fragment(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    group = await visible(request, name)
    if group is None:
        return fragment(message(f"group {name} is gone"))
    return fragment(await lag_table(request, group))


async def lag_table(request: web.Request, group: Group) -> Raw:
    """Per partition: committed offset, log end, lag in records and in seconds, owner
    (a share group: its share-partitions instead)."""
    state = console(request)
    if group.type == "share":
        return await share_table(request, group)
    committed = await state.groups.admin.committed(group.name)
    owners = {tp: m for m in group.members for tp in m.assigned}
    now = time.time() * 1000
    rows = []
    total = 0
    for t, p in sorted(set(committed) | set(owners)):
        if not may_see_topic(request, t):
            continue
        current = committed.get((t, p))
        try:
            where = await bounds(state.layer, t, p)
        except UnknownTopic:  # deleted since the group committed
            rows.append([t, p, current.offset if current else None, "topic gone", None, None, None])
            continue
        lag = where.end - current.offset if current is not None else None
        seconds = None
        if current is not None and lag:
            oldest = await read_forward(
                state.layer, t, p, max(current.offset, where.earliest), 1, where
            )
            if oldest:
                seconds = duration(max(0.0, (now - oldest[0].timestamp) / 1000))
        elif lag == 0:
            seconds = "0.0 s"
        total += lag or 0
        owner = owners.get((t, p))
        rows.append(
            [
                t,
                p,
                None if current is None else f"{current.offset:,}",
                f"{where.end:,}",
                tag("span", f"{lag:,}", class_="lag-zero" if lag == 0 else "lag-some")
                if lag is not None
                else None,
                seconds,
                f"{owner.client_id} ({owner.host})" if owner else None,
            ]
        )
    return join(
        [
            tag("p", join(["Total lag: ", tag("b", f"{total:,}", id="total-lag"), " records"])),
            table(
                ["Topic", "Partition", "Committed", "Log end", "Lag", "Lag (time)", "Owner"],
                rows,
                numeric=[1, 2, 3, 4, 5],
                empty="no committed offsets",
                id="lag-table",
            ),
        ]
    )


async def topics_of(request: web.Request, group: Group) -> list[str]:
    committed = await console(request).groups.admin.committed(group.name)
    return sorted({t for t, _ in committed} | {t for m in group.members for t, _ in m.assigned})


def reset_form(request: web.Request, group: Group, topics: list[str]) -> Raw:
    if group.type == "share":
        return message("share groups' offsets are not reset here (kafka-share-groups)", "note")
    if group.members:
        return message(
            f"group {group.name} has {len(group.members)} active member(s): offsets are reset "
            "only in an empty group (stop its consumers first)",
            "note",
        )
    content = join(
        [
            select(
                "Topic",
                "topic",
                [("", "every topic it has offsets of")] + [(t, t) for t in topics],
                "",
            ),
            select("To", "to", [(m, m) for m in RESET_MODES], "earliest"),
            input_field("Offset, time or shift (for offset, time, shift-by)", "value", "", size=24),
        ]
    )
    return form(path("groups", group.name, "reset"), content, "Preview", method="get", id="reset")


async def plan(
    request: web.Request, group: Group, params: dict[str, str]
) -> dict[TopicPartition, int]:
    """The offsets a reset would commit, clamped to the log (as Kafka's tool clamps);
    BadInput for a group with members or a bad value."""
    state = console(request)
    if group.type != "classic" and group.type != "consumer":
        raise BadInput(
            f"group {group.name} is a {group.type} group: its offsets are not reset here"
        )
    await state.groups.tick(group.name)  # members whose session ended are gone, as in Kafka
    fresh = await load(request, group.name)
    if fresh is not None and fresh.members:
        raise BadInput(
            f"group {group.name} has active members (state {fresh.state}): offsets are reset "
            "only in an empty group; stop its consumers first"
        )
    asked, value, topic = (
        params.get("to", ""),
        params.get("value", "").strip(),
        params.get("topic", ""),
    )
    mode = next((m for m in RESET_MODES if m == asked), None)
    if mode is None:
        raise BadInput(f"reset to one of {', '.join(RESET_MODES)}, not {asked!r}")
    number = 0
    if mode == "offset" or mode == "shift-by":
        if not value.lstrip("-").isdigit() or (mode == "offset" and value.startswith("-")):
            raise BadInput(f"the {mode} must be a whole number, not {value!r}")
        number = int(value)
    elif mode == "time":
        number = parse_time(value)
    committed = await state.groups.admin.committed(group.name)
    partitions = await reset_partitions(state.layer, committed, topic or None)
    if not partitions:
        raise BadInput("the group has no offsets to reset: choose a topic")
    for t in {t for t, _ in partitions}:
        if not may_see_topic(request, t):
            raise UnknownTopic(f"no such topic: {t}")
    return await plan_reset(state.layer, group.name, committed, partitions, mode, number)


async def reset_preview(request: web.Request) -> web.Response:
    state = console(request)
    group = await named_group(request)
    name = group.name
    params = dict(request.query)
    new = await plan(request, group, params)
    committed = await state.groups.admin.committed(name)
    rows = [
        [t, p, committed[t, p].offset if (t, p) in committed else None, new[t, p]]
        for t, p in sorted(new)
    ]
    confirm = join(hidden(k, params.get(k, "")) for k in ("topic", "to", "value"))
    body = join(
        [
            tag(
                "p", f"Resetting group {name} would commit these offsets (nothing is changed yet):"
            ),
            table(
                ["Topic", "Partition", "Committed now", "New offset"],
                rows,
                numeric=[1, 2, 3],
                id="preview",
            ),
            form(
                path("groups", name, "reset"),
                confirm,
                "Reset offsets",
                csrf=session(request).csrf,
                danger=True,
                id="execute",
            ),
            tag("p", link(path("groups", name), "cancel")),
        ]
    )
    return render(request, f"Reset group {name}", body, "/groups")


async def reset_execute(request: web.Request) -> web.Response:
    state = console(request)
    name = request.match_info["group"]
    require(request, Operation.READ, ResourceType.GROUP, name)
    group = await load(request, name)
    if group is None:
        raise BadInput(f"no group named {name!r}")
    new = await plan(request, group, dict(await posted(request)))
    for t in {t for t, _ in new}:
        require(request, Operation.READ, ResourceType.TOPIC, t)
    await state.groups.admin.reset_offsets(name, new)  # GroupBusy if members came meanwhile
    done = f"reset {len(new)} partition(s) of group {name}"
    raise web.HTTPSeeOther(query(path("groups", name), done=done))


async def share_table(request: web.Request, group: Group) -> Raw:
    """A share group's share-partitions: where delivery starts and ends, records
    acquired and available, and what is left to deliver up to the log end."""
    state = console(request)
    found = await ShareGroupCoordinator(state.log).offsets(group.name, None)
    rows = []
    total = 0
    for (t, p), share in sorted(found.items()):
        if share is None or not may_see_topic(request, t):
            continue
        try:
            end = (await bounds(state.layer, t, p)).end
        except UnknownTopic:
            rows.append(
                [t, p, share.start, share.end, share.acquired, share.available, "topic gone"]
            )
            continue
        left = max(0, end - share.start)
        total += left
        rows.append(
            [t, p, f"{share.start:,}", f"{end:,}", share.acquired, share.available, f"{left:,}"]
        )
    return join(
        [
            tag(
                "p", join(["Left to deliver: ", tag("b", f"{total:,}", id="total-lag"), " records"])
            ),
            table(
                ["Topic", "Partition", "Start", "Log end", "Acquired", "Available", "Left"],
                rows,
                numeric=[1, 2, 3, 4, 5, 6],
                empty="no share-partitions yet",
                id="lag-table",
            ),
        ]
    )
