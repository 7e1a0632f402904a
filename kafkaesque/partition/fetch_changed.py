"""A long-polling read of a fetch that is the last one but for a few partitions.

A client without fetch sessions (librdkafka) asks for all its partitions at every fetch:
10,000 of them, of which a handful changed since its last answer. The caller keeps that
answer (wire/fetch/memo.py) and names the partitions whose entry in the request changed;
this reads those, the ones an append (or a change of their topic) was heard of, those
past the ReadCache's refresh and those another broker leads now, and waits as
``Partitions.fetch`` does, so the work of a fetch follows the partitions that changed,
not the partitions asked. Every other partition's last answer stands: the ReadCache
holds it, by the same rules as for a whole read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from kafkaesque.partition.layer import Partitions
from kafkaesque.partition.read_types import (
    ALL,
    All,
    Fetched,
    FetchRequest,
    ReadCache,
)
from kafkaesque.types import TopicPartition


class Asked(Protocol):
    """The partitions of a fetch, by their position in it, with their last answers."""

    def position(self, topic: str, partition: int) -> int | None:
        """Where the request names the partition; None if it does not."""
        ...

    def positions(self, topic: str) -> Iterable[int]:
        """Where the request names each partition of the topic."""
        ...

    def request(self, position: int) -> FetchRequest: ...

    def last(self, position: int) -> Fetched:
        """The partition's last answer (to this client)."""
        ...


async def fetch_changed(
    partitions: Partitions,
    cache: ReadCache,
    asked: Asked,
    changed: Iterable[int],
    topics: set[str],
    max_bytes: int,
    min_bytes: int,
    max_wait: float,
    seen_epochs: dict[TopicPartition, int] | None = None,
    committed: bool = False,
) -> dict[TopicPartition, Fetched]:
    """The new answers of the partitions at ``changed`` positions (their entries differ
    from the last fetch's, or their last answer was not kept) and of those the ReadCache
    no longer vouches for; every other partition's last answer stands. Read within
    ``max_bytes`` in the request's order, then, unless an error came or ``min_bytes``
    arrived, wait up to ``max_wait`` seconds for appends to any asked partition.
    A long poll only (``max_wait`` and ``min_bytes`` above 0; see Partitions.fetch)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    appended = cache.watching(topics)
    grown = appended.take()
    wanted = set(changed)
    # Every partition heard of: the ReadCache forgets them all (``known``), so each
    # must be answered anew.
    wanted.update(_heard(asked, grown, None))
    for tp in [*cache.lapsed(partitions.leadership), *cache.due()]:
        at = asked.position(*tp)
        if at is None:
            cache.forget((tp,))  # not asked any more: not kept at the front for ever
        else:
            wanted.add(at)
    requests = [asked.request(at) for at in sorted(wanted)]  # the request's order
    results, missing = cache.known(requests, grown, committed)
    fresh: dict[TopicPartition, Fetched] = {}
    read: list[FetchRequest] = []
    if missing:
        fresh = await partitions.read_all(missing, max_bytes, seen_epochs, committed)
        results.update(fresh)
        read = list(missing)

    def grew(grown: dict[str, dict[int, int] | All]) -> list[FetchRequest]:
        """The partitions that grew past what was read or last answered."""
        cache.forget_heard(grown, lambda t, p: asked.position(t, p) is not None)
        return [asked.request(at) for at in sorted(_heard(asked, grown, results))]

    read += await partitions.long_poll(
        appended, deadline, min_bytes, grew, fresh, results, max_bytes, seen_epochs, committed
    )
    if read:
        cache.remember(read, fresh, committed)
    return results  # type: ignore[return-value]  # each has its answer


def _heard(
    asked: Asked,
    grown: dict[str, dict[int, int] | All],
    results: dict[TopicPartition, Fetched | None] | None,
) -> set[int]:
    """The positions of the asked partitions that may hold more than their answer in
    ``results`` (else their last one) says: an append to them was heard past its high
    watermark (an event heard twice, from this process and through Redis, reads nothing
    again), or the log end was not told, or their whole topic changed; with ``results``
    None, every asked partition heard of."""
    found: set[int] = set()
    for topic, heard in grown.items():
        if heard is ALL or isinstance(heard, All):
            found.update(asked.positions(topic))
            continue
        for partition, end in heard.items():
            at = asked.position(topic, partition)
            if at is None:
                continue
            if results is None:
                found.add(at)
                continue
            answer = results.get((topic, partition)) or asked.last(at)
            if end < 0 or end > answer.high_watermark:
                found.add(at)
    return found
