"""Group configs (Kafka 4.2's GroupConfig: KIP-848 consumer groups, share groups, streams
groups): each config's type, range, default and broker synonym; parsing one value and
checking a group's whole set against the broker's bounds. Topic configs are in
kafkaesque/config/topic_keys.py, whose parsing this shares."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kafkaesque.config.topic_keys import ConfigKey, Kind, at_least, checked_value, one_of
from kafkaesque.errors import InvalidConfig


@dataclass(frozen=True, slots=True)
class GroupKey:
    """A group config (Kafka 4.2's GroupConfig): its broker synonym sets the default of
    every group, and the broker's min/max configs bound it (``None``: no such bound)."""

    name: str
    kind: Kind
    default: str
    check: Callable[[object], str | None] | None
    broker: str
    low: tuple[str, int] | None = None  # (broker config, Kafka's default) of the minimum
    high: tuple[str, int] | None = None  # ... of the maximum
    enforced: bool = False  # False: accepted and described, without effect here
    doc: str = ""


def _share_reset(value: object) -> str | None:
    """share.auto.offset.reset: earliest, latest or by_duration:<ISO-8601 duration>."""
    text = str(value).lower()
    if text in ("earliest", "latest"):
        return None
    if text.startswith("by_duration:"):
        duration = text.removeprefix("by_duration:")
        if re.fullmatch(r"p(?:\d+d)?(?:t(?:\d+h)?(?:\d+m)?(?:\d+(?:\.\d+)?s)?)?", duration) and (
            duration not in ("p", "pt")
        ):
            return None
        return f"Invalid duration {duration}"
    return (
        "Invalid value for share.auto.offset.reset. Must be one of: earliest, latest, by_duration"
    )


def _bounded(
    name: str,
    default: int,
    least: int,
    low: int | None,
    high: int,
    doc: str = "",
    enforced: bool = True,
) -> GroupKey:
    """An int group config whose broker synonym is "group." + ``name`` and whose bounds
    are the broker's group.KIND.min./max. configs of the rest of the name (Kafka's
    defaults ``low``, ``high``; ``low`` None: no minimum)."""
    kind, rest = name.split(".", 1)
    minimum = None if low is None else (f"group.{kind}.min.{rest}", low)
    maximum = (f"group.{kind}.max.{rest}", high)
    broker = f"group.{name}"
    return GroupKey(
        name, Kind.INT, str(default), at_least(least), broker, minimum, maximum, enforced, doc
    )


GROUP_CONFIGS: dict[str, GroupKey] = {
    k.name: k
    for k in (
        _bounded(
            "consumer.session.timeout.ms",
            45000,
            1,
            45000,
            60000,
            "a consumer-protocol member without heartbeats this long is removed",
        ),
        _bounded(
            "consumer.heartbeat.interval.ms",
            5000,
            1,
            5000,
            15000,
            "how often consumer-protocol members are told to heartbeat",
        ),
        _bounded(
            "share.session.timeout.ms",
            45000,
            1,
            45000,
            60000,
            "a share group member without heartbeats this long is removed",
        ),
        _bounded(
            "share.heartbeat.interval.ms",
            5000,
            1,
            5000,
            15000,
            "how often share group members are told to heartbeat",
        ),
        _bounded(
            "share.record.lock.duration.ms",
            30000,
            1000,
            15000,
            60000,
            "how long a member holds a record it acquired before it is delivered again",
        ),
        _bounded(
            "share.delivery.count.limit",
            5,
            2,
            2,
            10,
            "deliveries of a record before it is archived",
        ),
        _bounded(
            "share.partition.max.record.locks",
            2000,
            100,
            100,
            10000,
            "records in flight per share-partition at most",
        ),
        GroupKey(
            "share.auto.offset.reset",
            Kind.STRING,
            "latest",
            _share_reset,
            "group.share.auto.offset.reset",
            enforced=True,
            doc="where a new share-partition starts",
        ),
        GroupKey(
            "share.isolation.level",
            Kind.STRING,
            "read_uncommitted",
            one_of("read_committed", "read_uncommitted"),
            "group.share.isolation.level",
            enforced=True,
            doc="read_committed: aborted transactions' records are never acquired",
        ),
        GroupKey(
            "share.renew.acknowledge.enable",
            Kind.BOOLEAN,
            "true",
            None,
            "group.share.renew.acknowledge.enable",
            enforced=True,
            doc="whether RENEW acknowledgements (ShareFetch/ShareAcknowledge v2) extend locks",
        ),
        _bounded("streams.session.timeout.ms", 45000, 1, 45000, 60000, enforced=False),
        _bounded("streams.heartbeat.interval.ms", 5000, 1, 5000, 15000, enforced=False),
        GroupKey(
            "streams.num.standby.replicas",
            Kind.INT,
            "0",
            at_least(0),
            "group.streams.num.standby.replicas",
            None,
            ("group.streams.max.standby.replicas", 2),
        ),
        GroupKey(
            "streams.initial.rebalance.delay.ms",
            Kind.INT,
            "3000",
            at_least(0),
            "group.streams.initial.rebalance.delay.ms",
        ),
    )
}

# The pairs whose session timeout must exceed the heartbeat interval, as Kafka checks them.
_SESSION_OVER_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)


def parse_group(name: str, value: str | None) -> str:
    """A group config's value checked on its own (type, range) in canonical text; raises
    InvalidConfig with Kafka's message (INVALID_CONFIG)."""
    key = GROUP_CONFIGS.get(name)
    if key is None:
        raise InvalidConfig(f"Unknown group config name: {name}")
    if value is None:
        raise InvalidConfig(f"Null value not supported for group configs: {name}")
    parsed = checked_value(ConfigKey(name, key.kind, key.default, key.check), name, value)
    if isinstance(parsed, bool):
        return "true" if parsed else "false"
    return str(parsed)


def check_group_configs(configs: dict[str, str], defaults: dict[str, str]) -> None:
    """Kafka's GroupConfig.validate of a group's whole set of configs (``configs``, canonical,
    over the broker's ``defaults``: group config name -> value, and the min/max bound
    configs by their broker names): each within the broker's bounds, and each session
    timeout above its heartbeat interval. Raises InvalidConfig."""

    def bound(spec: tuple[str, int]) -> int:
        return int(defaults.get(spec[0], spec[1]))

    def value(name: str) -> int:
        return int(configs.get(name, defaults.get(name, GROUP_CONFIGS[name].default)))

    for key in GROUP_CONFIGS.values():
        if key.kind is not Kind.INT or (key.low is None and key.high is None):
            continue
        number = value(key.name)
        if key.low is not None and number < bound(key.low):
            raise InvalidConfig(f"{key.name} must be greater than or equal to {key.low[0]}")
        if key.high is not None and number > bound(key.high):
            raise InvalidConfig(f"{key.name} must be less than or equal to {key.high[0]}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if value(session) <= value(heartbeat):
            raise InvalidConfig(f"{session} must be greater than {heartbeat}")
