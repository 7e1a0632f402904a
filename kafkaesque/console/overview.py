"""The Overview page: the live brokers, Redis and the archive and their health, Redis'
memory headroom, the archive database's size and connections in use, topic and group
counts, produce and consume rates (the sampler's)."""

from __future__ import annotations

import time
from collections import Counter

from aiohttp import web

from kafkaesque.console.context import console, fragment, render
from kafkaesque.console.html import Raw, facts, join, message, size, table, tag, when
from kafkaesque.hot.registry import registered


async def overview(request: web.Request) -> web.Response:
    body = join(
        [
            tag("div", await health(request), data_poll="/overview/health", data_every=5),
            tag("h2", "Brokers"),
            await brokers(request),
        ]
    )
    return render(request, "Overview", body, "/")


async def health_fragment(request: web.Request) -> web.Response:
    return fragment(await health(request))


async def health(request: web.Request) -> Raw:
    """The cards: Redis, the archive, topics and groups, rates."""
    state = console(request)
    try:
        await state.log.stores.ping()
        memory = (await state.log.stores.memory_use()).describe()
        redis_health = ("up", memory)
    except Exception as exc:  # the page still shows what it can
        redis_health = ("unreachable", str(exc))
    archive_health = ("none", "no archive configured: only Redis' records are shown")
    if state.archive is not None:
        from storage_pg.cold import database_use, watermark

        try:
            pool = await state.archive.pool()
            mark, use = await watermark(pool), await database_use(pool)
            archive_health = (
                "up",
                f"watermark {mark:,} (every record id up to it archived); database "
                f"{size(use.size)}, {use.connections:,} of {use.max_connections:,} "
                "connections in use",
            )
        except Exception as exc:
            archive_health = ("unreachable", str(exc))
    configs = await state.log.topic_configs()
    groups = await state.groups.admin.list_groups()
    produced = state.sampler.rate(state.sampler.produced)
    consumed = state.sampler.rate(state.sampler.consumed)

    def card(title: str, big: object, small: object) -> Raw:
        return tag(
            "div",
            join(
                [
                    tag("div", title, class_="muted"),
                    tag("div", big, class_="big"),
                    tag("div", small),
                ]
            ),
            class_="card",
        )

    def rate(value: float | None) -> str:
        return "measuring\u2026" if value is None else f"{value:,.1f}/s"

    cards = [
        card("Redis", redis_health[0], redis_health[1]),
        card("PostgreSQL archive", archive_health[0], archive_health[1]),
        card("Topics", f"{len(configs):,}", f"{sum(c.partitions for c in configs):,} partitions"),
        card("Groups", f"{len(groups):,}", "classic, consumer and share"),
        card("Produced", rate(produced), "records a second, all topics"),
        card("Consumed", rate(consumed), "committed records a second, all groups"),
    ]
    return tag("div", join(cards), class_="cards")


async def brokers(request: web.Request) -> Raw:
    """The live brokers: node, endpoints, partitions led, session left."""
    state = console(request)
    live = await registered(state.log)
    configs = await state.log.topic_configs() if live else []
    partitions = [(c.name, p) for c in configs for p in range(c.partitions)]
    leaders = await state.log.leaders(partitions) if partitions else []
    led = Counter(entry[0] for entry in leaders if entry is not None)
    cluster = await state.log.stores.cluster_id()
    rows = [
        [
            info.node_id,
            " ".join(f"{n}://{h}:{p}" for n, (h, p) in sorted(info.endpoints.items())),
            info.rack,
            led[str(info.node_id)],
            f"{left:.1f} s",
        ]
        for info, left in live
    ]
    intro = facts([("cluster id", cluster), ("shown at", when(int(time.time() * 1000)))])
    if not live:
        return join(
            [intro, message("no broker is running on this Redis (kafkaesque serve)", "note")]
        )
    return join(
        [
            intro,
            table(
                ["Node", "Endpoints", "Rack", "Partitions led", "Session left"],
                rows,
                numeric=[0, 3, 4],
            ),
        ]
    )
