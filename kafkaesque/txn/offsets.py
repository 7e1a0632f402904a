"""Offsets a transaction commits (TxnOffsetCommit): staged in the group's ``txnoffsets``
hash, checked against the group as Kafka does, and committed or dropped when the
transaction ends (kafkaesque.txn.coordinator.TransactionCoordinator inherits this)."""

from __future__ import annotations

from kafkaesque.clock import Clock
from kafkaesque.errors import Code, TransactionalIdBusy, UnknownTopic
from kafkaesque.groups.consumer import consumer_commit_error
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.groups.rules import check_member
from kafkaesque.groups.types import MAX_METADATA, GroupState
from kafkaesque.hot.group_offsets import CommittedOffset
from kafkaesque.hot.log import Log
from kafkaesque.hot.txn_offsets import StagedOffsets
from kafkaesque.hot.txn_states import TxnStates
from kafkaesque.txn.transaction import Transaction
from kafkaesque.types import TopicPartition

# An offset a transaction commits: (offset, metadata, leader epoch).
PendingOffset = tuple[int, str | None, int]


class TxnOffsetStore:
    """The transaction coordinator's side of consumer group offsets."""

    log: Log
    groups: GroupCoordinator
    staged: StagedOffsets  # the groups': offsets held pending, by group
    clock: Clock
    states: TxnStates  # the coordinator's: a transactional id's state, and its per-id lock

    async def commit_offsets(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict[TopicPartition, PendingOffset],
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
    ) -> dict[TopicPartition, int]:
        """Store offsets pending on the transaction, committed by its EndTxn commit; per
        partition a Kafka code (Code or the group's Code)."""

        def every(code: int) -> dict[TopicPartition, int]:
            return dict.fromkeys(offsets, code)

        async def refusal(txn: Transaction) -> int:
            """The transaction's refusal (its producer, its state, the group added), else
            the group's; Code.NONE if neither refuses."""
            error = txn.offsets_error(producer_id, producer_epoch, group_id)
            return error or await self._group_error(group_id, generation, member_id, instance_id)

        if not transactional_id or not group_id:
            return every(Code.INVALID_REQUEST if not transactional_id else Code.INVALID_GROUP_ID)
        if self.states.lock_free:
            # Without the lock: the offsets are held only if the transaction's state is
            # still as read (no end came in between to settle them), else as below.
            txn, version = await self.states.load_versioned(transactional_id)
            if txn is not None:
                state = self.states.saving(txn, version)
                refused = await refusal(txn)
                if refused:
                    return every(refused)
                codes, staged = await self._checked(offsets)
                key, values = self.staged.staging(group_id, transactional_id, staged)
                if await self.states.stage_if(state, key, values):
                    return codes
        try:
            async with self.states.locked(transactional_id):
                txn = await self.states.load(transactional_id)
                if txn is None:
                    return every(Code.INVALID_PRODUCER_ID_MAPPING)
                refused = await refusal(txn)
                if refused:
                    return every(refused)
                return await self._stage(transactional_id, group_id, offsets)
        except TransactionalIdBusy:
            return every(Code.CONCURRENT_TRANSACTIONS)

    async def _stage(
        self, transactional_id: str, group_id: str, offsets: dict[TopicPartition, PendingOffset]
    ) -> dict[TopicPartition, int]:
        """Stage the offsets until the transaction ends; a Kafka code per partition."""
        codes, staged = await self._checked(offsets)
        await self.staged.stage(group_id, transactional_id, staged)
        return codes

    async def _checked(
        self, offsets: dict[TopicPartition, PendingOffset]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, PendingOffset]]:
        """A Kafka code per partition, and the offsets to stage (those with NONE)."""
        codes: dict[TopicPartition, int] = {}
        staged: dict[TopicPartition, PendingOffset] = {}
        counts = {}  # partitions per topic; 0: no such topic (Kafka answers it unknown)
        for topic in {t for t, _ in offsets}:
            try:
                counts[topic] = (await self.log.topic(topic)).partitions
            except UnknownTopic:
                counts[topic] = 0
        for (topic, partition), (offset, metadata, epoch) in offsets.items():
            if not 0 <= partition < counts[topic]:
                codes[topic, partition] = Code.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if metadata is not None and len(metadata) > MAX_METADATA:
                codes[topic, partition] = Code.OFFSET_METADATA_TOO_LARGE
                continue
            codes[topic, partition] = Code.NONE
            staged[topic, partition] = (offset, metadata, epoch)
        return codes, staged

    async def _group_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        """Kafka's validateTransactionalOffsetCommit: a commit naming a member or a
        generation must match the group's; an anonymous one (generation -1, no member) is
        accepted whatever the group's state."""
        if member_id:
            # A consumer-protocol (KIP-848) group: the generation is the member epoch.
            consumer = await consumer_commit_error(
                self.groups.consumer_groups, group_id, member_id, generation
            )
            if consumer == Code.STALE_MEMBER_EPOCH:
                return Code.ILLEGAL_GENERATION
            if consumer is not None:
                return int(consumer)
        group = await self.groups.store.load(group_id)
        if group is None:
            return Code.NONE if generation < 0 else Code.ILLEGAL_GENERATION
        if generation < 0 and group.state == GroupState.EMPTY:
            return Code.NONE
        if generation >= 0 or member_id or instance_id is not None:
            return int(check_member(group, member_id, instance_id, generation))
        return Code.NONE

    async def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with offsets pending on an open transaction (OffsetFetch
        require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        return await self.staged.partitions(group_id)

    async def _settle_offsets(self, group_id: str, transactional_id: str, commit: bool) -> None:
        held = await self.staged.held(group_id, transactional_id)
        if not held:
            return
        offsets = {}
        if commit:
            now = self.clock.now_ms()
            for o in held.values():
                offsets[o.topic, o.partition] = CommittedOffset(
                    o.offset, o.metadata, now, o.leader_epoch
                )
        await self.groups.admin.settle_pending(group_id, list(held), offsets)
