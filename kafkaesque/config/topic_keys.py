"""Kafka's topic configs: every name, its type, range, default and broker-level synonym.

The one table every front end validates and describes topic configs with. ``parse``
checks a value as Kafka's ConfigDef does and returns it in its canonical text, so a
stored value always reads back as Kafka would describe it. What each config does here
(enforced, or accepted and described only) is in ``EFFECT`` and in README.txt.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import cast

from kafkaesque.errors import InvalidConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MIN = -(2**63)


class Kind(IntEnum):
    """Kafka's config types, numbered as DescribeConfigs v3+ reports them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    kind: Kind
    default: str
    # A check of the parsed value: the reason it is refused, or None.
    check: Callable[[object], str | None] | None = None
    # The broker config that sets the default of every topic (Kafka's synonyms).
    broker: str | None = None
    enforced: bool = False  # False: accepted and described, without effect here
    doc: str = ""


# Number checks: a check runs on the value its key's Kind parsed, a number for these keys.
def at_least(low: float) -> Callable[[object], str | None]:
    return lambda v: None if cast(float, v) >= low else f"Value must be at least {low}"


def between(low: float, high: float) -> Callable[[object], str | None]:
    return lambda v: (
        None if low <= cast(float, v) <= high else f"Value must be in the range [{low}, {high}]"
    )


