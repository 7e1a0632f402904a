"""The core's exceptions: one hierarchy, and the one place Lua error replies are parsed.

Every refusal of the core is a ``KafkaesqueError`` whose message is meant for people. The
wire front end turns each class into a Kafka error code through one table
(``wire/errors.py``), the CLI into one line and an exit code (``kafkaesque/cli/base.py``).
Lua scripts refuse with an error reply "NAME message"; ``LUA_ERRORS`` names the class for
each NAME (kafkaesque/hot/redis_errors.py turns replies and Redis' failures into these).
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """The Kafka error codes the coordinators (groups, transactions) answer per item, where
    a result is an outcome rather than a failure to raise; ``wire/errors.py`` turns them
    and the exceptions below into the response's code."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_NOT_AVAILABLE = 15
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    OPERATION_NOT_ATTEMPTED = 55
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    INVALID_REGULAR_EXPRESSION = 128


class KafkaesqueError(Exception):
    """A request the core refuses; the message is meant for people."""


class Refused(KafkaesqueError):
    """A coordinator's refusal that carries its own Kafka code (a group heartbeat's, a
    share session's): the state machine decides the code, not the exception's class."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def invalid(cls, message: str) -> Refused:
        """INVALID_REQUEST: a request that fails Kafka's own checks of its fields."""
        return cls(Code.INVALID_REQUEST, message)


# -- topics and their settings -----------------------------------------------------------
class InvalidTopic(KafkaesqueError):
    """A topic name Kafka would not accept."""


class InvalidConfig(KafkaesqueError):
    """A topic setting out of range or unknown."""


class InvalidPartitions(InvalidConfig):
    """A partition count that is not allowed (a topic never shrinks)."""


class InvalidReplication(InvalidConfig):
    """A replication factor or replica assignment this single broker cannot give."""


class InvalidReplicaAssignment(InvalidReplication):
    """Replicas named for a partition that this broker cannot give it: another broker,
    none, or one twice."""


class TopicExists(KafkaesqueError):
    pass


class UnknownTopic(KafkaesqueError):
    """No such topic, or no such partition of it."""


class UnknownTopicId(KafkaesqueError):
    """No topic has this topic id (Fetch v13+ names topics by id only)."""


class InvalidRequest(KafkaesqueError):
    """A request whose fields contradict each other or ask for what is not offered."""


# -- replicas: one broker holds and leads every partition --------------------------------
class ElectionNotNeeded(KafkaesqueError):
    """A leader election asked for a partition whose leader is already the one wanted."""


class NoReassignmentInProgress(KafkaesqueError):
    """A reassignment was cancelled that is not in progress (none ever is)."""


class Conflict(KafkaesqueError):
    """The topic changed between a read and a write: read again and retry."""


class PolicyViolation(KafkaesqueError):
    """A request the topic's configs forbid: deleting records of a topic whose
    cleanup.policy lacks delete (Kafka's POLICY_VIOLATION)."""


