"""Filters Spark pushes to a batch read: on topic, partition and offset they cut the
planned ranges exactly (Spark then drops them); on timestamp they move each range's start
to the first record at or after the lower bound, found through the time indexes, and Spark
still applies them (a record's timestamp need not grow with its offset, so only the
lower bound is safe to cut at, and only as Kafka's offsetsForTimes does)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

_EXACT = ("topic", "partition", "offset")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@dataclass
class Bounds:
    """What the pushed filters allow."""

    topics: set[str] | None = None
    partitions: set[int] | None = None
    low: int = 0  # offsets low..high-1
    high: int | None = None
    since_ms: int | None = None  # timestamps at or after this (ms), or fewer
    pushed: list[str] = field(default_factory=list)

    def allows(self, topic: str, partition: int) -> bool:
        return (self.topics is None or topic in self.topics) and (
            self.partitions is None or partition in self.partitions
        )

    def cut(self, start: int, end: int) -> tuple[int, int]:
        """The offset range start..end-1 within the bounds (empty: start >= end)."""
        return max(start, self.low), end if self.high is None else min(end, self.high)

    def take(self, filters: Iterable[Filter]) -> Iterator[Filter]:
        """Record the filters; yield those Spark must still apply."""
        for f in filters:
            if not self._take(f):
                yield f

    def _take(self, f: Filter) -> bool:
        """Whether ``f`` is now applied exactly here."""
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        if len(attribute) != 1:
            return False
        [name] = attribute
        if name == "timestamp":
            self._time(f)
            return False
        if name not in _EXACT:
            return False
        if isinstance(f, In):
            values = set(f.value)
        elif isinstance(f, EqualTo):
            values = {f.value}
        elif name == "offset" and isinstance(
            f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
        ):
            self._offsets(f)
            self.pushed.append(repr(f))
            return True
        else:
            return False
        if name == "topic":
            self.topics = values if self.topics is None else self.topics & values
        elif name == "partition":
            self.partitions = values if self.partitions is None else self.partitions & values
        else:
            self.low = max(self.low, min(values))
            high = max(values) + 1
            self.high = high if self.high is None else min(self.high, high)
            if len(values) > 1:
                return False  # only the span is cut: Spark keeps the In
        self.pushed.append(repr(f))
        return True

    def _offsets(self, f: Filter) -> None:
        value = int(f.value)  # type: ignore[attr-defined]
        if isinstance(f, GreaterThan):
            self.low = max(self.low, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.low = max(self.low, value)
        else:
            high = value if isinstance(f, LessThan) else value + 1
            self.high = high if self.high is None else min(self.high, high)

    def _time(self, f: Filter) -> None:
        if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo) and isinstance(
            f.value, datetime.datetime
        ):
            # ms, rounded down: a record of that millisecond may still pass Spark's check
            moment = f.value if f.value.tzinfo else f.value.replace(tzinfo=datetime.UTC)
            ms = (moment - _EPOCH) // datetime.timedelta(milliseconds=1)
            self.since_ms = ms if self.since_ms is None else max(self.since_ms, ms)