def one_of(*allowed: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        values = value if isinstance(value, list) else [value]
        bad = [v for v in values if v not in allowed]
        return f"String must be one of: {', '.join(allowed)}" if bad else None

    return check


def _keys(*keys: ConfigKey) -> dict[str, ConfigKey]:
    return {k.name: k for k in keys}


TOPIC_CONFIGS: dict[str, ConfigKey] = _keys(
    ConfigKey(
        "cleanup.policy",
        Kind.LIST,
        "delete",
        one_of("delete", "compact"),
        "log.cleanup.policy",
        True,
        "delete: retention removes old pages; compact: the compactor keeps the latest "
        "record per key",
    ),
    ConfigKey(
        "compression.type",
        Kind.STRING,
        "producer",
        one_of("producer", *CODECS),
        "compression.type",
        True,
        "producer: batches kept as sent; a codec: the broker recompresses to it",
    ),
    ConfigKey(
        "compression.gzip.level",
        Kind.INT,
        "-1",
        lambda v: (
            None if v == -1 or 1 <= cast(int, v) <= 9 else "Value must be -1 or in the range [1, 9]"
        ),
        "compression.gzip.level",
        True,
    ),
    ConfigKey(
        "compression.lz4.level", Kind.INT, "9", between(1, 17), "compression.lz4.level", True
    ),
    ConfigKey(
        "compression.zstd.level",
        Kind.INT,
        "3",
        between(-131072, 22),
        "compression.zstd.level",
        True,
    ),
    ConfigKey(
        "delete.retention.ms",
        Kind.LONG,
        "86400000",
        at_least(0),
        "log.cleaner.delete.retention.ms",
        True,
        "how long the compactor keeps a tombstone",
    ),
    ConfigKey(
        "file.delete.delay.ms", Kind.LONG, "60000", at_least(0), "log.segment.delete.delay.ms"
    ),
    ConfigKey(
        "flush.messages", Kind.LONG, str(LONG_MAX), at_least(1), "log.flush.interval.messages"
    ),
    ConfigKey("flush.ms", Kind.LONG, str(LONG_MAX), at_least(0), "log.flush.interval.ms"),
    ConfigKey("follower.replication.throttled.replicas", Kind.LIST, ""),
    ConfigKey("index.interval.bytes", Kind.INT, "4096", at_least(0), "log.index.interval.bytes"),
    ConfigKey("leader.replication.throttled.replicas", Kind.LIST, ""),
    ConfigKey("local.retention.bytes", Kind.LONG, "-2", at_least(-2), "log.local.retention.bytes"),
    ConfigKey("local.retention.ms", Kind.LONG, "-2", at_least(-2), "log.local.retention.ms"),
    ConfigKey(
        "max.compaction.lag.ms",
        Kind.LONG,
        str(LONG_MAX),
        at_least(1),
        "log.cleaner.max.compaction.lag.ms",
        True,
        "a record is compacted at the latest this long after it was appended",
    ),
    ConfigKey(
        "max.message.bytes",
        Kind.INT,
        "1048588",
        at_least(0),
        "message.max.bytes",
        True,
        "the largest record batch accepted",
    ),
    ConfigKey(
        "message.timestamp.after.max.ms",
        Kind.LONG,
        str(LONG_MAX),
        at_least(0),
        "log.message.timestamp.after.max.ms",
        True,
        "how far in the future a CreateTime timestamp may lie",
    ),
    ConfigKey(
        "message.timestamp.before.max.ms",
        Kind.LONG,
        str(LONG_MAX),
        at_least(0),
        "log.message.timestamp.before.max.ms",
        True,
        "how far in the past a CreateTime timestamp may lie",
    ),
    ConfigKey(
        "message.timestamp.type",
        Kind.STRING,
        "CreateTime",
        one_of("CreateTime", "LogAppendTime"),
        "log.message.timestamp.type",
        True,
        "LogAppendTime: the broker stamps each batch with the time it appends it",
    ),
    ConfigKey(
        "min.cleanable.dirty.ratio",
        Kind.DOUBLE,
        "0.5",
        between(0, 1),
        "log.cleaner.min.cleanable.ratio",
        True,
        "the share of records written since the last compaction that triggers one",
    ),
    ConfigKey(
        "min.compaction.lag.ms",
        Kind.LONG,
        "0",
        at_least(0),
        "log.cleaner.min.compaction.lag.ms",
        True,
        "a record stays uncompacted at least this long",
    ),
    ConfigKey("min.insync.replicas", Kind.INT, "1", at_least(1), "min.insync.replicas"),
    ConfigKey("preallocate", Kind.BOOLEAN, "false", None, "log.preallocate"),
    ConfigKey("remote.storage.enable", Kind.BOOLEAN, "false"),
    ConfigKey(
        "retention.bytes",
        Kind.LONG,
        "-1",
        None,
        "log.retention.bytes",
        True,
        "bytes of closed pages a partition keeps in Redis; -1: no limit",
    ),
    ConfigKey(
        "retention.ms",
        Kind.LONG,
        "-1",
        at_least(-1),
        "log.retention.ms",
        True,
        "how long a closed page is kept in Redis; -1: forever",
    ),
    ConfigKey(
        "segment.bytes",
        Kind.INT,
        "1073741824",
        at_least(1024 * 1024),
        "log.segment.bytes",
        True,
        "a page closes once it holds this many bytes",
    ),
    ConfigKey("segment.index.bytes", Kind.INT, "10485760", at_least(4), "log.index.size.max.bytes"),
    ConfigKey("segment.jitter.ms", Kind.LONG, "0", at_least(0), "log.roll.jitter.ms"),
    ConfigKey(
        "segment.ms",
        Kind.LONG,
        "604800000",
        at_least(1),
        "log.roll.ms",
        True,
        "a page closes once its first record is this old",
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        Kind.BOOLEAN,
        "false",
        None,
        "unclean.leader.election.enable",
    ),
    # kafkaesque's own: the page is Redis' segment.
    ConfigKey(
        "kafkaesque.page.size",
        Kind.INT,
        "4096",
        between(1, INT_MAX),
        "kafkaesque.page.size",
        True,
        "records per page (a batch is never split)",
    ),
    ConfigKey(
        "kafkaesque.max.pages",
        Kind.INT,
        "0",
        between(0, INT_MAX),
        "kafkaesque.max.pages",
        True,
        "closed pages a partition keeps in Redis; 0: no limit",
    ),
)

# Broker configs that are another unit of a topic default (Kafka's synonyms, most
# specific first): ``log.retention.hours=1`` is ``retention.ms=3600000``.
UNIT_SYNONYMS: dict[str, tuple[str, int]] = {
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.roll.hours": ("segment.ms", 3_600_000),
    "log.roll.jitter.hours": ("segment.jitter.ms", 3_600_000),
}

BROKER_SYNONYMS: dict[str, str] = {k.broker: k.name for k in TOPIC_CONFIGS.values() if k.broker}


def checked_value(key: ConfigKey, name: str, value: str) -> object:
    """``value`` parsed as ``key``'s kind and checked by its rule; InvalidConfig naming
    ``name``, with Kafka's message, otherwise."""
    try:
        parsed = _parse_value(key, value)
    except ValueError as exc:
        reason = str(exc) if key.kind is Kind.BOOLEAN or "type" in str(exc) else ""
        reason = reason or f"Not a number of type {key.kind.name}"
        raise InvalidConfig(f"Invalid value {value} for configuration {name}: {reason}") from None
    problem = key.check(parsed) if key.check is not None else None
    if problem is not None:
        raise InvalidConfig(f"Invalid value {value} for configuration {name}: {problem}")
    return parsed


def _parse_value(key: ConfigKey, value: str) -> object:
    text = value.strip()
    if key.kind is Kind.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text.lower() == "true"
    if key.kind in (Kind.INT, Kind.LONG, Kind.SHORT):
        number = int(text)
        low, high = (INT_MIN, INT_MAX) if key.kind is not Kind.LONG else (LONG_MIN, LONG_MAX)
        if not low <= number <= high:
            raise ValueError(f"Not a number of type {key.kind.name}")
        return number
    if key.kind is Kind.DOUBLE:
        real = float(text)
        if math.isnan(real):
            raise ValueError("Not a number of type DOUBLE")
        return real
    if key.kind is Kind.LIST:
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def parse(name: str, value: str | None) -> str:
    """``value`` checked as Kafka checks topic config ``name``, in canonical text; raises
    InvalidConfig naming the config (Kafka's INVALID_CONFIG)."""
    key = TOPIC_CONFIGS.get(name)
    if key is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if value is None:
        raise InvalidConfig(f"Invalid value null for configuration {name}: a value is required")
    parsed = checked_value(key, name, value)
    if isinstance(parsed, bool):
        return "true" if parsed else "false"
    if isinstance(parsed, list):
        return ",".join(parsed)
    if isinstance(parsed, float):
        return repr(parsed)
    return str(parsed)


def typed(name: str, text: str) -> object:
    """A canonical value of ``name`` as a Python value (int, float, bool, list, str)."""
    return _parse_value(TOPIC_CONFIGS[name], text)


def broker_defaults(settings: dict[str, str]) -> dict[str, str]:
    """Topic defaults from broker configs (``serve --config log.retention.hours=1``):
    topic config name -> canonical value. Raises InvalidConfig for a bad value."""
    defaults: dict[str, str] = {}
    for broker_name, value in settings.items():
        if broker_name in UNIT_SYNONYMS:
            topic_name, unit = UNIT_SYNONYMS[broker_name]
            try:
                number = int(value) * unit
            except ValueError:
                raise InvalidConfig(
                    f"Invalid value {value} for configuration {broker_name}: Not a number"
                ) from None
            defaults.setdefault(topic_name, parse(topic_name, str(number)))
        elif broker_name in BROKER_SYNONYMS:
            defaults[BROKER_SYNONYMS[broker_name]] = parse_broker_config(broker_name, value)
    return defaults


def parse_broker_config(broker_name: str, value: str) -> str:
    """The canonical value of a broker config that stands for a topic config
    (BROKER_SYNONYMS); InvalidConfig naming the broker config for a bad value."""
    topic_name = BROKER_SYNONYMS[broker_name]
    try:
        return parse(topic_name, value)
    except InvalidConfig as exc:
        raise InvalidConfig(str(exc).replace(topic_name, broker_name, 1)) from None
