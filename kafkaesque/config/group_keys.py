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


GROUP_CONFIGS: dict[str, GroupKey] = {
    k.name: k
    for k in (
        GroupKey(
            "consumer.session.timeout.ms",
            Kind.INT,
            "45000",
            at_least(1),
            "group.consumer.session.timeout.ms",
            ("group.consumer.min.session.timeout.ms", 45000),
            ("group.consumer.max.session.timeout.ms", 60000),
            True,
            "a consumer-protocol member without heartbeats this long is removed",
        ),
        GroupKey(
            "consumer.heartbeat.interval.ms",
            Kind.INT,
            "5000",
            at_least(1),
            "group.consumer.heartbeat.interval.ms",
            ("group.consumer.min.heartbeat.interval.ms", 5000),
            ("group.consumer.max.heartbeat.interval.ms", 15000),
            True,
            "how often consumer-protocol members are told to heartbeat",
        ),
        GroupKey(
            "share.session.timeout.ms",
            Kind.INT,
            "45000",
            at_least(1),
            "group.share.session.timeout.ms",
            ("group.share.min.session.timeout.ms", 45000),
            ("group.share.max.session.timeout.ms", 60000),
            enforced=True,
            doc="a share group member without heartbeats this long is removed",
        ),
        GroupKey(
            "share.heartbeat.interval.ms",
            Kind.INT,
            "5000",
            at_least(1),
            "group.share.heartbeat.interval.ms",
            ("group.share.min.heartbeat.interval.ms", 5000),
            ("group.share.max.heartbeat.interval.ms", 15000),
            enforced=True,
            doc="how often share group members are told to heartbeat",
        ),
        GroupKey(
            "share.record.lock.duration.ms",
            Kind.INT,
            "30000",
            at_least(1000),
            "group.share.record.lock.duration.ms",
            ("group.share.min.record.lock.duration.ms", 15000),
            ("group.share.max.record.lock.duration.ms", 60000),
            enforced=True,
            doc="how long a member holds a record it acquired before it is delivered again",
        ),
        GroupKey(
            "share.delivery.count.limit",
            Kind.INT,
            "5",
            at_least(2),
            "group.share.delivery.count.limit",
            ("group.share.min.delivery.count.limit", 2),
            ("group.share.max.delivery.count.limit", 10),
            enforced=True,
            doc="deliveries of a record before it is archived",
        ),
        GroupKey(
            "share.partition.max.record.locks",
            Kind.INT,
            "2000",
            at_least(100),
            "group.share.partition.max.record.locks",
            ("group.share.min.partition.max.record.locks", 100),
            ("group.share.max.partition.max.record.locks", 10000),
            enforced=True,
            doc="records in flight per share-partition at most",
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
        GroupKey(
            "streams.session.timeout.ms",
            Kind.INT,
            "45000",
            at_least(1),
            "group.streams.session.timeout.ms",
            ("group.streams.min.session.timeout.ms", 45000),
            ("group.streams.max.session.timeout.ms", 60000),
        ),
        GroupKey(
            "streams.heartbeat.interval.ms",
            Kind.INT,
            "5000",
            at_least(1),
            "group.streams.heartbeat.interval.ms",
            ("group.streams.min.heartbeat.interval.ms", 5000),
            ("group.streams.max.heartbeat.interval.ms", 15000),
        ),
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
