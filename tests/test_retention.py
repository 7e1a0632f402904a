"""Retention on the pages a partition already closed: a changed retention.ms reaches them,
max.pages never drops a compact topic's unarchived pages, and the closed-bytes counter of
a partition older than it is summed before it is used."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kafkaesque.config.topic_config import AlterOp, TopicConfig, altered
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch

HOUR_MS = 3_600_000


def run(scenario: Callable[[], object]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


async def closed_ttls(log: Log, topic: str) -> list[int]:
    """PTTL (ms) of each closed page's records, oldest first (-1: none)."""
    p = log.keys.partition(topic, 0)
    open_page = int(await log.redis.hget(p.meta, "page"))
    pages = [int(n) for n in await log.redis.zrange(p.index, 0, -1)]
    return [await log.redis.pttl(p.page(n)) for n in pages if n != open_page]


async def fill(log: Log, topic: str, count: int) -> None:
    for i in range(count):
        await log.append(topic, 0, [build_batch([b"v%d" % i], [b"k%d" % i])])


def test_a_changed_retention_reaches_the_closed_pages(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        configs = {"kafkaesque.page.size": "1", "retention.ms": str(HOUR_MS)}
        await log.create_topic(TopicConfig("r", 1, configs=configs))
        await fill(log, "r", 3)
        assert all(HOUR_MS - 5000 < t <= HOUR_MS for t in await closed_ttls(log, "r"))

        def set_to(name: str, value: str | None) -> Callable[[TopicConfig], TopicConfig]:
            return lambda c: altered(c, [(AlterOp.SET if value else AlterOp.DELETE, name, value)])

        # Shorter: each page keeps its age, under the new limit.
        await log.configure_topic("r", set_to("retention.ms", "60000"))
        assert all(55_000 < t <= 60_000 for t in await closed_ttls(log, "r"))
        # Compact (no delete policy): the pages persist, as Kafka keeps compact data.
        await log.configure_topic("r", set_to("cleanup.policy", "compact"))
        assert await closed_ttls(log, "r") == [-1, -1, -1]
        # Back to delete: pages without a TTL get the whole of it.
        await log.configure_topic("r", set_to("cleanup.policy", "delete"))
        assert all(55_000 < t <= 60_000 for t in await closed_ttls(log, "r"))
        # retention.ms=-1: nothing expires any more.
        await log.configure_topic("r", set_to("retention.ms", "-1"))
        assert await closed_ttls(log, "r") == [-1, -1, -1]
        assert (await log.state("r", 0)).log_start == 0

    run(scenario)


def test_max_pages_keeps_a_compact_topics_unarchived_pages(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        compact = {"cleanup.policy": "compact", "kafkaesque.page.size": "1"}
        await log.create_topic(TopicConfig("c", 1, configs=compact | {"kafkaesque.max.pages": "2"}))
        await fill(log, "c", 6)  # six keys, each the latest of its key: none may go
        assert (await log.state("c", 0)).log_start == 0
        # A delete topic's max.pages still drops its oldest pages.
        await log.create_topic(
            TopicConfig("d", 1, configs={"kafkaesque.page.size": "1", "kafkaesque.max.pages": "2"})
        )
        await fill(log, "d", 6)
        assert (await log.state("d", 0)).log_start == 4  # two closed pages kept

    run(scenario)


def test_closed_bytes_of_an_older_partition_is_summed_first(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("b", 1, configs={"kafkaesque.page.size": "1"}))
        await fill(log, "b", 3)
        p = log.keys.partition("b", 0)
        await log.redis.hdel(p.meta, "closed_bytes")  # as a partition from before the counter
        await fill(log, "b", 2)
        stats = await log.redis.hvals(p.stats)
        total = sum(int(v.split()[1]) for v in stats)
        assert int(await log.redis.hget(p.meta, "closed_bytes")) == total

    run(scenario)
