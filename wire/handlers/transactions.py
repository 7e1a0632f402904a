"""The transaction coordinator's APIs: InitProducerId (a transactional id's producer, or a
new id for an idempotent one), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions and ListTransactions. They translate to kafkaesque/txn/coordinator.py
``TransactionCoordinator``."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import AuthorizationFailed, Code, InvalidRequest, StorageUnavailable
from kafkaesque.txn.transaction import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, fenced_code
from wire.authorize import (
    Operation,
    ResourceType,
    allowed,
    check_idempotent_write,
    cluster_allowed,
)
from wire.broker import Broker
from wire.errors import error_code
from wire.group_answers import UNAVAILABLE, topic_errors
from wire.protocol.codec import (
    NO_THROTTLE,
    Request,
    build,
    ok_response,
    schema_classes,
)
from wire.protocol.kio_types import (
    adds_batched,
    filters_duration,
    filters_pattern,
    has_leader_epoch,
    names_member,
    names_producer,
)

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnPartitionResult,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        AddPartitionsToTxnTopic,
        AddPartitionsToTxnTopicResult,
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        ListTransactionsRequest,
        ListTransactionsResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
    )

# The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones
# get INVALID_PRODUCER_EPOCH, as Kafka answers them.
FENCED_SINCE = {"init": 4, "add_partitions": 2, "add_offsets": 2, "end": 2}


# Kafka's authorization of the transactional APIs (KafkaApis): WRITE on the transactional
# id for the producer's own calls, DESCRIBE to see one; READ on the group whose offsets a
# transaction carries, WRITE on the topics it writes; the brokers' batched
# AddPartitionsToTxn needs CLUSTER_ACTION.
TXN_DENIED = ErrorCode.transactional_id_authorization_failed


def _txn_allowed(broker: Broker, request: Request, transactional_id: str, op: Operation) -> bool:
    return allowed(broker, request, op, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _group_allowed(broker: Broker, request: Request, group_id: str) -> bool:
    return allowed(broker, request, Operation.READ, ResourceType.GROUP, group_id)


def _millis(value: datetime.timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else value


def _current_producer(body: InitProducerIdRequest) -> tuple[int, int]:
    """The producer id and epoch the request carries (v3+); before, none."""
    if names_producer(body):
        return body.producer_id, body.producer_epoch
    return NO_PRODUCER_ID, NO_PRODUCER_EPOCH


async def init_producer_id(
    broker: Broker, request: Request[InitProducerIdRequest]
) -> InitProducerIdResponse:
    """A transactional producer's id goes to the transaction coordinator. Otherwise a new
    producer id at epoch 0. From v3 an idempotent producer may send its current
    id and epoch to have the epoch bumped (KIP-360); as Kafka, which does so only for
    transactional ids, it gets a new id instead: its sequence numbers start over at 0
    either way, and a new id cannot collide with what the partitions remember of the old."""
    body = request.body
    try:
        if body.transactional_id is not None:
            return await init_transactional(broker, request, body.transactional_id)
        current = _current_producer(body)
        if (current[0] == NO_PRODUCER_ID) != (current[1] == NO_PRODUCER_EPOCH):
            raise InvalidRequest("producer id and epoch must be given both or neither")
        check_idempotent_write(broker, request)
        producer_id, epoch = await broker.log.new_producer_id(), 0
    except (InvalidRequest, AuthorizationFailed) as exc:
        producer_id, epoch, code = NO_PRODUCER_ID, NO_PRODUCER_EPOCH, error_code(exc)
    else:
        code = ErrorCode.none
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        error_code=code,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


async def init_transactional(
    broker: Broker, request: Request[InitProducerIdRequest], transactional_id: str
) -> InitProducerIdResponse:
    """InitProducerId with a transactional id: the id's producer id and a new epoch."""
    body = request.body
    producer_id, epoch = _current_producer(body)
    if not _txn_allowed(broker, request, transactional_id, Operation.WRITE):
        code: int = TXN_DENIED
        result_id, result_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    elif (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        code = Code.INVALID_REQUEST
        result_id, result_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    else:
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, epoch)
        result = await broker.transactions.init_producer(
            transactional_id, _millis(body.transaction_timeout), expected
        )
        code = fenced_code(result.error, request.api_version, FENCED_SINCE["init"])
        result_id, result_epoch = result.producer_id, result.producer_epoch
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        error_code=error_code(code),
        producer_id=result_id,
        producer_epoch=result_epoch,
    )


