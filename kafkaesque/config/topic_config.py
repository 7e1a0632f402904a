"""A topic's name, partitions and configs: validated, and stored with the topic as msgpack."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal

import msgpack

from kafkaesque.config.group_keys import GROUP_CONFIGS, parse_group
from kafkaesque.config.topic_keys import (
    BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    Kind,
    parse,
    typed,
)
from kafkaesque.errors import InvalidConfig, InvalidPartitions, InvalidRequest, InvalidTopic

DEFAULT_PAGE_SIZE = 4096
MAX_TOPIC_NAME = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name or name in (".", ".."):
        raise InvalidTopic(f"invalid topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopic(f"topic name longer than {MAX_TOPIC_NAME} characters")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"invalid topic name {name!r}: use only letters, digits, '.', '_' and '-'"
        )


MAX_PARTITIONS = 10_000
# Page size, TTL (seconds, about 68 years) and max pages fit a 32-bit integer: the archive
# stores them as such, and Redis' EXPIRE takes any of them.
MAX_SETTING = 2**31 - 1

# The meta hash fields through which the Lua scripts enforce a topic's configs, in order.
LUA_SETTINGS = (
    "page_size",
    "ttl",
    "max_pages",
    "retention_bytes",
    "segment_bytes",
    "segment_ms",
    "delete",
)

# Where a config's value comes from, as DescribeConfigs' config_source says it: set on the
# topic (or group), dynamic broker configs (a broker's own, or the cluster-wide default),
# the broker's start-up configs (``serve --config``), Kafka's default.
Source = Literal["topic", "group", "dynamic_broker", "dynamic_default", "broker", "default"]
# The topic defaults' entry (stored with them, never a config name) that says which come
# from dynamic broker configs: config name -> "dynamic_broker" or "dynamic_default".
DEFAULT_SOURCES = "\x00sources"


class TopicConfig:
    """A topic: its name, partitions, identity and configs.

    ``configs`` holds what was set on the topic (Kafka's dynamic topic configs, canonical
    text); ``defaults`` what the broker sets for every topic (``serve --config``), loaded
    with the topic and not stored with it. ``value`` resolves a config through both, then
    Kafka's default. ``page_size``, ``ttl`` and ``max_pages`` are shortcuts for
    kafkaesque.page.size, retention.ms (in seconds) and kafkaesque.max.pages."""

    __slots__ = (
        "_defaults",
        "configs",
        "created_ms",
        "default_sources",
        "name",
        "partitions",
        "replication_factor",
        "topic_id",
    )

    def __init__(
        self,
        name: str,
        partitions: int,
        page_size: int | None = None,
        ttl: int | None = None,
        max_pages: int | None = None,
        *,
        configs: Mapping[str, str] | None = None,
        defaults: Mapping[str, str] | None = None,
        created_ms: int | None = None,
        topic_id: bytes | None = None,
        replication_factor: int = 1,
    ) -> None:
        self.name = name
        # The replicas Metadata lists per partition: every broker on the Redis serves the
        # same copy, so any number up to the live brokers is kept (all in sync).
        self.replication_factor = replication_factor
        self.partitions = partitions
        self.configs: dict[str, str] = dict(configs or {})
        for config_name, value in (
            ("kafkaesque.page.size", page_size),
            ("kafkaesque.max.pages", max_pages),
        ):
            if value is not None:
                self.configs[config_name] = str(value)
        if ttl is not None:  # seconds; 0: forever
            self.configs["retention.ms"] = str(ttl * 1000) if ttl else "-1"
        self.defaults = defaults or {}
        self.created_ms = int(time.time() * 1000) if created_ms is None else created_ms
        self.topic_id = uuid.uuid4().bytes if topic_id is None else topic_id

    @property
    def defaults(self) -> dict[str, str]:
        return self._defaults

    @defaults.setter
    def defaults(self, defaults: Mapping[str, str]) -> None:
        """The broker's topic defaults as stored: their DEFAULT_SOURCES entry goes to
        ``default_sources`` (those set by dynamic broker configs, and which kind)."""
        self._defaults: dict[str, str] = dict(defaults)
        sources = self._defaults.pop(DEFAULT_SOURCES, None)
        self.default_sources: dict[str, Source] = dict(sources or {})  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicConfig):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((self.name, self.topic_id))

    def __repr__(self) -> str:
        return f"TopicConfig({self.name!r}, {self.partitions}, configs={self.configs!r})"

    def _identity(self) -> tuple[object, ...]:
        return (
            self.name,
            self.partitions,
            self.configs,
            self.created_ms,
            self.topic_id,
            self.replication_factor,
        )

    def replace(self, **changes: Any) -> TopicConfig:
        fields: dict[str, Any] = {
            "configs": self.configs,
            "defaults": {**self.defaults, DEFAULT_SOURCES: self.default_sources},
            "created_ms": self.created_ms,
            "topic_id": self.topic_id,
            "replication_factor": self.replication_factor,
        }
        fields.update(changes)
        name, partitions = fields.pop("name", self.name), fields.pop("partitions", self.partitions)
        return TopicConfig(name, partitions, **fields)

    def grown(self, partitions: int) -> TopicConfig:
        """The topic with more partitions (never fewer, as in Kafka)."""
        if partitions <= self.partitions:
            raise InvalidPartitions(
                f"topic {self.name} has {self.partitions} partitions; the new count must be larger"
            )
        return self.replace(partitions=partitions)

    # -- configs ------------------------------------------------------------------------
    def value(self, name: str) -> str:
        """The config's effective value: set on the topic, else by the broker, else Kafka's."""
        if name in self.configs:
            return self.configs[name]
        if name in self.defaults:
            return self.defaults[name]
        return TOPIC_CONFIGS[name].default

    def source(self, name: str) -> Source:
        if name in self.configs:
            return "topic"
        if name in self.defaults:
            return self.default_sources.get(name, "broker")
        return "default"

    def typed(self, name: str) -> Any:
        return typed(name, self.value(name))

    @property
    def page_size(self) -> int:
        return int(self.value("kafkaesque.page.size"))

    @property
    def max_pages(self) -> int:
        return int(self.value("kafkaesque.max.pages"))

    @property
    def ttl(self) -> int:
        """Seconds a closed page is kept (retention.ms, rounded up, at most MAX_SETTING:
        about 68 years); 0: forever."""
        ms = int(self.value("retention.ms"))
        return 0 if ms < 0 else min(MAX_SETTING, max(1, -(-ms // 1000)))

    @property
    def cleanup_policy(self) -> list[str]:
        return self.typed("cleanup.policy")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def segment_ms(self) -> int:
        """segment.ms, and for a compact topic at most max.compaction.lag.ms (as Kafka
        rolls its segments): the open page is never compacted, so it must close in time."""
        segment_ms: int = self.typed("segment.ms")
        if self.compact:
            return min(segment_ms, self.typed("max.compaction.lag.ms"))
        return segment_ms

    def lua_settings(self) -> str:
        """The meta fields the scripts enforce, as "name value ..." (LUA_SETTINGS): without
        the delete policy, retention neither expires nor drops pages, and max.pages drops
        only archived ones."""
        delete = "delete" in self.cleanup_policy
        values = {
            "page_size": self.page_size,
            "ttl": self.ttl if delete else 0,
            "max_pages": self.max_pages,
            "retention_bytes": self.typed("retention.bytes") if delete else -1,
            "segment_bytes": self.typed("segment.bytes"),
            "segment_ms": self.segment_ms,
            "delete": int(delete),
        }
        return " ".join(f"{name} {values[name]}" for name in LUA_SETTINGS)

    def validate(self) -> None:
        check_topic_name(self.name)
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                f"partitions must be in 1..{MAX_PARTITIONS}, got {self.partitions}"
            )
        self.configs = {name: parse(name, value) for name, value in self.configs.items()}
        min_lag, max_lag = self.typed("min.compaction.lag.ms"), self.typed("max.compaction.lag.ms")
        if min_lag > max_lag:  # Kafka's LogConfig refuses it too
            raise InvalidConfig(
                f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                f"max.compaction.lag.ms ({max_lag})"
            )

    # -- storage ------------------------------------------------------------------------
    def pack(self) -> bytes:
        packed: dict[str, Any] = {
            "partitions": self.partitions,
            "configs": self.configs,
            "created": self.created_ms,
            "id": self.topic_id,
        }
        if self.replication_factor != 1:  # absent: 1, as topics stored before it
            packed["rf"] = self.replication_factor
        return msgpack.packb(packed)

    @classmethod
    def unpack(
        cls, name: str, data: bytes, defaults: Mapping[str, str] | bytes | None = None
    ) -> TopicConfig:
        """A stored topic; ``defaults`` as a mapping or as stored (msgpack)."""
        given = msgpack.unpackb(defaults) if isinstance(defaults, bytes) else defaults
        m = msgpack.unpackb(data)
        configs = m.get("configs")
        if configs is None:  # stored before topics had Kafka's configs
            configs = legacy_configs(m["page_size"], m["ttl"], m["max_pages"])
        return cls(
            name,
            m["partitions"],
            configs=configs,
            defaults=given,
            created_ms=m["created"],
            topic_id=m["id"],
            replication_factor=m.get("rf", 1),
        )


def legacy_configs(page_size: int, ttl: int, max_pages: int) -> dict[str, str]:
    """The configs of a topic stored with only a page size, TTL and max pages (before
    topics had Kafka's configs): those that differ from the defaults."""
    configs = {}
    if page_size != DEFAULT_PAGE_SIZE:
        configs["kafkaesque.page.size"] = str(page_size)
    if ttl:
        configs["retention.ms"] = str(ttl * 1000)
    if max_pages:
        configs["kafkaesque.max.pages"] = str(max_pages)
    return configs


# -- describing and altering ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it; synonyms most specific first."""

    name: str
    value: str
    source: Source
    synonyms: list[tuple[str, str, Source]]
    kind: Kind
    doc: str


def describe(config: TopicConfig) -> list[ConfigEntry]:
    """Every topic config with its effective value, where it comes from, and its synonyms
    (the topic's own, the broker config's, Kafka's default), as Kafka describes them."""
    entries = []
    for key in TOPIC_CONFIGS.values():
        synonyms: list[tuple[str, str, Source]] = []
        if key.name in config.configs:
            synonyms.append((key.name, config.configs[key.name], "topic"))
        broker_name = key.broker or key.name
        if key.name in config.defaults:
            source = config.default_sources.get(key.name, "broker")
            synonyms.append((broker_name, config.defaults[key.name], source))
        synonyms.append((broker_name, key.default, "default"))
        entries.append(
            ConfigEntry(
                key.name,
                config.value(key.name),
                config.source(key.name),
                synonyms,
                key.kind,
                key.doc or "accepted and described; no effect here",
            )
        )
    return entries


class AlterOp(IntEnum):
    """IncrementalAlterConfigs' operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def altered(
    config: TopicConfig, operations: Iterable[tuple[AlterOp, str, str | None]]
) -> TopicConfig:
    """The config after IncrementalAlterConfigs' operations (SET, DELETE back to the
    default, APPEND to / SUBTRACT from a list), checked; raises InvalidConfig."""
    configs = dict(config.configs)
    seen: set[str] = set()
    for op, name, value in operations:
        if name not in TOPIC_CONFIGS:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if name in seen:
            raise InvalidConfig(f"Error due to duplicate config keys: {name}")
        seen.add(name)
        if op == AlterOp.SET:
            configs[name] = parse(name, value)
        elif op == AlterOp.DELETE:
            configs.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            if TOPIC_CONFIGS[name].kind is not Kind.LIST:
                raise InvalidConfig(
                    f"Config value append/subtract is not allowed for config {name}"
                )
            items = [i for i in config.value(name).split(",") if i]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if op == AlterOp.APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            configs[name] = parse(name, ",".join(items))
        else:
            raise InvalidConfig(f"unknown config operation {int(op)}")
    return config.replace(configs=configs)


def replaced(config: TopicConfig, settings: Mapping[str, str | None]) -> TopicConfig:
    """The config after AlterConfigs: ``settings`` replace every config set on the topic
    (those not given return to their defaults)."""
    return config.replace(configs={name: parse(name, value) for name, value in settings.items()})


def altered_group(
    configs: Mapping[str, str], operations: Iterable[tuple[AlterOp, str, str | None]]
) -> dict[str, str]:
    """A group's dynamic configs after IncrementalAlterConfigs' operations (SET, DELETE
    back to the broker's default; no group config is a list), each value checked on its
    own; the whole set is checked by ``group_config_keys.check_group_configs``."""
    result = dict(configs)
    seen: set[str] = set()
    for op, name, value in operations:
        if name in seen:
            raise InvalidRequest("Error due to duplicate config keys")
        seen.add(name)
        if name not in GROUP_CONFIGS:
            raise InvalidConfig(f"Unknown group config name: {name}")
        if op == AlterOp.SET:
            result[name] = parse_group(name, value)
        elif op == AlterOp.DELETE:
            result.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            raise InvalidConfig(f"Config value append/subtract is not allowed for config {name}")
        else:
            raise InvalidRequest(f"Unknown operations type {int(op)}")
    return result


def dynamic_defaults(
    static: Mapping[str, str],
    cluster_default: Mapping[str, str],
    per_broker: Mapping[int, Mapping[str, str]],
) -> dict[str, str]:
    """Every topic's defaults from the broker configs: those set at start (``static``,
    topic config names), then the dynamic cluster-wide default and the brokers' own
    dynamic configs (broker config names, log.retention.ms ...), each overriding the
    last. The brokers on one Redis share one log, so a broker's own value sets every
    topic's default (the highest node id's, where two differ). The entry
    DEFAULT_SOURCES says which came from dynamic configs."""
    defaults = dict(static)
    sources: dict[str, Source] = {}
    layers: list[tuple[Source, Mapping[str, str]]] = [("dynamic_default", cluster_default)]
    layers += [("dynamic_broker", per_broker[node]) for node in sorted(per_broker)]
    for source, settings in layers:
        for name, value in settings.items():
            topic_name = BROKER_SYNONYMS.get(name)
            if topic_name is not None:
                defaults[topic_name] = value
                sources[topic_name] = source
    return {**defaults, DEFAULT_SOURCES: sources} if sources else defaults  # type: ignore[dict-item]
