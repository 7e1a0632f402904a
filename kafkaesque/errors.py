"""The core's exceptions: one hierarchy, and the one place Lua error replies are parsed.

Every refusal of the core is a ``KafkaesqueError`` whose message is meant for people. The
wire front end turns each class into a Kafka error code through one table
(``wire/errors.py``), the CLI into one line and an exit code (``kafkaesque/cli/base.py``).
Lua scripts refuse with an error reply "NAME message"; ``from_lua`` maps NAME to the class.
"""

from __future__ import annotations

from redis.exceptions import ResponseError


class KafkaesqueError(Exception):
    """A request the core refuses; the message is meant for people."""


# -- topics and their settings -----------------------------------------------------------
class InvalidTopic(KafkaesqueError):
    """A topic name Kafka would not accept."""


class InvalidConfig(KafkaesqueError):
    """A topic setting out of range or unknown."""


class InvalidPartitions(InvalidConfig):
    """A partition count that is not allowed (a topic never shrinks)."""


class InvalidReplication(InvalidConfig):
    """A replication factor or replica assignment this single broker cannot give."""


class TopicExists(KafkaesqueError):
    pass


class UnknownTopic(KafkaesqueError):
    """No such topic, or no such partition of it."""


class Conflict(KafkaesqueError):
    """The topic changed between a read and a write: read again and retry."""


# -- appends -------------------------------------------------------------------------------
class InvalidRecord(KafkaesqueError, ValueError):
    """A batch whose content breaks the format's rules (Kafka's INVALID_RECORD: a client
    sending the same bytes again gets the same answer)."""


class CorruptBatch(InvalidRecord):
    """A batch whose bytes were damaged: lengths or CRC do not match (Kafka's
    CORRUPT_MESSAGE, which clients retry)."""


class RecordTooLarge(KafkaesqueError):
    """A batch larger than the broker's (or topic's) max message bytes."""


class ProducerFenced(KafkaesqueError):
    """An idempotent producer's batch refused by the sequence check; nothing was written."""


class OutOfOrderSequence(ProducerFenced):
    """A gap in the producer's sequence numbers."""


class InvalidProducerEpoch(ProducerFenced):
    """A batch from an older epoch of the producer."""


class UnknownProducerId(ProducerFenced):
    """A producer in mid-sequence this partition has no state for (Redis lost it, or the
    id expired): clients bump their epoch and go on (KIP-360)."""


# -- reads -------------------------------------------------------------------------------
class OffsetOutOfRange(KafkaesqueError):
    """An offset below the log start (retention, no archive) or past the log end."""


class LogTruncated(KafkaesqueError):
    """The partition's log was truncated below our position (Redis lost records it had
    not archived): offsets we already read now hold other records."""


class FencedLeaderEpoch(KafkaesqueError):
    """The client's leader epoch is older than the partition's (KIP-320)."""


class UnknownLeaderEpoch(KafkaesqueError):
    """The client's leader epoch is newer than any this partition had."""


class UnsupportedLookup(KafkaesqueError):
    """A ListOffsets special timestamp (-3 max timestamp, -4 earliest local, ...) that the
    advertised versions do not have: an error, not a wrong answer."""


# -- storage -------------------------------------------------------------------------------
class StorageUnavailable(KafkaesqueError):
    """A store the request needs (the archive) cannot be reached right now; retry later."""


class NeedsRecovery(KafkaesqueError):
    """Redis has lost its data; appends wait until the archive restored the offsets."""


# -- groups --------------------------------------------------------------------------------
class GroupBusy(KafkaesqueError):
    """The group has active members, so it cannot be changed from outside."""


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
    "INVALID_PRODUCER_EPOCH": InvalidProducerEpoch,
    "UNKNOWN_PRODUCER_ID": UnknownProducerId,
}


def from_lua(exc: ResponseError) -> Exception:
    """The core exception a script's error reply stands for; other replies (a Redis
    error such as OOM) are returned as they are."""
    name, _, message = str(exc).partition(" ")
    cls = LUA_ERRORS.get(name)
    return exc if cls is None else cls(message)
