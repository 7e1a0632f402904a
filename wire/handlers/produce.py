"""Produce: check each partition's batches and append them as their topic's configs ask."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from kafkaesque.errors import (
    Code,
    InvalidProducerEpoch,
    InvalidRecord,
    KafkaesqueError,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
    TransactionNotOpen,
)
from kafkaesque.partition.appends import Appended
from kafkaesque.records.batch import (
    ATTR_TRANSACTIONAL,
    BATCH_LENGTH,
    HEADER_SIZE,
    attributes,
    producer_fields,
)
from kafkaesque.types import TopicPartition
from wire.authorize import Operation, ResourceType, allowed, topics_allowed
from wire.broker import Broker
from wire.errors import error_code, error_message
from wire.protocol.codec import DropConnection, Request
from wire.protocol.fast_responses import PartitionAnswer, ProduceAnswer
from wire.protocol.produce_request import ProduceBody

# Each partition's records as sent: a view of the request's frame, None if sent as null
# (refused by the partition layer: CORRUPT_MESSAGE).
Records = dict[TopicPartition, memoryview | None]


def record_errors(error: KafkaesqueError | None) -> tuple[tuple[int, str | None], ...]:
    """Produce v8+: the records (batch index, message) that made the batch be refused,
    where the core knew them; the partition's error_message says why."""
    if not isinstance(error, InvalidRecord):
        return ()
    message = str(error)
    return tuple((i, message) for i in error.records)


def denied_writes(
    broker: Broker, request: Request[ProduceBody], records: Records
) -> dict[TopicPartition, Appended]:
    """The partitions of topics the principal may not WRITE, refused; all of them for a
    transactional producer without WRITE on its transactional id."""
    if broker.authorizer is None:  # no ACLs (the default): no sets built per request
        return {}
    txn_id = request.body.transactional_id  # None unless transactional
    if txn_id is not None and not allowed(
        broker, request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id
    ):
        refusal = TransactionalIdAuthorizationFailed(f"Not authorized to WRITE {txn_id}")
        return {key: Appended(refusal) for key in records}
    topics = {t for t, _ in records}
    refused = topics - topics_allowed(broker, request, Operation.WRITE, topics)
    return {
        (t, p): Appended(TopicAuthorizationFailed(f"Not authorized to WRITE topic {t}"))
        for t, p in records
        if t in refused
    }


def more_than_one_batch(records: Records) -> dict[TopicPartition, Appended]:
    """Partitions whose records hold more than one batch, refused INVALID_RECORD as Kafka
    refuses them on Produce v3+ ("exactly one record batch per partition"): the checks of
    a transactional producer look at each partition's batch, and a second one would slip
    past them."""
    refused = {}
    for key, data in records.items():
        # baseOffset (8 bytes), batchLength (4), then batchLength bytes. As Kafka's batch
        # iterator: a second batch needs at least its own 12 bytes after a first one of
        # a sound length; a damaged length is left to the batch checks (CORRUPT_MESSAGE).
        if data is None or len(data) < HEADER_SIZE:
            continue
        first = BATCH_LENGTH.stop + int.from_bytes(data[BATCH_LENGTH])
        # Kafka's nextBatchSize for what follows: at least up to the magic byte (17), a
        # length of at least 14, and all of it there; else no second batch is read.
        rest = data[first:] if first >= HEADER_SIZE else b""
        second = int.from_bytes(rest[BATCH_LENGTH], signed=True) if len(rest) >= 17 else -1
        if second >= 14 and len(rest) >= BATCH_LENGTH.stop + second:
            refused[key] = Appended(
                InvalidRecord("Produce v3+ allows exactly one record batch per partition")
            )
    return refused


def first_transactional(records: Records) -> memoryview | None:
    """The first partition's batch that is transactional, if one is (one batch per
    partition: ``more_than_one_batch``)."""
    for data in records.values():
        if data is not None and len(data) >= HEADER_SIZE and attributes(data) & ATTR_TRANSACTIONAL:
            return data
    return None


