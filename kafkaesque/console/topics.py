"""The Topics pages: the list; a topic's partitions with the hot (Redis) offset range, the
archived watermark, gaps, bytes in each tier, its configs and the groups that read it;
and, in admin mode, creating, editing and deleting topics."""

from __future__ import annotations

import base64

from aiohttp import web

from kafkaesque.config.topic_config import MAX_PARTITIONS, AlterOp, TopicConfig, altered
from kafkaesque.config.topic_config import describe as describe_configs
from kafkaesque.console import context
from kafkaesque.console.html import (
    Raw,
    facts,
    field,
    form,
    join,
    link,
    message,
    path,
    query,
    size,
    table,
    tag,
    when,
)
from kafkaesque.console.records import BadInput
from kafkaesque.errors import UnknownTopic
from kafkaesque.security.acls import Operation, ResourceType


async def topic_list(request: web.Request) -> web.Response:
    """Every topic the viewer may describe: partitions, records in Redis, log ends,
    retention and cleanup policy; ``q`` filters by name."""
    state = context.console(request)
    wanted = request.query.get("q", "").strip()
    configs = [
        c
        for c in await state.log.topic_configs()
        if (wanted.lower() in c.name.lower()) and context.may_see_topic(request, c.name)
    ]
    partitions = [(c.name, p) for c in configs for p in range(c.partitions)]
    offsets = await state.log.partition_offsets(partitions) if partitions else []
    hot: dict[str, int] = {}
    ends: dict[str, int] = {}
    for (topic, _), found in zip(partitions, offsets, strict=True):
        if found is not None:
            hot[topic] = hot.get(topic, 0) + found[1] - found[0]
            ends[topic] = ends.get(topic, 0) + found[1]
    rows = []
    for c in configs:
        where = path("topics", c.name)
        rows.append(
            [
                link(where, c.name),
                c.partitions,
                f"{hot.get(c.name, 0):,}",
                f"{ends.get(c.name, 0):,}",
                retention(c),
                c.value("cleanup.policy"),
                link(where + "/messages", "messages"),
            ]
        )
    search = tag(
        "form",
        join([field("Name contains", "q", wanted), tag("button", "Filter", type="submit")]),
        method="get",
        action="/topics",
        class_="inline",
    )
    body = [search]
    if "done" in request.query:
        body.append(message(request.query["done"], "ok"))
    if state.admin:
        body.append(create_form(request))
    body.append(
        table(
            [
                "Topic",
                "Partitions",
                "Records in Redis",
                "Offsets written",
                "Retention",
                "Cleanup",
                "",
            ],
            rows,
            numeric=[1, 2, 3],
            empty="no topics" + (f" matching {wanted!r}" if wanted else ""),
            id="topics",
        )
    )
    return context.render(request, f"Topics ({len(rows):,})", join(body), "/topics")


def retention(config: TopicConfig) -> str:
    ms = int(config.value("retention.ms"))
    return (
        "forever" if ms < 0 else f"{ms / 3_600_000:g} h" if ms >= 3_600_000 else f"{ms / 1000:g} s"
    )


def create_form(request: web.Request) -> Raw:
    content = join(
        [
            field("Name", "name", required=True, pattern=r"[a-zA-Z0-9._\-]+", maxlength=249),
            field("Partitions", "partitions", "1", type="number", min=1, max=MAX_PARTITIONS),
            field("Configs (key=value, comma separated)", "configs", "", size=40),
        ]
    )
    return form(
        "/topics", content, "Create topic", csrf=context.session(request).csrf, id="create-topic"
    )


