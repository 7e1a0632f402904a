"""The transaction coordinator's requests: InitProducerId, AddPartitions/AddOffsetsToTxn,
EndTxn, the append check, DescribeTransactions and ListTransactions.

The rules live in kafkaesque/txn/transaction.py (a pure state machine); this module loads a
transactional id's state, applies one transition under a short per-id Redis lock and
saves it (kafkaesque/hot/txn_states.py ``TxnStates``), so every broker process on the same
Redis coordinates the same ids and the state survives a restart. Ending a transaction is
two steps, as in Kafka: the PrepareCommit/PrepareAbort state is saved here first, then
the component held as ``completion`` (kafkaesque/txn/completion.py ``TxnCompletion``)
writes the markers, commits or drops the pending offsets and saves CompleteCommit/
CompleteAbort. A broker that dies in between leaves the prepared state, which the next
access to the id, or any broker's periodic ``completion.tick``, rolls forward. Offsets a
transaction commits (TxnOffsetCommit) wait in the group's ``txnoffsets`` hash until then
(kafkaesque/txn/offsets.py, which this class inherits).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from kafkaesque.clock import SYSTEM, Clock
from kafkaesque.errors import Code, TransactionalIdBusy, UnknownTopic
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.hot.log import Log
from kafkaesque.hot.txn_states import TxnStates
from kafkaesque.txn.completion import MarkerWriter, TxnCompletion
from kafkaesque.txn.offsets import TxnOffsetStore
from kafkaesque.txn.transaction import PREPARING, Transaction, TxnConfig, TxnState
from kafkaesque.types import TopicPartition

log = logging.getLogger(__name__)

INVALID_REGULAR_EXPRESSION = 128  # ListTransactions v2's pattern
# Transactional ids whose state this broker last saved, and topics whose partition count
# it read, kept (the oldest dropped beyond).
SAVED_KEPT = 10_000
# How long a topic's partition count read by AddPartitionsToTxn is trusted: a topic deleted
# meanwhile is still taken for that long (its batches are then refused by Produce, its
# markers dropped), as a metadata cache would.
TOPIC_SEEN_MS = 1000


@dataclass(frozen=True, slots=True)
class InitResult:
    error: Code
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Listing:
    """ListTransactions' answer: the matching ids, and the state filters not known."""

    transactions: list[Transaction]
    unknown_states: list[str]
    error: int = 0


