"""What the console remembers over time, for the sparklines and the rates: every few
seconds, each group's lag (records, summed over its partitions) and the sums of all log
ends (records produced) and of all committed offsets (records consumed). Sampled in the
console's process from the layers, so it works whichever broker served the traffic."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.hot.outage import background_step

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 5.0
KEPT = 120  # samples kept: ten minutes at the default interval


@dataclass
class Sampler:
    """The samples; ``run`` takes one every ``interval`` seconds until cancelled."""

    log: Log
    groups: GroupCoordinator
    interval: float = SAMPLE_SECONDS
    lag: dict[str, collections.deque[float]] = field(default_factory=dict)
    produced: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=KEPT)
    )
    consumed: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=KEPT)
    )
    # rows the archive holds: set when the console reads an archive (``archived_rows``)
    archived: collections.deque[tuple[float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=KEPT)
    )
    archived_rows: Callable[[], Awaitable[int]] | None = None

    async def run(self) -> None:
        while True:
            with background_step("sampling lag for the console", log):
                await self.sample()
            await asyncio.sleep(self.interval)

    async def sample(self) -> None:
        now = time.monotonic()
        configs = await self.log.topic_configs()
        partitions = [(c.name, p) for c in configs for p in range(c.partitions)]
        offsets = await self.log.partition_offsets(partitions) if partitions else []
        ends = {tp: o[1] for tp, o in zip(partitions, offsets, strict=True) if o is not None}
        self.produced.append((now, sum(ends.values())))
        consumed = 0
        seen = set()
        for group in await self.groups.admin.list_groups():
            committed = await self.groups.admin.committed(group)
            consumed += sum(c.offset for c in committed.values())
            lag = sum(max(0, ends[tp] - c.offset) for tp, c in committed.items() if tp in ends)
            self.lag.setdefault(group, collections.deque(maxlen=KEPT)).append(float(lag))
            seen.add(group)
        for gone in set(self.lag) - seen:
            del self.lag[gone]
        self.consumed.append((now, consumed))
        if self.archived_rows is not None:
            self.archived.append((now, await self.archived_rows()))

    @staticmethod
    def rate(samples: collections.deque[tuple[float, int]]) -> float | None:
        """Records a second between the last two samples; None before two."""
        if len(samples) < 2:
            return None
        (t0, n0), (t1, n1) = samples[-2], samples[-1]
        return max(0.0, (n1 - n0) / (t1 - t0)) if t1 > t0 else None

    def history(self, group: str) -> list[float]:
        return list(self.lag.get(group, ()))
