"""The transaction coordinator's rules as a pure state machine (Kafka's TransactionMetadata
and the checks of its TransactionCoordinator, transaction protocol version 1).

No I/O: a ``Transaction`` is one transactional id's state; each request's method checks it
and changes it, returning a ``Code`` (Kafka's codes). The store and its lock are
kafkaesque/hot/txn_states.py, the marker writes kafkaesque/txn/completion.py. Time is passed
in as ``now`` (ms).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import StrEnum

import msgpack

from kafkaesque.errors import Code

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1  # Short.MaxValue


class TxnState(StrEnum):
    """Kafka's TransactionState, by the names DescribeTransactions reports."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    # Kafka holds it only in memory while it fences an ongoing transaction's producer; so
    # does this coordinator: a fence is stored as PrepareAbort under the bumped epoch.
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)
ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(slots=True)
class TxnConfig:
    """The transaction.* broker configs the coordinator obeys (Kafka's defaults)."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3_600_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_interval_ms: int = 10_000

    def timeout_error(self, timeout_ms: int) -> Code:
        """INVALID_TRANSACTION_TIMEOUT for a timeout Kafka refuses (<= 0 or above the max)."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return Code.INVALID_TRANSACTION_TIMEOUT
        return Code.NONE


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's isEpochExhausted: one epoch is kept back for fencing."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """What a COMMIT or ABORT marker ends: the producer's transaction (by id and epoch) and,
    when the coordinator writes it, the coordinator's epoch and the transaction's serial
    number (``Transaction.serial``; None: not the coordinator's)."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int = 0
    transaction: int | None = None


@dataclass(slots=True)
class Transaction:
    """One transactional id: its producer, and the transaction it has open (if any)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_id: int = NO_PRODUCER_ID  # the id before the last rotation
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    start_ms: int = -1  # when the open transaction began
    updated_ms: int = 0
    # Counts the transactions opened: the markers of number N make the partitions refuse
    # the late batches verified in N (append.lua, end_txn.lua).
    serial: int = 0

    # -- storage: one Redis hash per transactional id -------------------------------
    def fields(self) -> dict[str, int | str | bytes]:
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_id": self.last_producer_id,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": str(self.state),
            "partitions": msgpack.packb(sorted(self.partitions)),
            "groups": msgpack.packb(sorted(self.groups)),
            "start_ms": self.start_ms,
            "updated_ms": self.updated_ms,
            "serial": self.serial,
        }

    @classmethod
    def from_fields(cls, transactional_id: str, raw: dict[bytes, bytes]) -> Transaction:
        def number(name: str) -> int:
            return int(raw[name.encode()])

        return cls(
            transactional_id,
            number("producer_id"),
            number("producer_epoch"),
            number("last_producer_id"),
            number("last_producer_epoch"),
            number("timeout_ms"),
            TxnState(raw[b"state"].decode()),
            {(t, p) for t, p in msgpack.unpackb(raw[b"partitions"])},
            set(msgpack.unpackb(raw[b"groups"])),
            number("start_ms"),
            number("updated_ms"),
            int(raw.get(b"serial", 0)),  # none before serial numbers were kept
        )

    # -- deadlines ------------------------------------------------------------------------
    def deadline_ms(self) -> int | None:
        """When the coordinator must act on its own: an open transaction's timeout, now
        for a prepared one (its markers are still to be written); None when idle."""
        if self.state == TxnState.ONGOING:
            return self.start_ms + self.timeout_ms
        if self.state in PREPARING:
            return self.updated_ms
        return None

    def expired(self, now: int, config: TxnConfig) -> bool:
        """Idle longer than transactional.id.expiration.ms: the id is forgotten."""
        return self.state in ENDED and now - self.updated_ms > config.id_expiration_ms

    # -- InitProducerId -------------------------------------------------------------------
    def init_error(self, expected: tuple[int, int] | None) -> Code:
        """Kafka's isValidProducerId: a producer that gives its id and epoch (KIP-360) is
        fenced unless the id is this one's, or the previous one with an exhausted epoch."""
        if expected is None or self.producer_epoch == NO_PRODUCER_EPOCH:
            return Code.NONE
        pid, epoch = expected
        if pid == self.producer_id:
            return Code.NONE
        if pid == self.last_producer_id and epoch_exhausted(epoch):
            return Code.NONE
        return Code.PRODUCER_FENCED

    def needs_new_id(self, expected: tuple[int, int] | None) -> bool:
        """The epoch is used up: the next InitProducerId rotates to a new producer id."""
        return epoch_exhausted(self.producer_epoch) and (
            expected is None or expected[1] == self.producer_epoch
        )

    def rotate(self, new_id: int, timeout_ms: int, now: int, keep_last: bool) -> None:
        """A new producer id at epoch 0 (Kafka's prepareProducerIdRotation)."""
        self.last_producer_id = self.producer_id
        self.last_producer_epoch = self.producer_epoch if keep_last else NO_PRODUCER_EPOCH
        self.producer_id, self.producer_epoch = new_id, 0
        self._reset(timeout_ms, now)

    def bump(self, timeout_ms: int, expected_epoch: int | None, now: int) -> Code:
        """Kafka's prepareIncrementProducerEpoch: a new producer instance (no expected
        epoch) or the current one recovering gets the next epoch; a retry of a bump that
        succeeded gets the same epoch again; any other epoch is fenced."""
        current = self.producer_epoch
        if expected_epoch is None:
            epoch, last = current + 1, NO_PRODUCER_EPOCH
        elif current == NO_PRODUCER_EPOCH or expected_epoch == current:
            epoch, last = current + 1, current
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = current, self.last_producer_epoch
        else:
            return Code.PRODUCER_FENCED
        self.producer_epoch, self.last_producer_epoch = epoch, last
        self._reset(timeout_ms, now)
        return Code.NONE

    def _reset(self, timeout_ms: int, now: int) -> None:
        self.timeout_ms = timeout_ms
        self.state = TxnState.EMPTY
        self.partitions, self.groups = set(), set()
        self.start_ms, self.updated_ms = -1, now

    def fence(self, now: int) -> None:
        """Abort the open transaction under a bumped epoch, so its producer's requests are
        refused from now on (Kafka's prepareFenceProducerEpoch, then PrepareAbort). An
        exhausted epoch is not bumped; the next InitProducerId rotates the id."""
        if self.producer_epoch < MAX_EPOCH:
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.state, self.updated_ms = TxnState.PREPARE_ABORT, now

    # -- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------
    def producer_error(self, producer_id: int, producer_epoch: int) -> Code:
        if self.state == TxnState.DEAD or producer_id != self.producer_id:
            return Code.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != self.producer_epoch:
            return Code.PRODUCER_FENCED
        return Code.NONE

    def add(
        self,
        producer_id: int,
        producer_epoch: int,
        now: int,
        partitions: set[tuple[str, int]] = frozenset(),  # type: ignore[assignment]
        groups: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> Code:
        """Add partitions (AddPartitionsToTxn) or a group's offsets (AddOffsetsToTxn) to
        the transaction, opening it if none is (Kafka's prepareAddPartitions)."""
        error = self.producer_error(producer_id, producer_epoch)
        if error:
            return error
        if self.state in PREPARING:
            return Code.CONCURRENT_TRANSACTIONS
        if (
            self.state == TxnState.ONGOING
            and partitions <= self.partitions
            and groups <= self.groups
        ):
            return Code.NONE
        if self.state in ENDED:
            self.partitions, self.groups, self.start_ms = set(), set(), now
            self.serial += 1
        self.state = TxnState.ONGOING
        self.partitions |= partitions
        self.groups |= groups
        self.updated_ms = now
        return Code.NONE

    def verify(self, producer_id: int, producer_epoch: int) -> Code:
        """AddPartitionsToTxn v4+ verify_only: the producer's checks, before the
        partitions' (each NONE if in the transaction, INVALID_TXN_STATE if not)."""
        error = self.producer_error(producer_id, producer_epoch)
        if error:
            return error
        if self.state in PREPARING:
            return Code.CONCURRENT_TRANSACTIONS
        return Code.NONE

    # -- EndTxn ----------------------------------------------------------------------------
    def end(self, producer_id: int, producer_epoch: int, commit: bool, now: int) -> Code:
        """Prepare a commit or abort (Kafka's endTransaction from the client). A retry of
        an end that completed answers NONE and changes nothing (``state`` then stays
        Complete*: the caller has nothing to write)."""
        error = self.producer_error(producer_id, producer_epoch)
        if error:
            return error
        wanted = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if self.state == TxnState.ONGOING:
            self.state, self.updated_ms = preparing, now
            return Code.NONE
        if self.state == wanted:
            return Code.NONE
        if self.state == preparing or self.state == TxnState.PREPARE_EPOCH_FENCE:
            return Code.CONCURRENT_TRANSACTIONS
        return Code.INVALID_TXN_STATE  # Empty, the other Complete*, the other Prepare*

    @property
    def commits(self) -> bool:
        """Whether the prepared transaction ends in a commit (PrepareCommit), else an abort."""
        return self.state == TxnState.PREPARE_COMMIT

    def completed(self) -> Transaction:
        """A copy of this prepared transaction as ``complete`` leaves it at its
        ``updated_ms``: the state EndTxn's one script saves last (txn_end.lua)."""
        done = copy.copy(self)
        done.complete(self.updated_ms)
        return done

    def complete(self, now: int) -> None:
        """The markers are written: PrepareCommit -> CompleteCommit, PrepareAbort ->
        CompleteAbort; the transaction's partitions and groups are forgotten."""
        self.state = TxnState.COMPLETE_COMMIT if self.commits else TxnState.COMPLETE_ABORT
        self.partitions, self.groups = set(), set()
        self.start_ms, self.updated_ms = -1, now

    # -- TxnOffsetCommit -------------------------------------------------------------------
    def offsets_error(self, producer_id: int, producer_epoch: int, group_id: str) -> Code:
        """Whether the producer may store offsets pending on its transaction: its id,
        its epoch (an older one is a zombie's: INVALID_PRODUCER_EPOCH, as Kafka's log
        answers), and the group added by AddOffsetsToTxn."""
        if self.state == TxnState.DEAD or producer_id != self.producer_id:
            return Code.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != self.producer_epoch:
            return Code.INVALID_PRODUCER_EPOCH
        if self.state != TxnState.ONGOING or group_id not in self.groups:
            return Code.INVALID_TXN_STATE
        return Code.NONE


def fenced_code(error: int, api_version: int, first_version: int) -> int:
    """PRODUCER_FENCED for versions that know it (KIP-588), INVALID_PRODUCER_EPOCH below."""
    if error == Code.PRODUCER_FENCED and api_version < first_version:
        return Code.INVALID_PRODUCER_EPOCH
    return error
