"""Topic ids to names, for requests that name topics by id only (Fetch v13+, Metadata v12)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.log import Log

TTL = 1.0  # seconds an id's name is trusted without a check


class TopicIds:
    """Topic id -> name, remembered from scans of every topic.

    An id found is trusted for ``ttl`` seconds, then checked against its name's config (a
    topic deleted and created again has a new id; until the check the old id still reads
    the new topic, as other brokers see configs change within a second too). An id not
    remembered scans every topic's config (two round trips): ids come from Metadata, so a
    miss is a topic new to this broker, or an id a client will stop sending once told it
    is unknown."""

    def __init__(self, log: Log, ttl: float = TTL, clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.ttl = ttl
        self.clock = clock
        self._names: dict[bytes, tuple[str, float]] = {}  # id -> (name, last checked)
        self._scan_lock = asyncio.Lock()

    async def name(self, topic_id: bytes) -> str | None:
        """The name of the topic with this id; None if there is none."""
        entry = self._names.get(topic_id)
        if entry is not None:
            name, checked = entry
            if self.clock() - checked < self.ttl or await self._still(name, topic_id):
                return name
            self._names.pop(topic_id, None)
        async with self._scan_lock:  # concurrent misses wait for one scan
            if topic_id not in self._names:
                now = self.clock()
                self._names = {i: (n, now) for i, n in (await self.log.topic_ids()).items()}
        entry = self._names.get(topic_id)
        return None if entry is None else entry[0]

    async def _still(self, name: str, topic_id: bytes) -> bool:
        """Whether topic ``name`` still has this id; remembered as checked if so."""
        try:
            config = await self.log.topic(name)
        except UnknownTopic:
            return False
        if config.topic_id != topic_id:
            return False
        self._names[topic_id] = (name, self.clock())
        return True