def _topic_results(
    schema: type, outcome: Mapping[tuple[str, int], int]
) -> tuple[AddPartitionsToTxnTopicResult, ...]:
    topic_class, partition_class = schema_classes(
        schema, "AddPartitionsToTxnTopicResult", "AddPartitionsToTxnPartitionResult"
    )
    topics: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in sorted(outcome.items()):
        topics.setdefault(topic, []).append(
            build(partition_class, partition_index=partition, partition_error_code=error_code(code))
        )
    return tuple(
        build(topic_class, name=name, results_by_partition=tuple(parts))
        for name, parts in topics.items()
    )


def _partitions(topics: Iterable[AddPartitionsToTxnTopic]) -> list[tuple[str, int]]:
    return [(t.name, p) for t in topics for p in t.partitions]


def _add_refusal(
    broker: Broker, request: Request, transactional_id: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int] | None:
    """Per partition, why the producer may not add these partitions (WRITE on the
    transactional id, WRITE on each topic; the others OPERATION_NOT_ATTEMPTED, as Kafka
    answers), or None when it may."""
    if not _txn_allowed(broker, request, transactional_id, Operation.WRITE):
        return dict.fromkeys(partitions, TXN_DENIED)
    denied = {
        t
        for t, _ in partitions
        if not allowed(broker, request, Operation.WRITE, ResourceType.TOPIC, t)
    }
    if not denied:
        return None
    return {
        (t, p): ErrorCode.topic_authorization_failed
        if t in denied
        else ErrorCode.operation_not_attempted
        for t, p in partitions
    }


async def add_partitions_to_txn(
    broker: Broker, request: Request[AddPartitionsToTxnRequest]
) -> AddPartitionsToTxnResponse:
    """v0-3: one producer's partitions; v4+: the brokers' batched form, several
    transactions, each added to or (verify_only) checked. While Redis is away each
    partition answers COORDINATOR_NOT_AVAILABLE, as Kafka's coordinator does while it
    cannot serve: the client looks for the coordinator again and retries."""
    body = request.body
    schema = request.response_class
    coordinator = broker.transactions
    outcome: Mapping[tuple[str, int], int]  # a Kafka code per partition
    if not adds_batched(body):
        partitions = _partitions(body.v3_and_below_topics)
        refusal = _add_refusal(broker, request, body.v3_and_below_transactional_id, partitions)
        if refusal is not None:
            return build(
                schema,
                throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=_topic_results(schema, refusal),
            )
        try:
            outcome = await coordinator.add_partitions(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                partitions,
            )
        except StorageUnavailable:
            outcome = dict.fromkeys(partitions, UNAVAILABLE)
        version = request.api_version
        outcome = {
            tp: fenced_code(c, version, FENCED_SINCE["add_partitions"]) for tp, c in outcome.items()
        }
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=_topic_results(schema, outcome),
        )
    result_class = request.response_entity("AddPartitionsToTxnResult")
    if not cluster_allowed(broker, request, Operation.CLUSTER_ACTION):
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in body.transactions:
        args = (txn.transactional_id, txn.producer_id, txn.producer_epoch)
        partitions = _partitions(txn.topics)
        try:
            if txn.verify_only:
                outcome, _ = await coordinator.verify_for_append(*args, partitions)
            else:
                outcome = await coordinator.add_partitions(*args, partitions)
        except StorageUnavailable:
            outcome = dict.fromkeys(partitions, UNAVAILABLE)
        results.append(
            build(
                result_class,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(schema, outcome),
            )
        )
    return ok_response(schema, results_by_transaction=tuple(results))


async def add_offsets_to_txn(
    broker: Broker, request: Request[AddOffsetsToTxnRequest]
) -> AddOffsetsToTxnResponse:
    body = request.body
    if not _txn_allowed(broker, request, body.transactional_id, Operation.WRITE):
        code: int = TXN_DENIED
    elif not _group_allowed(broker, request, body.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        code = await broker.transactions.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id
        )
    code = fenced_code(code, request.api_version, FENCED_SINCE["add_offsets"])
    return build(request.response_class, throttle_time=NO_THROTTLE, error_code=error_code(code))