async def topic_page(request: web.Request) -> web.Response:
    state = context.console(request)
    name = request.match_info["topic"]
    if not context.may_see_topic(request, name):
        raise UnknownTopic(f"no such topic: {name}")
    config = await state.log.topic(name)
    body: list[object] = []
    if "done" in request.query:
        body.append(message(request.query["done"], "ok"))
    configs = [e for e in describe_configs(config) if e.source != "default"]
    body.append(
        facts(
            [
                # as Kafka prints one: URL-safe base64, unpadded
                ("topic id", base64.urlsafe_b64encode(config.topic_id).rstrip(b"=").decode()),
                ("created", when(config.created_ms)),
                ("partitions", config.partitions),
                ("retention", retention(config)),
                ("cleanup policy", config.value("cleanup.policy")),
                (
                    "configs set",
                    ", ".join(f"{e.name}={e.value} ({e.source})" for e in configs) or "none",
                ),
            ]
        )
    )
    body.append(tag("p", link(path("topics", name, "messages"), "Browse its messages \u2192")))
    body.append(tag("h2", "Partitions"))
    body.append(await partition_table(request, config))
    body.append(tag("h2", "Groups reading it"))
    body.append(await readers(request, name))
    if state.admin:
        body.append(tag("h2", "Change"))
        body.append(admin_forms(request, config))
    return context.render(request, f"Topic {name}", join(body), "/topics")


async def partition_table(request: web.Request, config: TopicConfig) -> Raw:
    """Per partition: offsets in each tier, the archived watermark, bytes, the leader;
    then the gaps (dropped by retention before archiving)."""
    state = context.console(request)
    name = config.name
    cold_bytes: dict[int, int] = {}
    gaps: list[tuple[int, int, int]] = []
    if state.log.cold is not None:
        cold_bytes = await state.log.cold.partition_bytes(name)
        gaps = await state.log.cold.dropped_ranges(name)
    leaders = await state.log.leaders([(name, p) for p in range(config.partitions)])
    rows = []
    for p in range(config.partitions):
        s = await state.log.state(name, p)
        earliest = await state.log.earliest_offset(name, p)
        archived = await state.log.last_archived_offset(name, p)
        seen = leaders[p]
        leader = seen[0] if seen is not None and str(seen[0]).isdigit() else None  # "": none
        rows.append(
            [
                p,
                f"{earliest:,}",
                f"{s.log_start:,}\u2013{s.log_end - 1:,}"
                if s.log_end > s.log_start
                else f"empty at {s.log_end:,}",
                "nothing yet" if archived is None else f"{archived:,}",
                f"{s.log_end:,}",
                f"{s.records:,}",
                size(s.bytes),
                size(cold_bytes.get(p)) if state.log.cold is not None else "no archive",
                leader,
                s.leader_epoch,
            ]
        )
    headers = [
        "Partition",
        "Earliest",
        "Hot range (Redis)",
        "Archived to",
        "Log end",
        "Records in Redis",
        "Redis bytes",
        "Archive bytes",
        "Leader",
        "Epoch",
    ]
    parts = [table(headers, rows, numeric=[0, 1, 3, 4, 5, 6, 7, 8, 9], id="partitions")]
    if gaps:
        parts.append(
            table(
                ["Partition", "Offsets dropped before archiving"],
                [[p, f"{first:,}\u2013{last:,}"] for p, first, last in gaps],
                numeric=[0],
            )
        )
    return join(parts)


async def readers(request: web.Request, topic: str) -> Raw:
    """The groups with offsets of the topic, each with its largest lag."""
    state = context.console(request)
    ends = {}
    config = await state.log.topic(topic)
    found = await state.log.partition_offsets([(topic, p) for p in range(config.partitions)])
    for p, entry in enumerate(found):
        if entry is not None:
            ends[p] = entry[1]
    rows = []
    for group in await state.groups.admin.list_groups():
        if not context.may_see_group(request, group):
            continue
        committed = await state.groups.admin.committed(group)
        lags = [ends[p] - c.offset for (t, p), c in committed.items() if t == topic and p in ends]
        if lags:
            rows.append([link(path("groups", group), group), len(lags), f"{max(lags):,}"])
    return table(
        ["Group", "Partitions committed", "Largest lag"],
        rows,
        numeric=[1, 2],
        empty="no group has offsets of it",
    )


