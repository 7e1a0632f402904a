"""The broker's Kafka configs, declared once: each one's Kafka name, the ``BrokerConfig``
attribute it sets (``groups.x``: the group coordinator's, ``consumer_groups.x``: the
consumer protocol's), its type, least value, default, what it does, and the ``serve``
option that sets it too, where there is one. ``serve`` generates those options from this
table and refuses one that disagrees with a ``--config`` of the same setting;
``BrokerConfig.apply`` parses ``--config`` by it; DescribeConfigs answers from it
(wire/broker.py). No kio here: every CLI command imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kafkaesque.config.topic_config import MAX_PARTITIONS
from kafkaesque.config.topic_keys import Kind
from kafkaesque.errors import InvalidConfig

# Kafka's socket.request.max.bytes default: the largest request read.
MAX_REQUEST_SIZE = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BrokerSetting:
    name: str  # Kafka's
    attribute: str  # BrokerConfig's
    kind: Kind
    doc: str  # what it does here (DescribeConfigs' documentation)
    default: int | bool | None = None  # None: no limit / the coordinator's own default
    least: int = 1  # 0 where 0 means off or no wait
    most: int = 2**31 - 1
    option: str | None = None  # the serve option that sets it too
    help: str = ""  # the option's help, where the doc is too short for it

    @property
    def param(self) -> str:
        """The serve option's parameter name (its attribute, groups.x as group_x)."""
        return self.attribute.replace("groups.", "group_")

    def parse(self, text: str) -> int | bool:
        """The value of ``--config NAME=text``; InvalidConfig naming what is wrong."""
        if self.kind is Kind.BOOLEAN:
            if text.strip().lower() not in ("true", "false"):
                raise InvalidConfig(
                    f"Invalid value {text} for configuration {self.name}: not true or false"
                )
            return text.strip().lower() == "true"
        try:
            number = int(text)
        except ValueError:
            raise InvalidConfig(
                f"Invalid value {text} for configuration {self.name}: not a number"
            ) from None
        if number < self.least:
            raise InvalidConfig(
                f"Invalid value {text} for configuration {self.name}: below {self.least}"
            )
        return number


INT, LONG, BOOLEAN = Kind.INT, Kind.LONG, Kind.BOOLEAN