async def end_txn(broker: Broker, request: Request[EndTxnRequest]) -> EndTxnResponse:
    body = request.body
    if not _txn_allowed(broker, request, body.transactional_id, Operation.WRITE):
        return build(request.response_class, throttle_time=NO_THROTTLE, error_code=TXN_DENIED)
    code: int = await broker.transactions.end(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed
    )
    code = fenced_code(code, request.api_version, FENCED_SINCE["end"])
    return build(request.response_class, throttle_time=NO_THROTTLE, error_code=error_code(code))


async def txn_offset_commit(
    broker: Broker, request: Request[TxnOffsetCommitRequest]
) -> TxnOffsetCommitResponse:
    body = request.body
    schema = request.response_class
    offsets = {
        (t.name, p.partition_index): (
            p.committed_offset,
            p.committed_metadata,
            p.committed_leader_epoch if has_leader_epoch(p) else -1,
        )
        for t in body.topics
        for p in t.partitions
    }
    codes: dict[tuple[str, int], int]  # a Kafka code (Code, ErrorCode or the group's)
    if not _txn_allowed(broker, request, body.transactional_id, Operation.WRITE):
        codes = dict.fromkeys(offsets, TXN_DENIED)
    elif not _group_allowed(broker, request, body.group_id):
        codes = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
    else:
        readable = {
            t for t, _ in offsets if allowed(broker, request, Operation.READ, ResourceType.TOPIC, t)
        }
        generation, member_id, instance_id = (
            (body.generation_id, body.member_id, body.group_instance_id)
            if names_member(body)
            else (-1, "", None)
        )
        try:
            codes = await broker.transactions.commit_offsets(
                body.transactional_id,
                body.group_id,
                body.producer_id,
                body.producer_epoch,
                {tp: o for tp, o in offsets.items() if tp[0] in readable},
                generation=generation,
                member_id=member_id,
                instance_id=instance_id,
            )
        except StorageUnavailable:  # Redis away: as OffsetCommit, the client retries
            codes = dict.fromkeys(offsets, UNAVAILABLE)
        for tp in offsets:
            if tp[0] not in readable:
                codes[tp] = ErrorCode.topic_authorization_failed
    errors = {tp: error_code(code) for tp, code in codes.items()}
    topics = topic_errors(schema, "TxnOffsetCommit", body, errors)
    return build(schema, throttle_time=NO_THROTTLE, topics=topics)


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


async def describe_transactions(
    broker: Broker, request: Request[DescribeTransactionsRequest]
) -> DescribeTransactionsResponse:
    schema = request.response_class
    state_class, topic_class = request.response_entities("TransactionState", "TopicData")
    states = []
    for transactional_id in request.body.transactional_ids:
        visible = _txn_allowed(broker, request, transactional_id, Operation.DESCRIBE)
        code = ErrorCode.transactional_id_not_found if visible else TXN_DENIED
        try:
            txn = await broker.transactions.describe(transactional_id) if visible else None
        except StorageUnavailable:  # Redis away: the coordinator cannot serve, retried
            txn, code = None, UNAVAILABLE
        if txn is None:
            states.append(
                build(
                    state_class,
                    error_code=code,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=datetime.timedelta(0),
                    transaction_start_time=_time(0),  # the schema default, as Kafka sends
                    producer_id=NO_PRODUCER_ID,
                    producer_epoch=NO_PRODUCER_EPOCH,
                    topics=(),
                )
            )
            continue
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            topics.setdefault(topic, []).append(partition)
        states.append(
            build(
                state_class,
                error_code=ErrorCode.none,
                transactional_id=transactional_id,
                transaction_state=str(txn.state),
                transaction_timeout=datetime.timedelta(milliseconds=txn.timeout_ms),
                transaction_start_time=_time(txn.start_ms),
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=tuple(
                    build(topic_class, topic=t, partitions=tuple(p)) for t, p in topics.items()
                ),
            )
        )
    return build(schema, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


async def list_transactions(
    broker: Broker, request: Request[ListTransactionsRequest]
) -> ListTransactionsResponse:
    body = request.body
    state_class = request.response_entity("TransactionState")
    listing = await broker.transactions.listing(
        body.state_filters,
        body.producer_id_filters,
        body.duration_filter if filters_duration(body) else -1,
        body.transactional_id_pattern if filters_pattern(body) else None,
    )
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        error_code=error_code(listing.error),
        unknown_state_filters=tuple(listing.unknown_states),
        transaction_states=tuple(
            build(
                state_class,
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=str(t.state),
            )
            for t in listing.transactions
            if _txn_allowed(broker, request, t.transactional_id, Operation.DESCRIBE)
        ),
    )