def admin_forms(request: web.Request, config: TopicConfig) -> Raw:
    csrf = context.session(request).csrf
    name = config.name
    edit = join(
        [
            field("Set configs (key=value, comma separated)", "set", "", size=40),
            field("Reset to default (keys, comma separated)", "delete", "", size=30),
            field(
                "Grow to partitions",
                "partitions",
                "",
                type="number",
                min=config.partitions + 1,
                max=MAX_PARTITIONS,
            ),
        ]
    )
    return join(
        [
            form(path("topics", name, "config"), edit, "Apply", csrf=csrf, id="edit-topic"),
            form(
                path("topics", name, "delete"),
                "",
                f"Delete topic {name}",
                csrf=csrf,
                danger=True,
                data_confirm=f"Delete topic {name} and all its records?",
            ),
        ]
    )


def key_values(text: str) -> dict[str, str]:
    """``a=1, b=2`` as a dict; BadInput for a part without '='."""
    found: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"expected key=value, got {part!r}")
        found[key.strip()] = value.strip()
    return found


async def create_topic(request: web.Request) -> web.Response:
    state = context.console(request)
    data = await context.posted(request)
    name = data.get("name", "").strip()
    context.require(request, Operation.CREATE, ResourceType.TOPIC, name)
    try:
        partitions = int(data.get("partitions", "1") or "1")
    except ValueError:
        raise BadInput("partitions must be a whole number") from None
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise BadInput(f"partitions must be between 1 and {MAX_PARTITIONS:,}")
    config = TopicConfig(name, partitions, configs=key_values(data.get("configs", "")))
    config.validate()  # InvalidConfig, InvalidTopic: said on the page
    if state.log.cold is not None:
        # as `kafkaesque create`: retention waits for the archive from the first record on
        await state.log.cold.start_offset(name, 0)
        await state.log.enable_archiving()
    await state.log.create_topic(config)
    raise web.HTTPSeeOther(query(path("topics", name), done=f"created topic {name}"))


async def alter_topic(request: web.Request) -> web.Response:
    state = context.console(request)
    name = request.match_info["topic"]
    context.require(request, Operation.ALTER_CONFIGS, ResourceType.TOPIC, name)
    data = await context.posted(request)
    operations: list[tuple[AlterOp, str, str | None]] = [
        (AlterOp.SET, k, v) for k, v in key_values(data.get("set", "")).items()
    ]
    operations += [
        (AlterOp.DELETE, k.strip(), None) for k in data.get("delete", "").split(",") if k.strip()
    ]
    grow = data.get("partitions", "").strip()
    if not operations and not grow:
        raise BadInput("nothing to change: give configs to set or reset, or more partitions")
    if grow and not grow.isdigit():
        raise BadInput(f"partitions must be a whole number, not {grow!r}")
    before = await state.log.topic(name)
    altered(before, operations)  # the form's own mistakes first (InvalidConfig)
    if grow and int(grow) <= before.partitions:
        raise BadInput(f"topic {name} has {before.partitions} partitions: partitions only grow")

    def change(config: TopicConfig) -> TopicConfig:
        changed = altered(config, operations)
        return changed.grown(int(grow)) if grow else changed

    await state.log.configure_topic(name, change)
    state.layer.forget_config(name)
    raise web.HTTPSeeOther(query(path("topics", name), done=f"changed topic {name}"))


async def delete_topic(request: web.Request) -> web.Response:
    state = context.console(request)
    name = request.match_info["topic"]
    context.require(request, Operation.DELETE, ResourceType.TOPIC, name)
    await state.log.delete_topic(name)
    await state.groups.admin.forget_topic(name)
    state.layer.forget_config(name)
    raise web.HTTPSeeOther(query("/topics", done=f"deleted topic {name}"))