SETTINGS: tuple[BrokerSetting, ...] = (
    BrokerSetting(
        "auto.create.topics.enable",
        "auto_create_topics",
        BOOLEAN,
        "create topics on metadata",
        True,
        option="--auto-create-topics/--no-auto-create-topics",
        help="Create unknown topics when a client's metadata request allows it.",
    ),
    BrokerSetting(
        "num.partitions",
        "default_partitions",
        INT,
        "partitions of an auto-created topic",
        1,
        most=MAX_PARTITIONS,
        option="--default-partitions",
        help="Partitions of an auto-created topic.",
    ),
    BrokerSetting("message.max.bytes", "max_message_bytes", INT, "largest record batch accepted"),
    BrokerSetting(
        "connections.max.idle.ms",
        "connections_max_idle_ms",
        LONG,
        "idle connections close",
        600_000,
        option="--connections-max-idle-ms",
        help="Close a connection that sent no request (or half of one) for this long.",
    ),
    BrokerSetting(
        "socket.request.max.bytes",
        "socket_request_max_bytes",
        INT,
        "largest request",
        MAX_REQUEST_SIZE,
        option="--socket-request-max-bytes",
        help="Largest request accepted; a larger one closes its connection.",
    ),
    BrokerSetting(
        "queued.max.request.bytes",
        "queued_max_request_bytes",
        LONG,
        "request memory",
        MAX_REQUEST_SIZE,
        option="--queued-max-request-bytes",
        help="Memory for requests being read or handled, across connections: beyond it, "
        "connections wait before reading more (larger requests go one at a time).",
    ),
    BrokerSetting(
        "max.connections",
        "max_connections",
        INT,
        "client connections at most",
        option="--max-connections",
        help="Client connections at most; beyond, new ones are closed at once. Default: no limit.",
    ),
    BrokerSetting(
        "max.connections.per.ip",
        "max_connections_per_ip",
        INT,
        "connections per IP",
        option="--max-connections-per-ip",
        help="Client connections from one IP address at most. Default: no limit.",
    ),
    BrokerSetting(
        "min.insync.replicas",
        "min_insync_replicas",
        INT,
        "copies acks=all waits for",
        1,
        most=100,
        option="--min-insync-replicas",
        help="As Kafka's: copies an acks=all produce waits for, Redis itself counted; "
        "beyond 1, Redis replicas (WAIT), and consumers read only what they have.",
    ),
    BrokerSetting(
        "group.initial.rebalance.delay.ms",
        "groups.initial_rebalance_delay_ms",
        INT,
        "a new group waits this long for more members",
        3000,
        least=0,
        option="--group-initial-rebalance-delay-ms",
        help="How long a new group waits for more members before its first rebalance.",
    ),
    BrokerSetting(
        "group.min.session.timeout.ms",
        "groups.min_session_timeout_ms",
        INT,
        "smallest session timeout a member may ask for",
        6000,
        option="--group-min-session-timeout-ms",
        help="Smallest session timeout a consumer may ask for.",
    ),
    BrokerSetting(
        "group.max.session.timeout.ms",
        "groups.max_session_timeout_ms",
        INT,
        "largest session timeout a member may ask for",
    ),
    BrokerSetting("group.max.size", "groups.max_size", INT, "members of one classic group at most"),
    BrokerSetting(
        "offsets.retention.minutes",
        "groups.offsets_retention_minutes",
        INT,
        "an empty group's committed offsets are kept this long",
    ),
    BrokerSetting(
        "group.consumer.session.timeout.ms",
        "consumer_groups.session_timeout_ms",
        INT,
        "a consumer-protocol member without heartbeats this long is removed",
    ),
    BrokerSetting(
        "group.consumer.heartbeat.interval.ms",
        "consumer_groups.heartbeat_interval_ms",
        INT,
        "how often consumer-protocol members heartbeat",
    ),
    BrokerSetting(
        "group.share.session.timeout.ms",
        "share_groups.session_timeout_ms",
        INT,
        "a share group member without heartbeats this long is removed",
        45_000,
    ),
    BrokerSetting(
        "group.share.heartbeat.interval.ms",
        "share_groups.heartbeat_interval_ms",
        INT,
        "how often share group members heartbeat",
        5_000,
    ),
    BrokerSetting(
        "group.share.record.lock.duration.ms",
        "share_groups.record_lock_duration_ms",
        INT,
        "how long a share group member holds the records it acquired",
        30_000,
    ),
    BrokerSetting(
        "group.share.delivery.count.limit",
        "share_groups.delivery_count_limit",
        INT,
        "deliveries of a record to share group members before it is archived",
        5,
        least=2,
    ),
    BrokerSetting(
        "group.share.max.size",
        "share_groups.max_size",
        INT,
        "members of one share group at most",
        200,
    ),
    BrokerSetting(
        "group.share.partition.max.record.locks",
        "share_groups.max_record_locks",
        INT,
        "records in flight per share-partition at most",
        2_000,
    ),
    BrokerSetting(
        "allow.everyone.if.no.acl.found",
        "allow_everyone_if_no_acl_found",
        BOOLEAN,
        "with the authorizer on, a resource no ACL names is allowed to everyone",
        False,
        option="--allow-everyone-if-no-acl-found",
        help="With --authorizer acl: a resource no ACL names is allowed to everyone.",
    ),
    BrokerSetting(
        "transaction.max.timeout.ms",
        "transaction_max_timeout_ms",
        INT,
        "largest transaction.timeout.ms a producer may ask for",
    ),
    BrokerSetting(
        "transactional.id.expiration.ms",
        "transactional_id_expiration_ms",
        INT,
        "a transactional id idle this long is forgotten",
    ),
    BrokerSetting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction_abort_interval_ms",
        INT,
        "how often transactions past their timeout are looked for and aborted",
    ),
    BrokerSetting(
        "connections.max.reauth.ms",
        "connections_max_reauth_ms",
        LONG,
        "SASL session lifetime (0: none)",
        0,
        least=0,
        option="--connections-max-reauth-ms",
        help="SASL session lifetime: clients re-authenticate within it, else their "
        "connection closes (0: sessions never expire).",
    ),
    BrokerSetting(
        "connection.failed.authentication.delay.ms",
        "failed_authentication_delay_ms",
        INT,
        "delay before a failed authentication is answered",
        100,
        least=0,
        option="--failed-authentication-delay-ms",
        help="Delay before answering (and closing) a failed SASL authentication.",
    ),
    BrokerSetting(
        "max.incremental.fetch.session.cache.slots",
        "fetch_session_slots",
        INT,
        "incremental fetch sessions kept at most (0: none)",
        1000,
        least=0,
        option="--max-incremental-fetch-session-cache-slots",
        help="Incremental fetch sessions (KIP-227) kept at most, across clients; a client "
        "finding none free goes on with full fetches (0: no sessions).",
    ),
    BrokerSetting(
        "broker.session.timeout.ms",
        "session_timeout_ms",
        INT,
        "a broker not heard of for this long is gone: its partitions move to the others",
        9_000,
        least=1000,
        option="--broker-session-timeout-ms",
        help="A broker not heard of for this long is gone: its partitions move to the others.",
    ),
    BrokerSetting(
        "broker.heartbeat.interval.ms",
        "heartbeat_interval_ms",
        INT,
        "how often this broker tells the others it is alive",
        2_000,
        least=100,
        option="--broker-heartbeat-interval-ms",
        help="How often this broker tells the others it is alive.",
    ),
    BrokerSetting(
        "min.incremental.fetch.session.eviction.ms",
        "fetch_session_eviction_ms",
        INT,
        "a fetch session idle this long may be evicted for a new one",
        least=0,
    ),
)
BY_NAME: dict[str, BrokerSetting] = {s.name: s for s in SETTINGS}
WITH_OPTIONS: tuple[BrokerSetting, ...] = tuple(s for s in SETTINGS if s.option is not None)


def default(name: str) -> Any:
    """A setting's default, for BrokerConfig's fields."""
    return BY_NAME[name].default


F = TypeVar("F", bound=Callable[..., Any])


def serve_options(command: F) -> F:
    """``command`` with an option for each setting that has one (imports click only here)."""
    import click

    for setting in reversed(WITH_OPTIONS):
        assert setting.option is not None
        if setting.kind is BOOLEAN:
            kwargs: dict[str, Any] = {"is_flag": True}
            if "/" in setting.option:
                kwargs["show_default"] = True
        else:
            kwargs = {"type": click.IntRange(setting.least, setting.most)}
            if setting.default is not None:
                kwargs["show_default"] = True
        decorator = click.option(
            setting.option,
            setting.param,
            default=setting.default,
            help=f"{setting.help or setting.doc} (Kafka's {setting.name}.)",
            **kwargs,
        )
        command = decorator(command)
    return command
