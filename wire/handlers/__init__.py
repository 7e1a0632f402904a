"""The API table: every Kafka API this broker answers, its versions and its handler.

The version ranges are chosen so the clients we test (librdkafka, kafka-python, aiokafka,
kafkajs, the Java client) each land on a version we implement; see README.txt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import KafkaesqueError, StorageUnavailable
from kafkaesque.hot.outage import REDIS, REDIS_CONNECTION_ERRORS
from wire.broker import Broker
from wire.errors import error_code
from wire.handlers import (
    acls,
    admin,
    cluster,
    configs,
    consumer_groups,
    fetch,
    group_offsets,
    groups,
    log_dirs,
    metadata,
    offsets,
    produce,
    producers,
    quotas,
    records,
    sasl,
    scram_users,
    share_fetch,
    share_groups,
    topic_partitions,
    transactions,
)
from wire.protocol.codec import NO_THROTTLE, Request, build, error_response

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        ApiVersionEntry,
        ApiVersionsRequest,
        ApiVersionsResponse,
    )

Handler = Callable[[Broker, Request], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Api:
    min_version: int
    max_version: int
    handler: Handler
    # A group coordinator's API: its clients look for the coordinator again on
    # COORDINATOR_NOT_AVAILABLE, the code Kafka gives while a coordinator cannot serve.
    coordinator: bool = False


async def handle(broker: Broker, request: Request) -> Any:
    """The handler's response; a refusal that failed the request as a whole (Redis away
    for a group's state, say) becomes the top-level error code of its response, if the
    version has one; otherwise it is raised and the connection closes."""
    api = HANDLERS[request.api_key]
    try:
        return await api.handler(broker, request)
    except KafkaesqueError as exc:
        unavailable = isinstance(exc, StorageUnavailable)
        if api.coordinator and unavailable:
            code = ErrorCode.coordinator_not_available
        else:
            code = error_code(exc)
        response = error_response(request.response_class, code)
        if response is None:
            raise
        return response
    except REDIS_CONNECTION_ERRORS as exc:
        # redis-py's own error, not translated by the core: Redis is away all the same.
        REDIS.failed(exc)  # logged once per outage
        code = (
            ErrorCode.coordinator_not_available
            if api.coordinator
            else ErrorCode.kafka_storage_error
        )
        response = error_response(request.response_class, code)
        if response is None:
            raise
        return response


async def api_versions(broker: Broker, request: Request[ApiVersionsRequest]) -> ApiVersionsResponse:
    """Every api key this broker answers and its versions (``supported``)."""
    version = request.response_entity("ApiVersion")
    keys: tuple[ApiVersionEntry, ...] = tuple(
        build(version, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(supported().items())
    )
    return build(
        request.response_class, error_code=ErrorCode.none, api_keys=keys, throttle_time=NO_THROTTLE
    )


# api key (names: kio.schema.index.api_key_map) -> versions and handler.
HANDLERS: dict[int, Api] = {
    # The data path at Kafka 4.0's versions, so clients infer a 4.x broker (kafka-python
    # takes ListOffsets v10 for 4.0) and use its newest features.
    # Produce from v0 because librdkafka before 2.11 only compresses when Produce v0 is
    # offered (Kafka 4 advertises it too); kio (like Kafka 4) parses v3 and later, and no
    # current client sends older. v8: record_errors, v9 flexible, v10 leader hints.
    0: Api(0, 12, produce.produce),
    # v12 diverging_epoch, v13 topic ids, v15 replica_state, v16 leader hints.
    1: Api(4, 17, fetch.fetch),
    # ListOffsets v4+ carries leader epochs (KIP-320), v6 is flexible; v7 max timestamp
    # (-3), v8 earliest local (-4), v9 latest tiered (-5), v10 a timeout.
    2: Api(1, 10, offsets.list_offsets),
    # v9+ is what makes librdkafka trust the leader epochs (rd_kafka_has_reliable_leader_
    # epochs), so it sends them in Fetch and validates its position after an epoch change.
    3: Api(0, 12, metadata.metadata),
    # The classic group APIs at Kafka 4's versions (OffsetFetch v8+: several groups at once).
    8: Api(2, 9, group_offsets.offset_commit, coordinator=True),
    9: Api(1, 9, group_offsets.offset_fetch, coordinator=True),
    10: Api(0, 6, groups.find_coordinator),
    11: Api(0, 9, groups.join_group, coordinator=True),
    12: Api(0, 4, groups.heartbeat, coordinator=True),
    13: Api(0, 5, groups.leave_group, coordinator=True),
    14: Api(0, 5, groups.sync_group, coordinator=True),
    15: Api(0, 5, groups.describe_groups, coordinator=True),
    16: Api(0, 5, groups.list_groups, coordinator=True),
    18: Api(0, 4, api_versions),
    19: Api(2, 7, admin.create_topics),
    20: Api(1, 6, admin.delete_topics),  # v6: by topic id
    21: Api(0, 2, records.delete_records),  # v2 is flexible
    22: Api(0, 5, transactions.init_producer_id),  # v3+ may carry the producer's id and epoch
    23: Api(2, 4, offsets.offset_for_leader_epoch),  # v4 is flexible
    32: Api(1, 4, configs.describe_configs),
    33: Api(0, 2, configs.alter_configs),
    34: Api(1, 2, log_dirs.alter_replica_log_dirs),  # Kafka 4 dropped v0
    35: Api(1, 4, log_dirs.describe_log_dirs),  # Kafka 4 dropped v0
    37: Api(0, 3, admin.create_partitions),
    42: Api(0, 2, groups.delete_groups, coordinator=True),
    43: Api(0, 2, cluster.elect_leaders),
    44: Api(0, 1, configs.incremental_alter_configs),
    45: Api(0, 0, cluster.alter_partition_reassignments),
    46: Api(0, 0, cluster.list_partition_reassignments),
    47: Api(0, 0, group_offsets.offset_delete, coordinator=True),
    48: Api(0, 1, quotas.describe_client_quotas),
    49: Api(0, 1, quotas.alter_client_quotas),
    55: Api(0, 2, cluster.describe_quorum),
    60: Api(0, 2, metadata.describe_cluster),
    61: Api(0, 0, producers.describe_producers),
    # KIP-848, the consumer group protocol: v1 has client-generated member ids (KIP-1082).
    68: Api(0, 1, consumer_groups.consumer_group_heartbeat, coordinator=True),
    69: Api(0, 1, consumer_groups.consumer_group_describe, coordinator=True),
    75: Api(0, 0, topic_partitions.describe_topic_partitions),
    # Share groups (KIP-932) at Kafka 4.2's versions: ShareFetch/ShareAcknowledge v2
    # renew acknowledgements (KIP-1222); v0 was early access, gone.
    76: Api(1, 1, share_groups.share_group_heartbeat, coordinator=True),
    77: Api(1, 1, share_groups.share_group_describe, coordinator=True),
    78: Api(1, 2, share_fetch.share_fetch),
    79: Api(1, 2, share_fetch.share_acknowledge),
    90: Api(0, 1, share_groups.describe_share_group_offsets, coordinator=True),
    91: Api(0, 0, share_groups.alter_share_group_offsets, coordinator=True),
    92: Api(0, 0, share_groups.delete_share_group_offsets, coordinator=True),
    # ACLs at Kafka 4's versions (v0 is gone there); SECURITY_DISABLED without --authorizer.
    29: Api(1, 3, acls.describe_acls),
    30: Api(1, 3, acls.create_acls),
    31: Api(1, 3, acls.delete_acls),
    # Transactions (protocol version 1): EndTxn v5 and TxnOffsetCommit v5 are KIP-890's
    # version 2 (an epoch bump per transaction, implicit AddOffsetsToTxn); not offered.
    # AddPartitionsToTxn v4+ is the brokers' batched form, v5 and AddOffsetsToTxn v4 only
    # allow TRANSACTION_ABORTABLE, which this coordinator never answers.
    24: Api(0, 5, transactions.add_partitions_to_txn, coordinator=True),
    25: Api(0, 4, transactions.add_offsets_to_txn, coordinator=True),
    26: Api(0, 4, transactions.end_txn, coordinator=True),
    28: Api(0, 4, transactions.txn_offset_commit, coordinator=True),
    65: Api(0, 0, transactions.describe_transactions),
    66: Api(0, 2, transactions.list_transactions),
    # SASL (on SASL listeners; v0 handshake: raw tokens follow) and SCRAM users (KIP-554).
    17: Api(0, 1, sasl.sasl_handshake),
    36: Api(0, 2, sasl.sasl_authenticate),
    50: Api(0, 0, scram_users.describe_user_scram_credentials),
    51: Api(0, 0, scram_users.alter_user_scram_credentials),
}


def supported() -> dict[int, tuple[int, int]]:
    """api key -> (min version, max version), as ApiVersions answers."""
    return {key: (api.min_version, api.max_version) for key, api in HANDLERS.items()}