# -- appends -------------------------------------------------------------------------------
class InvalidRecord(KafkaesqueError, ValueError):
    """A batch whose content breaks the format's rules (Kafka's INVALID_RECORD: a client
    sending the same bytes again gets the same answer). ``records`` are the indexes, within
    their batch, of the records at fault when they are known (Produce v8+ record_errors)."""

    def __init__(self, message: str, records: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.records = records


class CorruptBatch(InvalidRecord):
    """A batch whose bytes were damaged: lengths or CRC do not match (Kafka's
    CORRUPT_MESSAGE, which clients retry)."""


class InvalidTimestamp(InvalidRecord):
    """A batch whose CreateTime timestamps lie further in the past or future than the
    topic's message.timestamp.before/after.max.ms allow (Kafka's INVALID_TIMESTAMP)."""


class RecordTooLarge(KafkaesqueError):
    """A batch larger than the broker's (or topic's) max message bytes."""


class ProducerFenced(KafkaesqueError):
    """An idempotent producer's batch refused by the sequence check; nothing was written."""


class OutOfOrderSequence(ProducerFenced):
    """A gap in the producer's sequence numbers."""


class SequenceAhead(ProducerFenced):
    """A batch whose sequence number is ahead of the next expected: an earlier one of the
    producer was refused (an outage) and is still to be retried. Retriable, so the client
    sends both again in order instead of renumbering them under a new epoch."""


class InvalidProducerEpoch(ProducerFenced):
    """A batch from an older epoch of the producer."""


class TransactionNotOpen(KafkaesqueError):
    """A transactional batch for a partition its producer's ongoing transaction does not
    hold: a late batch of a transaction that ended (the client timed it out), which
    would otherwise open one nothing ends (Kafka's INVALID_TXN_STATE)."""


class UnknownProducerId(ProducerFenced):
    """A producer in mid-sequence this partition has no state for (Redis lost it, or the
    id expired): clients bump their epoch and go on (KIP-360)."""


# -- reads -------------------------------------------------------------------------------
class OffsetOutOfRange(KafkaesqueError):
    """An offset below the log start (retention with no archive, or DeleteRecords) or past
    the log end."""


class LogTruncated(KafkaesqueError):
    """The partition's log was truncated below our position (Redis lost records it had
    not archived): offsets we already read now hold other records."""


class FencedLeaderEpoch(KafkaesqueError):
    """The client's leader epoch is older than the partition's (KIP-320)."""


class NotLeader(KafkaesqueError):
    """Another broker leads the partition: the client asks Metadata again (retriable)."""


class DuplicateBroker(KafkaesqueError):
    """Another live broker, at another address, is registered with this node id."""


class UnknownSession(KafkaesqueError):
    """This broker's registration is gone (expired, or Redis lost it): register again."""


class UnknownLeaderEpoch(KafkaesqueError):
    """The client's leader epoch is newer than any this partition had."""


class UnsupportedLookup(KafkaesqueError):
    """A ListOffsets special timestamp the request's version does not have (-3 max
    timestamp before v7, -4 earliest local before v8, -5 latest tiered before v9) or that
    is unknown: an error, not a wrong answer."""


class LookupTimedOut(KafkaesqueError):
    """An offset lookup that did not finish within the request's timeout (ListOffsets v10)."""


# -- storage -------------------------------------------------------------------------------
class StorageUnavailable(KafkaesqueError):
    """A store the request needs (the archive) cannot be reached right now; retry later."""


class NeedsRecovery(KafkaesqueError):
    """Redis has lost its data; appends wait until the archive restored the offsets."""


class HotTierUnavailable(StorageUnavailable):
    """Redis cannot serve right now: unreachable, loading its data, read-only (a replica)
    or refusing writes; retry later. Raised for every command by the broker's client
    (kafkaesque.hot.tier), so each request gets a retriable error instead of a traceback."""


class HotTierFull(HotTierUnavailable):
    """Redis is at its maxmemory: appends wait until the archiver frees archived pages."""


class NotEnoughReplicas(KafkaesqueError):
    """Too few Redis replicas are in sync for acks=all (append.lua), or Redis refuses
    writes for lack of them (min-replicas-to-write); nothing written."""


class NotDurable(KafkaesqueError):
    """The append was made but not confirmed on disk (or by the replicas) in time: the
    producer retries, and its sequence numbers keep the retry from duplicating."""


# -- groups --------------------------------------------------------------------------------
class GroupBusy(KafkaesqueError):
    """The group has active members, so it cannot be changed from outside."""


# -- transactions --------------------------------------------------------------------------
class TransactionalIdBusy(KafkaesqueError):
    """A transactional id's lock stayed taken past its wait (another request holds it) or
    was lost while held: the request answers CONCURRENT_TRANSACTIONS, and the client
    retries."""


# -- authorization -------------------------------------------------------------------------
class AuthorizationFailed(KafkaesqueError):
    """The client's principal may not do this (the ACLs say no)."""


class TopicAuthorizationFailed(AuthorizationFailed):
    pass


class GroupAuthorizationFailed(AuthorizationFailed):
    pass


class ClusterAuthorizationFailed(AuthorizationFailed):
    pass


class TransactionalIdAuthorizationFailed(AuthorizationFailed):
    pass


class SecurityDisabled(KafkaesqueError):
    """An ACL request to a broker whose authorizer is off."""


# -- authentication and SCRAM users --------------------------------------------------------
class AuthenticationFailed(KafkaesqueError):
    """SASL authentication refused: wrong password, unknown user, bad SCRAM message."""


class UnsupportedSaslMechanism(KafkaesqueError):
    """A SASL or SCRAM mechanism this broker does not offer."""


class IllegalSaslState(KafkaesqueError):
    """A SASL request out of order (or on a listener without SASL)."""


class UnacceptableCredential(KafkaesqueError):
    """A SCRAM credential Kafka would refuse: too few or too many iterations, no name."""


class CredentialNotFound(KafkaesqueError):
    """A SCRAM credential asked for (described, deleted) that does not exist."""


class DuplicateResource(KafkaesqueError):
    """The same user named twice in one SCRAM credentials request."""


def all_errors() -> list[type[KafkaesqueError]]:
    """Every core exception class (for the tests that check each has a mapping)."""
    found, todo = [], [KafkaesqueError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


# The error reply names the Lua scripts use ("NAME message").
LUA_ERRORS: dict[str, type[KafkaesqueError]] = {
    "UNKNOWN_TOPIC_OR_PARTITION": UnknownTopic,
    "TOPIC_EXISTS": TopicExists,
    "NEEDS_RECOVERY": NeedsRecovery,
    "CONFLICT": Conflict,
    "OUT_OF_ORDER_SEQUENCE_NUMBER": OutOfOrderSequence,
    "SEQUENCE_AHEAD": SequenceAhead,
    "INVALID_PRODUCER_EPOCH": InvalidProducerEpoch,
    "UNKNOWN_PRODUCER_ID": UnknownProducerId,
    "OFFSET_OUT_OF_RANGE": OffsetOutOfRange,
    "INVALID_RECORD": InvalidRecord,
    "NOT_LEADER_OR_FOLLOWER": NotLeader,
    "INVALID_TXN_STATE": TransactionNotOpen,
    "DUPLICATE_BROKER_REGISTRATION": DuplicateBroker,
    "UNKNOWN_SESSION": UnknownSession,
    "NOT_ENOUGH_REPLICAS": NotEnoughReplicas,
}
