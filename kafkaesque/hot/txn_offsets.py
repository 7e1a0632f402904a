"""Offsets transactions hold pending for a group (TxnOffsetCommit): the group's
``txnoffsets`` hash, "transactional id NUL topic NUL partition" -> msgpack [offset,
metadata, leader epoch], until the transaction ends (kafkaesque/txn/offsets.py stages and
settles them; kafkaesque/groups/admin.py drops them at the end and keeps them from expiry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, cast

import msgpack
from redis.asyncio import Redis
from redis.typing import EncodableT, FieldT

from kafkaesque.hot.group_offsets import pending_field, pending_field_name, pending_transactional
from kafkaesque.hot.keys import Keys
from kafkaesque.types import TopicPartition


class StagedOffset(NamedTuple):
    """An offset a transaction holds pending, as staged."""

    topic: str
    partition: int
    offset: int
    metadata: str
    leader_epoch: int


class StagedOffsets:
    """Stage, read and drop the offsets transactions hold pending for groups."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def stage(
        self,
        group_id: str,
        transactional_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str | None, int]],
    ) -> None:
        """Hold (offset, metadata, leader epoch) per partition for the transaction."""
        key, values = self.staging(group_id, transactional_id, offsets)
        if values:
            await self.redis.hset(key, mapping=values)

    def staging(
        self,
        group_id: str,
        transactional_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str | None, int]],
    ) -> tuple[str, dict[FieldT, EncodableT]]:
        """What ``stage`` writes: the group's hash and its fields (also written by
        txn_stage.lua, kafkaesque/hot/txn_states.py ``TxnStates.stage_if``)."""
        values: dict[FieldT, EncodableT] = {
            pending_field_name(transactional_id, topic, partition): msgpack.packb(
                [offset, metadata or "", epoch]
            )
            for (topic, partition), (offset, metadata, epoch) in offsets.items()
        }
        return self.keys.group_txn_offsets(group_id), values

    async def held(self, group_id: str, transactional_id: str) -> dict[bytes, StagedOffset]:
        """The offsets the transaction holds for the group, by their field (``drop``)."""
        key = self.keys.group_txn_offsets(group_id)
        fields = cast("dict[bytes, bytes]", await self.redis.hgetall(key))  # replies are bytes
        held = {}
        for field, value in fields.items():
            owner, topic, partition = pending_field(field)
            if owner == transactional_id:
                held[field] = StagedOffset(topic, partition, *msgpack.unpackb(value))
        return held

    async def partitions(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with offsets pending on any open transaction."""
        return await pending_transactional(self.redis, self.keys, group_id)

    async def drop(self, group_id: str, fields: list[bytes]) -> None:
        """Drop staged offsets by field (a transaction's end settled them)."""
        await self.redis.hdel(self.keys.group_txn_offsets(group_id), *fields)
