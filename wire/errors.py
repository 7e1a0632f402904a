"""The one table from core exceptions to Kafka error codes, used by every handler."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kafkaesque import errors as core
from kafkaesque.errors import Code

# Most specific class first is not needed: ``error_code`` walks each exception's MRO, so
# a subclass without its own entry gets its parent's code.
ERROR_CODES: dict[type[core.KafkaesqueError], ErrorCode] = {
    core.KafkaesqueError: ErrorCode.unknown_server_error,
    core.InvalidTopic: ErrorCode.invalid_topic_exception,
    core.InvalidConfig: ErrorCode.invalid_config,
    core.InvalidPartitions: ErrorCode.invalid_partitions,
    core.InvalidReplication: ErrorCode.invalid_replication_factor,
    core.InvalidReplicaAssignment: ErrorCode.invalid_replica_assignment,
    core.TopicExists: ErrorCode.topic_already_exists,
    core.UnknownTopic: ErrorCode.unknown_topic_or_partition,
    core.UnknownTopicId: ErrorCode.unknown_topic_id,
    core.InvalidRequest: ErrorCode.invalid_request,
    core.ElectionNotNeeded: ErrorCode.election_not_needed,
    core.NoReassignmentInProgress: ErrorCode.no_reassignment_in_progress,
    # Only seen when a retry loop gives up; clients retry a storage error.
    core.Conflict: ErrorCode.kafka_storage_error,
    core.PolicyViolation: ErrorCode.policy_violation,
    core.InvalidRecord: ErrorCode.invalid_record,
    core.CorruptBatch: ErrorCode.corrupt_message,  # damaged in transit: clients retry
    core.InvalidTimestamp: ErrorCode.invalid_timestamp,
    core.RecordTooLarge: ErrorCode.message_too_large,
    core.ProducerFenced: ErrorCode.out_of_order_sequence_number,
    core.OutOfOrderSequence: ErrorCode.out_of_order_sequence_number,
    # Retriable and "nothing written": the client retries the earlier batch first. Kafka's
    # OUT_OF_ORDER here makes librdkafka bump its epoch and write an unanswered batch twice.
    core.SequenceAhead: ErrorCode.not_enough_replicas,
    core.InvalidProducerEpoch: ErrorCode.invalid_producer_epoch,
    core.UnknownProducerId: ErrorCode.unknown_producer_id,
    core.TransactionNotOpen: ErrorCode.invalid_txn_state,
    core.OffsetOutOfRange: ErrorCode.offset_out_of_range,
    core.LogTruncated: ErrorCode.offset_out_of_range,
    core.FencedLeaderEpoch: ErrorCode.fenced_leader_epoch,
    core.NotLeader: ErrorCode.not_leader_or_follower,
    core.DuplicateBroker: ErrorCode.duplicate_broker_registration,
    core.UnknownSession: ErrorCode.unknown_server_error,  # handled by the registry itself
    core.UnknownLeaderEpoch: ErrorCode.unknown_leader_epoch,
    core.UnsupportedLookup: ErrorCode.unsupported_version,
    core.LookupTimedOut: ErrorCode.request_timed_out,
    # Redis lost its data and the archive cannot restore the offsets yet, or the archive
    # an old offset lives in cannot be reached: retriable.
    core.StorageUnavailable: ErrorCode.kafka_storage_error,
    core.NeedsRecovery: ErrorCode.kafka_storage_error,
    # Redis unreachable, loading, read-only, or full: retriable, and an idempotent
    # producer's retry cannot duplicate (its sequence numbers are checked in the append).
    core.HotTierUnavailable: ErrorCode.kafka_storage_error,
    core.HotTierFull: ErrorCode.kafka_storage_error,
    core.NotEnoughReplicas: ErrorCode.not_enough_replicas,
    # Appended but not yet on disk (WAITAOF) or at the replicas (WAIT) in time.
    core.NotDurable: ErrorCode.not_enough_replicas_after_append,
    core.GroupBusy: ErrorCode.non_empty_group,
    # The coordinators answer it as a code; retriable, should one ever escape them.
    core.TransactionalIdBusy: ErrorCode.concurrent_transactions,
    core.AuthorizationFailed: ErrorCode.cluster_authorization_failed,
    core.TopicAuthorizationFailed: ErrorCode.topic_authorization_failed,
    core.GroupAuthorizationFailed: ErrorCode.group_authorization_failed,
    core.ClusterAuthorizationFailed: ErrorCode.cluster_authorization_failed,
    core.TransactionalIdAuthorizationFailed: ErrorCode.transactional_id_authorization_failed,
    core.SecurityDisabled: ErrorCode.security_disabled,
    core.AuthenticationFailed: ErrorCode.sasl_authentication_failed,
    core.UnsupportedSaslMechanism: ErrorCode.unsupported_sasl_mechanism,
    core.IllegalSaslState: ErrorCode.illegal_sasl_state,
    core.UnacceptableCredential: ErrorCode.unacceptable_credential,
    core.CredentialNotFound: ErrorCode.resource_not_found,
    core.DuplicateResource: ErrorCode.duplicate_resource,
}


def error_code(error: BaseException | Code | int | None) -> ErrorCode:
    """The Kafka error code for a core exception (or a coordinator's outcome, or none)."""
    if error is None:
        return ErrorCode.none
    if isinstance(error, (Code, int)):
        # the group and transaction state machines speak Kafka's codes
        return ErrorCode(int(error))
    if isinstance(error, core.Refused):
        return ErrorCode(int(error.code))
    for cls in type(error).__mro__:
        code = ERROR_CODES.get(cls)
        if code is not None:
            return code
    raise TypeError(f"no Kafka error code for {type(error).__name__}") from error


def error_message(error: BaseException | None) -> str | None:
    """The human message a response's error_message field carries."""
    return None if error is None else str(error)
