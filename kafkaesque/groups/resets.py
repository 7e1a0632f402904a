"""Where an offset reset puts a group's offsets, as Kafka's kafka-consumer-groups tool
computes them: the CLI's ``group --reset-offsets / --to-datetime / --shift-by`` and the
web console's reset both plan through ``plan_reset``, then apply the plan with
``GroupAdmin.reset_offsets`` (which refuses while the group has members)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from kafkaesque.errors import InvalidRequest
from kafkaesque.hot.group_offsets import CommittedOffset
from kafkaesque.partition.layer import EARLIEST, LATEST, Partitions
from kafkaesque.types import TopicPartition

# earliest / latest: the partition's ends; offset: the value; time: the first record at or
# after the value (ms), the log end if none; shift-by: the committed offset plus the value.
ResetMode = Literal["earliest", "latest", "offset", "time", "shift-by"]
RESET_MODES: tuple[ResetMode, ...] = ("earliest", "latest", "offset", "time", "shift-by")


async def reset_partitions(
    layer: Partitions, committed: Mapping[TopicPartition, CommittedOffset], topic: str | None
) -> list[TopicPartition]:
    """The partitions a reset covers: every partition of ``topic``, or (None) every one the
    group has an offset of."""
    if topic is None:
        return sorted(committed)
    return [(topic, p) for p in range((await layer.log.topic(topic)).partitions)]


async def plan_reset(
    layer: Partitions,
    group: str,
    committed: Mapping[TopicPartition, CommittedOffset],
    partitions: list[TopicPartition],
    mode: ResetMode,
    value: int = 0,
) -> dict[TopicPartition, int]:
    """The offset each partition would be reset to, clamped to what the log holds (the
    archive's earliest offset up to the high watermark), as Kafka's tool clamps."""
    new: dict[TopicPartition, int] = {}
    for topic, partition in partitions:
        earliest = await layer.list_offset(topic, partition, EARLIEST)
        latest = await layer.list_offset(topic, partition, LATEST)
        assert earliest is not None and latest is not None  # the ends always exist
        if mode == "earliest":
            wanted = earliest.offset
        elif mode == "latest":
            wanted = latest.offset
        elif mode == "offset":
            wanted = value
        elif mode == "time":
            found = await layer.list_offset(topic, partition, value)
            wanted = latest.offset if found is None else found.offset
        else:
            now = committed.get((topic, partition))
            if now is None:
                raise InvalidRequest(
                    f"cannot shift {topic}[{partition}]: group {group} has no committed "
                    "offset of it"
                )
            wanted = now.offset + value
        new[topic, partition] = min(max(wanted, earliest.offset), latest.offset)
    return new
