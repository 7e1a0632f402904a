"""The log's result and value types, and ColdStore: the protocol of the archive it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from kafkaesque.config.topic_config import TopicConfig


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches from the one holding the requested offset; empty at the log end."""

    batches: list[bytes]
    log_start: int
    log_end: int
    leader_epoch: int
    below_start: bool = False  # removed by retention (no archive) or DeleteRecords
    past_end: bool = False
    # The offset lies in a gap (dropped by retention before archiving): the batches start
    # at this later offset, the first one that exists.
    skipped_to: int | None = None
    # The first offset of the oldest open transaction, else the log end; -1: not known.
    last_stable: int = -1
    # READ_COMMITTED reads: (producer id, first offset, ABORT marker's offset) of the
    # aborted transactions overlapping the batches, whose records the reader drops.
    aborted: list[tuple[int, int, int]] = field(default_factory=list)


class PartitionRead(Protocol):
    """One partition of a multi-partition read: from ``offset``, at most ``max_bytes``."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class LogAppended:
    """One partition's append as the log stored it (kafkaesque/partition/layer.py
    ``Appended`` is the outcome the partition layer answers with)."""

    base_offsets: list[int]  # one per batch, in order
    log_start: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    log_start: int
    log_end: int
    leader_epoch: int
    pages: int
    bytes: int
    records: int  # records still held in Redis
    floor: int = 0  # offsets below it were deleted (DeleteRecords)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """An idempotent producer a partition keeps sequence state for (DescribeProducers)."""

    producer_id: int
    epoch: int
    last_sequence: int  # of its last batch
    last_used: int  # ms: the broker's clock at its last append


@dataclass(frozen=True, slots=True)
class RestoredPartition:
    log_end: int  # what the archive holds: the partition continues here
    leader_epoch: int  # the last epoch known; the restored partition gets a higher one
    log_start: int = 0  # offsets below it were deleted (DeleteRecords) and stay so


@dataclass(frozen=True, slots=True)
class RestoredTopic:
    config: TopicConfig
    partitions: list[RestoredPartition]


class ColdStore(Protocol):
    """Where records evicted from Redis are still read from (the archive)."""

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        """Batches from the one holding ``offset`` on; [] if it is not archived."""
        ...

    async def start_offset(self, topic: str, partition: int) -> int | None:
        """The lowest archived offset, None if nothing is."""
        ...

    async def archived_through(self, topic: str, partition: int) -> int:
        """The next offset to archive (each one below is archived, or in a recorded gap,
        aborted or deleted); 0 where nothing is archived."""
        ...

    async def watermark(self) -> int:
        """The record id up to which everything is archived (0: nothing yet)."""
        ...

    async def find_time(
        self, topic: str, partition: int, timestamp: int, below: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record below offset ``below`` whose timestamp
        is at or after ``timestamp``; None if there is none."""
        ...

    async def dropped_ranges(self, topic: str) -> list[tuple[int, int, int]]:
        """(partition, first offset, last offset) of each gap in the topic: offsets
        retention dropped before archiving, which no store holds."""
        ...

    async def delete_topic(self, topic: str, topic_id: bytes | None, partitions: int) -> bool:
        """Delete the topic's records (of the incarnation ``topic_id`` too, and keep it from
        being archived again); True if the store had the topic."""
        ...

    async def delete_records(
        self, topic: str, topic_id: bytes, partition: int, before: int
    ) -> None:
        """Delete the partition's records below offset ``before`` (of the incarnation
        ``topic_id``) for good: never read, never stored again, kept across a restore."""
        ...

    async def partition_bytes(self, topic: str) -> dict[int, int]:
        """partition -> bytes its archived records take in the store (partitions with
        none archived are left out)."""
        ...