class TransactionCoordinator(TxnOffsetStore):
    """Kafka's TransactionCoordinator over Redis; ``tick`` is its periodic work."""

    def __init__(
        self,
        log: Log,
        markers: MarkerWriter,
        groups: GroupCoordinator,
        config: TxnConfig | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.log = log
        self.groups = groups
        self.staged = groups.store.staged  # the offsets TxnOffsetCommit holds pending
        self.config = config or TxnConfig()
        self.clock = clock  # transactions time out on it
        self.states = TxnStates.of(log)
        # The state and version this broker last saved without the lock, per id, as Redis
        # holds them: the id's next AddPartitionsToTxn or EndTxn starts from it rather
        # than reading it back (a round trip of three in a transaction). A state someone
        # else changed meanwhile is refused by the script (its version), and the locked
        # path reads it. Taken out when used, so a request never shares one.
        self._saved: OrderedDict[str, tuple[Transaction, int]] = OrderedDict()
        self._topics: dict[str, tuple[int, int]] = {}  # topic -> (partitions, until, ms)
        # Markers, pending offsets settled, timeouts: ending what the requests prepared.
        self.completion = TxnCompletion(
            self.states, markers, self._settle_offsets, self.config, clock
        )

    # -- InitProducerId ---------------------------------------------------------------
    async def init_producer(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> InitResult:
        """A transactional producer's id and new epoch; the previous epoch's open
        transaction is aborted first (zombie fencing). ``expected``: the id and epoch the
        producer had (KIP-360)."""
        if not transactional_id:
            return InitResult(Code.INVALID_REQUEST)
        error = self.config.timeout_error(timeout_ms)
        if error:
            return InitResult(error)
        self._saved.pop(transactional_id, None)
        try:
            async with self.states.locked(transactional_id):
                return await self._init(transactional_id, timeout_ms, expected)
        except TransactionalIdBusy:
            return InitResult(Code.CONCURRENT_TRANSACTIONS)

    async def _init(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        now = self.clock.now_ms()
        txn = await self.states.load(transactional_id)
        if txn is None or txn.state == TxnState.DEAD:
            txn = Transaction(transactional_id, await self.log.new_producer_id(), updated_ms=now)
        error = txn.init_error(expected)
        if error:
            return InitResult(error)
        if txn.state == TxnState.ONGOING:
            log.info("fencing transactional id %r: aborting its open transaction", transactional_id)
            txn.fence(now)
            await self.states.save(txn)
        if not await self.completion.settle(txn):
            return InitResult(Code.CONCURRENT_TRANSACTIONS)  # Kafka's "retry"
        if txn.needs_new_id(expected):
            txn.rotate(await self.log.new_producer_id(), timeout_ms, now, expected is not None)
        else:
            error = txn.bump(timeout_ms, None if expected is None else expected[1], now)
            if error:
                return InitResult(error)
        await self.states.save(txn)
        return InitResult(Code.NONE, txn.producer_id, txn.producer_epoch)

    # -- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------
    async def _unknown(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The partitions that do not exist. A topic's partition count found is trusted
        for TOPIC_SEEN_MS (a producer adds its partitions anew in every transaction): a
        partition past it, or a topic not found, is always read again."""
        now = self.clock.now_ms()
        counts: dict[str, int] = {}
        for topic in {t for t, _ in partitions}:
            seen = self._topics.get(topic)
            wanted = max(p for t, p in partitions if t == topic)
            if seen is not None and now < seen[1] and wanted < seen[0]:
                counts[topic] = seen[0]
                continue
            try:
                counts[topic] = (await self.log.topic(topic)).partitions
            except UnknownTopic:
                counts[topic] = 0
                self._topics.pop(topic, None)
                continue
            self._topics[topic] = (counts[topic], now + TOPIC_SEEN_MS)
            if len(self._topics) > SAVED_KEPT:
                del self._topics[next(iter(self._topics))]
        return {(t, p) for t, p in partitions if not 0 <= p < counts[t]}

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, Code]:
        """Add partitions to the transaction (opening it); per partition its code. A
        partition that does not exist fails the request: UNKNOWN_TOPIC_OR_PARTITION for
        it, OPERATION_NOT_ATTEMPTED for the others, nothing added."""
        wanted = set(partitions)

        def every(code: Code) -> dict[TopicPartition, Code]:
            return dict.fromkeys(wanted, code)

        if not transactional_id:
            return every(Code.INVALID_REQUEST)
        versioned: tuple[Transaction | None, int] | None = None
        if self.states.lock_free:  # the topics' check and the state's read at once
            unknown, versioned = await asyncio.gather(
                self._unknown(wanted), self._versioned(transactional_id)
            )
        else:
            unknown = await self._unknown(wanted)
        if unknown:
            if versioned is not None and versioned[0] is not None:
                self._keep(versioned[0], versioned[1])
            return {
                tp: Code.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else Code.OPERATION_NOT_ATTEMPTED
                for tp in wanted
            }
        return every(
            await self._add(transactional_id, producer_id, producer_epoch, wanted, set(), versioned)
        )

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> Code:
        """Add a group's offsets to the transaction (TxnOffsetCommit may then store them)."""
        if not transactional_id:
            return Code.INVALID_REQUEST
        return await self._add(transactional_id, producer_id, producer_epoch, set(), {group_id})

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        groups: set[str],
        versioned: tuple[Transaction | None, int] | None = None,
    ) -> Code:
        """``versioned``: the id's state and version, if the caller has read them."""
        if self.states.lock_free:
            if versioned is None:
                versioned = await self._versioned(transactional_id)
            txn, version = versioned
            # Without the lock unless a transaction is to be completed first (settled).
            if txn is not None and txn.state not in PREPARING:
                state = self.states.saving(txn, version)
                before = txn.fields()
                error = txn.add(
                    producer_id, producer_epoch, self.clock.now_ms(), partitions, groups
                )
                if error:
                    return error
                if txn.fields() == before:
                    self._keep(txn, version)
                    return error
                if await self.states.save_if(txn, state):
                    self._keep(txn, version + 1)  # txn_state.lua bumps it by one
                    return error

        async def add(txn: Transaction) -> Code:
            error = txn.add(producer_id, producer_epoch, self.clock.now_ms(), partitions, groups)
            if not error:
                await self.states.save(txn)
            return error

        return await self._locked(transactional_id, producer_id, producer_epoch, add)

    async def _locked(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        step: Callable[[Transaction], Awaitable[Code]],
    ) -> Code:
        """``step`` on the id's transaction under the id's lock, read anew (for the
        producer's current epoch, an earlier end whose broker died is rolled forward
        first): INVALID_PRODUCER_ID_MAPPING for an unknown id, CONCURRENT_TRANSACTIONS
        while another broker holds the lock."""
        self._saved.pop(transactional_id, None)
        try:
            async with self.states.locked(transactional_id):
                txn = await self.states.load(transactional_id)
                if txn is None:
                    return Code.INVALID_PRODUCER_ID_MAPPING
                if txn.producer_error(producer_id, producer_epoch) == Code.NONE:
                    await self.completion.settle(txn)
                return await step(txn)
        except TransactionalIdBusy:
            return Code.CONCURRENT_TRANSACTIONS

    async def verify_for_append(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> tuple[dict[TopicPartition, Code], int]:
        """Whether each partition is in the ongoing transaction (NONE) or not
        (INVALID_TXN_STATE), nothing changed (AddPartitionsToTxn v4+ verify_only, and
        Produce's check); and the serial number of the transaction verified: a Produce
        appends with it (Log.append's ``transaction``), so that its batches are refused
        on a partition where that transaction's marker got first (Kafka's verification
        guard)."""
        wanted = set(partitions)
        txn = await self.states.load(transactional_id) if transactional_id else None
        error = (
            Code.INVALID_PRODUCER_ID_MAPPING
            if txn is None
            else txn.verify(producer_id, producer_epoch)
        )
        if error or txn is None:
            return dict.fromkeys(wanted, error), -1
        outcome = {
            tp: Code.NONE if tp in txn.partitions else Code.INVALID_TXN_STATE for tp in wanted
        }
        return outcome, txn.serial

    # -- EndTxn -----------------------------------------------------------------------
    async def end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> Code:
        """Commit or abort the open transaction: PrepareCommit/PrepareAbort is saved, then
        the markers and offsets are written and the transaction completes. Markers that
        fail are retried by ``tick``; the prepared state alone makes the outcome certain."""
        if not transactional_id:
            return Code.INVALID_REQUEST
        if self.states.lock_free:
            txn, version = await self._versioned(transactional_id)
            # The common case in one script: an open transaction without offsets, whose
            # markers and state need no lock when nobody else changes the state meanwhile.
            if txn is not None and txn.state == TxnState.ONGOING and not txn.groups:
                state = self.states.saving(txn, version)
                error = txn.end(producer_id, producer_epoch, commit, self.clock.now_ms())
                if error or txn.state not in PREPARING:
                    return error
                done = await self.completion.finish_at_once(txn, state)
                if done is not None:  # (markers that failed are retried by ``tick``)
                    if done:  # saved prepared, then complete: two versions on
                        self._keep(txn.completed(), version + 2)
                    return Code.NONE

        async def end(txn: Transaction) -> Code:
            error = txn.end(producer_id, producer_epoch, commit, self.clock.now_ms())
            if error or txn.state not in PREPARING:
                return error
            await self.states.save(txn)
            await self.completion.finish(txn)
            return Code.NONE

        return await self._locked(transactional_id, producer_id, producer_epoch, end)

    async def _versioned(self, transactional_id: str) -> tuple[Transaction | None, int]:
        """The id's state and version: as this broker last saved them, else read."""
        kept = self._saved.pop(transactional_id, None)
        if kept is not None:
            return kept
        return await self.states.load_versioned(transactional_id)

    def _keep(self, txn: Transaction, version: int) -> None:
        """``txn`` is the id's state in Redis at ``version`` (saved or read by this broker)."""
        self._saved[txn.transactional_id] = (txn, version)
        if len(self._saved) > SAVED_KEPT:
            self._saved.popitem(last=False)

    # -- admin ----------------------------------------------------------------------------
    async def describe(self, transactional_id: str) -> Transaction | None:
        return await self.states.load(transactional_id)

    async def listing(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int = -1,
        pattern: str | None = None,
    ) -> Listing:
        """ListTransactions: ids whose state, producer id, running time (longer than
        ``duration_ms``, if >= 0) and id (a regular expression, whole) match."""
        known = {str(s) for s in TxnState}
        wanted_states = set(states)
        unknown = sorted(wanted_states - known)
        pids = set(producer_ids)
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            return Listing([], unknown, INVALID_REGULAR_EXPRESSION)
        now = self.clock.now_ms()
        found = [
            txn
            for txn in await self.states.all()
            if txn.state != TxnState.DEAD
            and (not pids or txn.producer_id in pids)
            and (not wanted_states or str(txn.state) in wanted_states)
            and (duration_ms < 0 or now - txn.start_ms > duration_ms)
            and (regex is None or regex.fullmatch(txn.transactional_id))
        ]
        return Listing(found, unknown)
