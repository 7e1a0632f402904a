"""Completing transactions: the markers, the pending offsets, the timeouts and the sweep.

This module owns the second step of ending a transaction, as Kafka's coordinator takes
it: once PrepareCommit/PrepareAbort is saved, the COMMIT or ABORT markers are written to
every partition (``MarkerWriter``, the partition layer), the group offsets the
transaction holds pending are committed or dropped, and CompleteCommit/CompleteAbort is
saved. It also owns the periodic work (``tick``, ``run_forever``): transactions open past
their timeout are aborted (their producer fenced), prepared ones a dead broker or a
failed marker left are rolled forward, and ids idle past transactional.id.expiration.ms
are forgotten. The requests (kafkaesque/txn/coordinator.py ``TransactionCoordinator``) hold a
``TxnCompletion`` as ``completion``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kafkaesque.clock import Clock
from kafkaesque.errors import (
    LUA_ERRORS,
    InvalidProducerEpoch,
    KafkaesqueError,
    TransactionalIdBusy,
    UnknownTopic,
)
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS
from kafkaesque.hot.txn_states import StateWrite, TxnStates
from kafkaesque.txn.transaction import PREPARING, Transaction, TxnConfig, TxnMarker, TxnState
from kafkaesque.types import TopicPartition

log = logging.getLogger(__name__)


class MarkerWriter(Protocol):
    """The log side: appends a transaction's COMMIT or ABORT control batch to partitions
    (kafkaesque/partition/layer.py ``Partitions``)."""

    async def write_markers(
        self,
        partitions: Iterable[TopicPartition],
        marker: TxnMarker,
    ) -> dict[TopicPartition, KafkaesqueError | None]: ...


@runtime_checkable
class StatefulMarkerWriter(MarkerWriter, Protocol):
    """A marker writer that also saves the coordinator's state with the markers, in one
    call (kafkaesque/partition/markers.py ``TransactionMarkers.end_transactions``)."""

    async def end_transactions(
        self, txn: Transaction, state: StateWrite, droppable: Iterable[str]
    ) -> tuple[str, dict[TopicPartition, KafkaesqueError | None]]: ...


# The script-reply names of the refusals that drop a marker (``TxnCompletion._written``).
DROPPED_MARKER_ERRORS = tuple(
    name
    for name, cls in LUA_ERRORS.items()
    if issubclass(cls, UnknownTopic) or issubclass(cls, InvalidProducerEpoch)
)


@dataclass(eq=False)
class TxnCompletion:
    """Finishes prepared transactions and times out open ones. ``settle_offsets``: the
    group offsets a transaction holds pending, committed or dropped (group id,
    transactional id, commit)."""

    states: TxnStates
    markers: MarkerWriter
    settle_offsets: Callable[[str, str, bool], Awaitable[None]]
    config: TxnConfig
    clock: Clock

    async def finish(self, txn: Transaction) -> bool:
        """Write the prepared transaction's markers, settle its pending offsets, save it
        complete. False (state left prepared, retried later) if a partition failed."""
        commit = txn.commits
        if txn.partitions:
            marker = TxnMarker(txn.producer_id, txn.producer_epoch, commit, transaction=txn.serial)
            results = await self.markers.write_markers(sorted(txn.partitions), marker)
            if not self._written(txn, results):
                return False
        for group_id in sorted(txn.groups):
            await self.settle_offsets(group_id, txn.transactional_id, commit)
        txn.complete(self.clock.now_ms())
        await self.states.save(txn)
        return True

    async def finish_at_once(self, txn: Transaction, state: StateWrite) -> bool | None:
        """``finish`` of a prepared transaction with no pending offsets, the state saved
        in the same script as the markers (one round trip, no lock: txn_end.lua), if the
        markers' writer can and the state was not changed since it was read (``state``);
        None when it was not tried or nothing was written (the caller takes the lock)."""
        if not isinstance(self.markers, StatefulMarkerWriter) or txn.groups:
            return None
        status, results = await self.markers.end_transactions(txn, state, DROPPED_MARKER_ERRORS)
        if status in ("busy", "changed"):
            return None
        self._written(txn, results)  # logs what was dropped or is left to retry
        return status == "done"  # else left prepared, for a retry

    def _written(
        self, txn: Transaction, results: dict[TopicPartition, KafkaesqueError | None]
    ) -> bool:
        """Whether every partition has the marker, or refused it for a reason that drops
        it (logged); the others logged, for a retry."""
        # Dropped, as Kafka's marker channel does: a deleted topic's markers, and those
        # a partition refuses because the producer has a newer epoch there (it moved
        # on; its newer epoch's markers end what it has open there).
        failed = {
            tp: e
            for tp, e in results.items()
            if e is not None and not isinstance(e, UnknownTopic | InvalidProducerEpoch)
        }
        for (topic, partition), e in sorted(results.items()):
            if isinstance(e, InvalidProducerEpoch):
                log.info(
                    "transaction %r: %s-%d refused its marker (%s): dropped",
                    txn.transactional_id,
                    topic,
                    partition,
                    e,
                )
        if failed:
            log.warning(
                "transaction %r: markers not written, will retry: %s",
                txn.transactional_id,
                "; ".join(f"{t}-{p}: {e}" for (t, p), e in sorted(failed.items())),
            )
            return False
        return True

    async def settle(self, txn: Transaction) -> bool:
        """Roll a prepared transaction forward (its broker died, or its markers failed);
        True when nothing is left to finish."""
        if txn.state not in PREPARING:
            return True
        log.info("completing transaction %r (%s)", txn.transactional_id, txn.state)
        return await self.finish(txn)

    # -- the periodic work --------------------------------------------------------------
    async def tick(self, sweep: bool = False) -> None:
        """Abort transactions open longer than their timeout, fencing their producer
        (the epoch is bumped), and finish prepared ones; with ``sweep``, forget ids idle
        longer than transactional.id.expiration.ms."""
        states = self.states
        now = self.clock.now_ms()
        for transactional_id in await states.due(now):
            try:
                async with states.locked(transactional_id):
                    await self._time_out(transactional_id)
            except TransactionalIdBusy:
                continue  # busy: the next tick
        if sweep:
            for txn in await states.all():
                if txn.expired(self.clock.now_ms(), self.config):
                    with contextlib.suppress(TransactionalIdBusy):
                        async with states.locked(txn.transactional_id):
                            again = await states.load(txn.transactional_id)
                            if again is not None and again.expired(
                                self.clock.now_ms(), self.config
                            ):
                                log.info(
                                    "forgetting idle transactional id %r", txn.transactional_id
                                )
                                await states.drop(txn.transactional_id)

    async def _time_out(self, transactional_id: str) -> None:
        txn = await self.states.load(transactional_id)
        if txn is None:
            await self.states.not_due(transactional_id)
            return
        now = self.clock.now_ms()
        if txn.state == TxnState.ONGOING and txn.start_ms + txn.timeout_ms <= now:
            log.info(
                "aborting transaction %r: open longer than its timeout (%d ms)",
                transactional_id,
                txn.timeout_ms,
            )
            txn.fence(now)
            await self.states.save(txn)
        await self.settle(txn)

    async def run_forever(self) -> None:
        """``tick`` every transaction.abort.timed.out.transaction.cleanup.interval.ms (at
        once at the start: a broker that died mid-commit left it prepared), sweeping the
        idle ids once an hour, as Kafka."""
        last_sweep = 0.0
        while True:
            try:
                sweep = self.clock.monotonic() - last_sweep >= 3600 or not last_sweep
                await self.tick(sweep=sweep)
                if sweep:
                    last_sweep = self.clock.monotonic()
            except REDIS_CONNECTION_ERRORS as exc:
                REDIS.failed(exc)
            except Exception:
                log.exception("transaction coordinator tick failed")
            else:
                REDIS.recovered()
            await self.clock.sleep(self.config.abort_interval_ms / 1000)
