"""Transactions' markers, for the partition layer (kafkaesque/partition/layer.py
``Partitions``): COMMIT and ABORT control batches written to partitions, alone or with
the coordinator's state in one call, and the readers waiting for them woken."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kafkaesque.errors import KafkaesqueError
from kafkaesque.hot.log import Log
from kafkaesque.hot.notify import Notifier
from kafkaesque.hot.txn_states import StateWrite
from kafkaesque.txn.transaction import Transaction, TxnMarker
from kafkaesque.types import TopicPartition


class TransactionMarkers:
    """The markers of the transaction coordinator (kafkaesque/txn/completion.py)."""

    log: Log
    notifier: Notifier | None

    async def write_markers(
        self,
        partitions: Iterable[TopicPartition],
        marker: TxnMarker,
    ) -> dict[TopicPartition, KafkaesqueError | None]:
        """Append the marker's COMMIT or ABORT control batch for the producer's transaction
        (serial number ``marker.transaction``, if the coordinator's: see
        Log.end_transaction) to each partition (atomic per partition), ending it there:
        its last stable offset moves past it, an abort is recorded in its
        aborted-transaction index. A partition where the producer has no open transaction
        still gets the marker (as in Kafka). Per
        partition: None, or the error (UnknownTopic, InvalidProducerEpoch for a marker
        epoch older than the producer's there, StorageUnavailable...)."""
        targets = list(dict.fromkeys(partitions))

        async def one(topic: str, partition: int) -> KafkaesqueError | None:
            try:
                await self.log.end_transaction(
                    topic,
                    partition,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.commit,
                    marker.coordinator_epoch,
                    marker.transaction,
                )
            except KafkaesqueError as exc:
                return exc
            self._marked([(topic, partition)])
            return None

        outcomes = await asyncio.gather(*(one(t, p) for t, p in targets))
        return dict(zip(targets, outcomes, strict=True))

    async def end_transactions(
        self, txn: Transaction, state: StateWrite, droppable: Iterable[str]
    ) -> tuple[str, dict[TopicPartition, KafkaesqueError | None]]:
        """``write_markers`` for the prepared transaction's partitions and its outcome, and
        the coordinator's state, in one call (Log.end_transactions)."""
        status, results = await self.log.end_transactions(
            sorted(txn.partitions), txn, state, txn.commits, droppable
        )
        self._marked([tp for tp, error in results.items() if error is None])
        return status, results

    def _marked(self, partitions: Iterable[TopicPartition]) -> None:
        """Markers written: read_committed readers wait for the last stable offset."""
        if self.notifier is not None:
            for topic, partition in partitions:
                self.notifier.notify(topic, f"{partition}:")

    async def open_transactions(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of every transaction open on the partition, oldest
        first (DescribeProducers' current_txn_start_offset); raises UnknownTopic."""
        return await self.log.open_transactions(topic, partition)
