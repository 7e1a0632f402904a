"""The kio classes of the transaction coordinator's APIs at the versions the broker offers
(the version ranges of wire/handlers/__init__.py), for the type checker only:
wire/handlers/transactions.py imports them under ``TYPE_CHECKING``. Importing every kio
version at run time costs seconds, so nothing here is defined at run time. A module of
its own because the handlers' module with these names would pass 450 lines.

Names ending in V3Plus, V2Plus, V1Plus, V3AndBelow or Batched are the versions that carry
a field the others lack; the handlers narrow to them on the body's kio ``__version__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import kio.schema.add_offsets_to_txn.v0.request
    import kio.schema.add_offsets_to_txn.v0.response
    import kio.schema.add_offsets_to_txn.v1.request
    import kio.schema.add_offsets_to_txn.v1.response
    import kio.schema.add_offsets_to_txn.v2.request
    import kio.schema.add_offsets_to_txn.v2.response
    import kio.schema.add_offsets_to_txn.v3.request
    import kio.schema.add_offsets_to_txn.v3.response
    import kio.schema.add_offsets_to_txn.v4.request
    import kio.schema.add_offsets_to_txn.v4.response
    import kio.schema.add_partitions_to_txn.v0.request
    import kio.schema.add_partitions_to_txn.v0.response
    import kio.schema.add_partitions_to_txn.v1.request
    import kio.schema.add_partitions_to_txn.v1.response
    import kio.schema.add_partitions_to_txn.v2.request
    import kio.schema.add_partitions_to_txn.v2.response
    import kio.schema.add_partitions_to_txn.v3.request
    import kio.schema.add_partitions_to_txn.v3.response
    import kio.schema.add_partitions_to_txn.v4.request
    import kio.schema.add_partitions_to_txn.v4.response
    import kio.schema.add_partitions_to_txn.v5.request
    import kio.schema.add_partitions_to_txn.v5.response
    import kio.schema.describe_transactions.v0.request
    import kio.schema.describe_transactions.v0.response
    import kio.schema.end_txn.v0.request
    import kio.schema.end_txn.v0.response
    import kio.schema.end_txn.v1.request
    import kio.schema.end_txn.v1.response
    import kio.schema.end_txn.v2.request
    import kio.schema.end_txn.v2.response
    import kio.schema.end_txn.v3.request
    import kio.schema.end_txn.v3.response
    import kio.schema.end_txn.v4.request
    import kio.schema.end_txn.v4.response
    import kio.schema.init_producer_id.v0.request
    import kio.schema.init_producer_id.v0.response
    import kio.schema.init_producer_id.v1.request
    import kio.schema.init_producer_id.v1.response
    import kio.schema.init_producer_id.v2.request
    import kio.schema.init_producer_id.v2.response
    import kio.schema.init_producer_id.v3.request
    import kio.schema.init_producer_id.v3.response
    import kio.schema.init_producer_id.v4.request
    import kio.schema.init_producer_id.v4.response
    import kio.schema.init_producer_id.v5.request
    import kio.schema.init_producer_id.v5.response
    import kio.schema.list_transactions.v0.request
    import kio.schema.list_transactions.v0.response
    import kio.schema.list_transactions.v1.request
    import kio.schema.list_transactions.v1.response
    import kio.schema.list_transactions.v2.request
    import kio.schema.list_transactions.v2.response
    import kio.schema.txn_offset_commit.v0.request
    import kio.schema.txn_offset_commit.v0.response
    import kio.schema.txn_offset_commit.v1.request
    import kio.schema.txn_offset_commit.v1.response
    import kio.schema.txn_offset_commit.v2.request
    import kio.schema.txn_offset_commit.v2.response
    import kio.schema.txn_offset_commit.v3.request
    import kio.schema.txn_offset_commit.v3.response
    import kio.schema.txn_offset_commit.v4.request
    import kio.schema.txn_offset_commit.v4.response

    # The kio classes of the versions offered (wire/handlers/__init__.py).
    # v3+ may carry the producer's id and epoch (KIP-360).
    InitProducerIdRequestV3Plus: TypeAlias = (
        kio.schema.init_producer_id.v3.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v4.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v5.request.InitProducerIdRequest
    )
    InitProducerIdRequest: TypeAlias = (
        kio.schema.init_producer_id.v0.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v1.request.InitProducerIdRequest
        | kio.schema.init_producer_id.v2.request.InitProducerIdRequest
        | InitProducerIdRequestV3Plus
    )
    InitProducerIdResponse: TypeAlias = (
        kio.schema.init_producer_id.v0.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v1.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v2.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v3.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v4.response.InitProducerIdResponse
        | kio.schema.init_producer_id.v5.response.InitProducerIdResponse
    )
    # v0-3: one producer's partitions; v4+: the brokers' batched form (KIP-890).
    AddPartitionsToTxnRequestV3AndBelow: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v1.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v2.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v3.request.AddPartitionsToTxnRequest
    )
    AddPartitionsToTxnRequestBatched: TypeAlias = (
        kio.schema.add_partitions_to_txn.v4.request.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v5.request.AddPartitionsToTxnRequest
    )
    AddPartitionsToTxnRequest: TypeAlias = (
        AddPartitionsToTxnRequestV3AndBelow | AddPartitionsToTxnRequestBatched
    )
    AddPartitionsToTxnTopic: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.request.AddPartitionsToTxnTopic
        | kio.schema.add_partitions_to_txn.v1.request.AddPartitionsToTxnTopic
        | kio.schema.add_partitions_to_txn.v2.request.AddPartitionsToTxnTopic
        | kio.schema.add_partitions_to_txn.v3.request.AddPartitionsToTxnTopic
        | kio.schema.add_partitions_to_txn.v4.request.AddPartitionsToTxnTopic
        | kio.schema.add_partitions_to_txn.v5.request.AddPartitionsToTxnTopic
    )
    AddPartitionsToTxnResponse: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v1.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v2.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v3.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v4.response.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v5.response.AddPartitionsToTxnResponse
    )
    AddPartitionsToTxnTopicResult: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.response.AddPartitionsToTxnTopicResult
        | kio.schema.add_partitions_to_txn.v1.response.AddPartitionsToTxnTopicResult
        | kio.schema.add_partitions_to_txn.v2.response.AddPartitionsToTxnTopicResult
        | kio.schema.add_partitions_to_txn.v3.response.AddPartitionsToTxnTopicResult
        | kio.schema.add_partitions_to_txn.v4.response.AddPartitionsToTxnTopicResult
        | kio.schema.add_partitions_to_txn.v5.response.AddPartitionsToTxnTopicResult
    )
    AddPartitionsToTxnPartitionResult: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.response.AddPartitionsToTxnPartitionResult
        | kio.schema.add_partitions_to_txn.v1.response.AddPartitionsToTxnPartitionResult
        | kio.schema.add_partitions_to_txn.v2.response.AddPartitionsToTxnPartitionResult
        | kio.schema.add_partitions_to_txn.v3.response.AddPartitionsToTxnPartitionResult
        | kio.schema.add_partitions_to_txn.v4.response.AddPartitionsToTxnPartitionResult
        | kio.schema.add_partitions_to_txn.v5.response.AddPartitionsToTxnPartitionResult
    )
    AddOffsetsToTxnRequest: TypeAlias = (
        kio.schema.add_offsets_to_txn.v0.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v1.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v2.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v3.request.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v4.request.AddOffsetsToTxnRequest
    )
    AddOffsetsToTxnResponse: TypeAlias = (
        kio.schema.add_offsets_to_txn.v0.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v1.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v2.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v3.response.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v4.response.AddOffsetsToTxnResponse
    )
    EndTxnRequest: TypeAlias = (
        kio.schema.end_txn.v0.request.EndTxnRequest
        | kio.schema.end_txn.v1.request.EndTxnRequest
        | kio.schema.end_txn.v2.request.EndTxnRequest
        | kio.schema.end_txn.v3.request.EndTxnRequest
        | kio.schema.end_txn.v4.request.EndTxnRequest
    )
    EndTxnResponse: TypeAlias = (
        kio.schema.end_txn.v0.response.EndTxnResponse
        | kio.schema.end_txn.v1.response.EndTxnResponse
        | kio.schema.end_txn.v2.response.EndTxnResponse
        | kio.schema.end_txn.v3.response.EndTxnResponse
        | kio.schema.end_txn.v4.response.EndTxnResponse
    )
    # v3+ name the consumer group member (KIP-447).
    TxnOffsetCommitRequestV3Plus: TypeAlias = (
        kio.schema.txn_offset_commit.v3.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v4.request.TxnOffsetCommitRequest
    )
    TxnOffsetCommitRequest: TypeAlias = (
        kio.schema.txn_offset_commit.v0.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v1.request.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v2.request.TxnOffsetCommitRequest
        | TxnOffsetCommitRequestV3Plus
    )
    # v2+ carry the committed offset's leader epoch.
    TxnOffsetCommitPartitionV2Plus: TypeAlias = (
        kio.schema.txn_offset_commit.v2.request.TxnOffsetCommitRequestPartition
        | kio.schema.txn_offset_commit.v3.request.TxnOffsetCommitRequestPartition
        | kio.schema.txn_offset_commit.v4.request.TxnOffsetCommitRequestPartition
    )
    TxnOffsetCommitPartition: TypeAlias = (
        kio.schema.txn_offset_commit.v0.request.TxnOffsetCommitRequestPartition
        | kio.schema.txn_offset_commit.v1.request.TxnOffsetCommitRequestPartition
        | TxnOffsetCommitPartitionV2Plus
    )
    TxnOffsetCommitResponse: TypeAlias = (
        kio.schema.txn_offset_commit.v0.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v1.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v2.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v3.response.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v4.response.TxnOffsetCommitResponse
    )
    DescribeTransactionsRequest: TypeAlias = (
        kio.schema.describe_transactions.v0.request.DescribeTransactionsRequest
    )
    DescribeTransactionsResponse: TypeAlias = (
        kio.schema.describe_transactions.v0.response.DescribeTransactionsResponse
    )
    # v1+ filter by duration, v2 by a transactional id pattern.
    ListTransactionsRequestV2: TypeAlias = (
        kio.schema.list_transactions.v2.request.ListTransactionsRequest
    )
    ListTransactionsRequestV1Plus: TypeAlias = (
        kio.schema.list_transactions.v1.request.ListTransactionsRequest | ListTransactionsRequestV2
    )
    ListTransactionsRequest: TypeAlias = (
        kio.schema.list_transactions.v0.request.ListTransactionsRequest
        | ListTransactionsRequestV1Plus
    )
    ListTransactionsResponse: TypeAlias = (
        kio.schema.list_transactions.v0.response.ListTransactionsResponse
        | kio.schema.list_transactions.v1.response.ListTransactionsResponse
        | kio.schema.list_transactions.v2.response.ListTransactionsResponse
    )