async def outside_transaction(
    broker: Broker, request: Request[ProduceBody], records: Records
) -> tuple[dict[TopicPartition, Appended], int | None]:
    """A transactional producer's partitions that its ongoing transaction does not hold
    (AddPartitionsToTxn), refused, as Kafka's transaction.partition.verification does: a
    batch of a transaction that ended (the client timed the request out, aborted, and
    went on) would open a transaction no marker ends, holding read_committed readers
    back for ever, and the producer's next commit there would commit it. Also the serial
    number of the transaction verified, for the appends (None: nothing transactional):
    a marker written after this check still refuses them (append.lua). Transactional
    batches without a transactional id are refused, as Kafka does."""
    first = first_transactional(records)
    if first is None:
        return {}, None
    txn_id = request.body.transactional_id  # None unless transactional
    refusal: KafkaesqueError
    if not txn_id:
        refusal = TransactionalIdAuthorizationFailed(
            "transactional records need a transactional id"
        )
        return {key: Appended(refusal) for key in records}, None
    producer_id, producer_epoch, _ = producer_fields(first)
    outcome, serial = await broker.transactions.verify_for_append(
        txn_id, producer_id, producer_epoch, records
    )
    refused: dict[TopicPartition, Appended] = {}
    for (topic, partition), error in outcome.items():
        if error in (Code.PRODUCER_FENCED, Code.INVALID_PRODUCER_EPOCH):
            refusal = InvalidProducerEpoch(
                f"producer {producer_id} epoch {producer_epoch} of {txn_id} is fenced"
            )
        elif error:
            refusal = TransactionNotOpen(
                f"{topic}[{partition}] is not in an ongoing transaction of {txn_id} "
                f"(producer {producer_id}, epoch {producer_epoch}): {error.name}"
            )
        else:
            continue
        refused[topic, partition] = Appended(refusal)
    return refused, serial


async def produce(broker: Broker, request: Request[ProduceBody]) -> ProduceAnswer | None:
    """The answer, as a ProduceAnswer; None for acks=0, which the client expects none of."""
    body = request.body  # hand-parsed: topics and partitions are tuples
    records: Records = {(t, p): data for t, partitions in body.topic_data for p, data in partitions}
    if body.acks not in (0, 1, -1):
        codes = {key: (ErrorCode.invalid_required_acks, Appended()) for key in records}
    else:
        denied = denied_writes(broker, request, records)
        if request.api_version >= 3:
            denied.update(
                more_than_one_batch({k: r for k, r in records.items() if k not in denied})
            )
        refused, transaction = await outside_transaction(
            broker, request, {k: r for k, r in records.items() if k not in denied}
        )
        denied.update(refused)
        # acks=all waits up to the request's timeout for the append to be durable.
        results = await broker.partitions.append_many(
            {key: r for key, r in records.items() if key not in denied},
            acks_all=body.acks == -1,
            timeout_ms=body.timeout_ms,
            transaction=transaction,
        )
        results.update(denied)
        codes = {key: (error_code(r.error), r) for key, r in results.items()}
    # Redis short of memory: producers hold back while the archiver drains. As Kafka's
    # quotas since KIP-219, the answer goes at once and says so in throttle_time; the
    # connection then reads nothing for that long (wire/net/connection.py). An answer held
    # back instead could outlast the client's own request timeout: the client then
    # takes a written batch for possibly lost, and an idempotent producer that bumps its
    # epoch sends it again as a new batch, which no sequence check can recognise.
    throttle_ms = broker.memory.throttle_ms()
    if body.acks == 0:
        # The client expects no response at all, so an error can only be told by closing
        # the connection, as Kafka does.
        failed = [f"{t}[{p}]: {code.name}" for (t, p), (code, _) in codes.items() if code]
        if failed:
            raise DropConnection(f"acks=0 produce failed: {', '.join(failed)}")
        return None
    # Answered without kio entities (wire.protocol.fast_responses.ProduceAnswer). v10's
    # current_leader (KIP-951) keeps its default: it is only for NOT_LEADER_OR_FOLLOWER,
    # which the one broker, leader of all, never answers.
    with_errors = request.api_version >= 8

    def partition(topic: str, index: int) -> PartitionAnswer:
        code, result = codes[topic, index]
        error = result.error
        return (
            index,
            code.value,
            result.base_offset,
            max(result.log_append_time, -1),  # -1: CreateTime
            result.log_start,
            record_errors(error) if with_errors and error is not None else (),
            error_message(error),
        )

    return ProduceAnswer(
        request.api_version,
        datetime.timedelta(milliseconds=throttle_ms),
        tuple(
            (t, tuple([partition(t, p) for p, _ in partitions]))
            for t, partitions in body.topic_data
        ),
    )
