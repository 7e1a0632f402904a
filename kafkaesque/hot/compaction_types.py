"""Compaction's value types: a topic's compaction configs and the reports of a pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.tables import plural


@dataclass(frozen=True, slots=True)
class Policy:
    """A topic's compaction configs."""

    min_lag_ms: int
    max_lag_ms: int
    min_dirty_ratio: float
    delete_retention_ms: int

    @classmethod
    def of(cls, config: TopicConfig) -> Policy:
        return cls(
            config.typed("min.compaction.lag.ms"),
            config.typed("max.compaction.lag.ms"),
            config.typed("min.cleanable.dirty.ratio"),
            config.typed("delete.retention.ms"),
        )


@dataclass(slots=True)
class PartitionCompaction:
    """What one pass did to a partition. Records and bytes are those of the cleanable
    pages, before and after."""

    topic: str
    partition: int
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    pages: int = 0  # pages rewritten
    pages_removed: int = 0  # of those, pages left empty and removed
    conflict: bool = False  # the pass stopped at a page that changed under it
    idle: str = ""  # why nothing was compacted, when nothing was

    @property
    def bytes_freed(self) -> int:
        return self.bytes_before - self.bytes_after


@dataclass(slots=True)
class TopicCompaction:
    """One pass over a topic's partitions."""

    topic: str
    partitions: list[PartitionCompaction] = field(default_factory=list)

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions)

    @property
    def compacted(self) -> bool:
        return any(p.pages for p in self.partitions)

    def format(self) -> str:
        """One line for people."""
        changed = sum(1 for p in self.partitions if p.conflict)
        later = f"{plural(changed, 'partition')} changed meanwhile, done on the next pass"
        if not self.compacted:
            reasons = sorted({p.idle for p in self.partitions if p.idle})
            reasons += [later] if changed else []
            # No reason: every page was compact already (a pass may just have dated them).
            why = "; ".join(reasons) or ("already compact" if self.partitions else "no partitions")
            return f"{self.topic}: nothing to compact ({why})"
        compacted = sum(1 for p in self.partitions if p.pages)
        line = (
            f"{self.topic}: {self.total('records_before'):,} -> "
            f"{self.total('records_after'):,} records in {compacted} of "
            f"{len(self.partitions)} partitions, "
            f"{plural(self.total('pages'), 'page')} rewritten "
            f"({self.total('pages_removed')} removed), "
            f"{self.total('bytes_before') - self.total('bytes_after'):,} bytes freed"
        )
        return f"{line}; {later}" if changed else line
