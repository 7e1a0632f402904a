"""Shared type names: one home for the names every package (kafkaesque, wire,
storage_pg) uses for the same thing."""

from __future__ import annotations

# A partition of a topic: (topic name, partition index).
TopicPartition = tuple[str, int]
