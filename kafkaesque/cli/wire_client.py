"""The wire mode's client: confluent-kafka (librdkafka) speaking the Kafka protocol to
any broker. Loaded only in wire mode (``-b``): the direct mode never imports it.

Each method gets data the commands print (the printing is the commands' own, shared with
the direct mode). Failures become one line (``WireFailure``, exit code 1): a broker's
error by its Kafka name (``TOPIC_ALREADY_EXISTS: ...``), an unreachable broker as
``cannot reach HOST:PORT: connection refused``. librdkafka's own log goes to the logger
``kafkaesque.cli.librdkafka``, silent unless -v."""

from __future__ import annotations

import base64
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import click
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclBinding as KafkaAclBinding
from confluent_kafka.admin import AclBindingFilter as KafkaAclFilter
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from kafkaesque.cli.group_view import CLASSIC, CONSUMER, GroupView, MemberView, by_topic
from kafkaesque.cli.line_producer import BadLine, LineProducer, LineRecord
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.records.batch import with_base_offset
from kafkaesque.records.build import build_batch
from kafkaesque.security import acls

if TYPE_CHECKING:
    from kafkaesque.cli.wire import WireSettings
    from kafkaesque.hot.log import Log

TIMEOUT = 30.0  # seconds a request (or reaching a broker at all) may take
POLL = 0.1
LOGGER = "kafkaesque.cli.librdkafka"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
TP = tuple[str, int]

STATES = {
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.UNKNOWN: "Unknown",
}
SOURCES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG: "broker default",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "broker default",
    ConfigSource.STATIC_BROKER_CONFIG: "broker default",
}
# What the coordinator of a consumer's group.id answers: no matter without --group (the
# client needs a group.id, and librdkafka looks its coordinator up even when assigning).
_GROUP_ONLY = {"GROUP_AUTHORIZATION_FAILED", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}
_UNREACHABLE = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_SSL", "_RESOLVE", "_TIMED_OUT"}
# "sasl_ssl://127.0.0.1:9093/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection
# refused (after 0ms in state CONNECT)"
_BROKER_TEXT = re.compile(r"^(?:[a-z_]+://)?(?P<broker>[^/\s]+)/[^:\s]*: (?P<text>.*)$", re.S)
_AFTER = re.compile(r"\s*\(after \d+ms in state [A-Z_]+\)(, \d+ identical error\(s\) suppressed)?")


class WireFailure(click.ClickException):
    """An expected failure of a wire-mode command: one line, exit code 1."""


def _plain(text: str) -> str:
    return _AFTER.sub("", text).strip()


def describe_error(err: KafkaError, bootstrap: str) -> str:
    """One line for people about a client or broker error."""
    name = err.name()
    text = _plain(err.str())
    found = _BROKER_TEXT.match(text)
    broker = found.group("broker") if found else bootstrap
    reason = found.group("text") if found else text
    if name in _UNREACHABLE:
        why = reason.split("failed: ", 1)[1] if "failed: " in reason else reason
        if name == "_TIMED_OUT" and not found:
            why = "no answer in time"
        return f"cannot reach {broker}: {why[:1].lower()}{why[1:]}"
    if name == "_AUTHENTICATION":
        return f"authentication failed at {broker}: {reason}"
    if not text or text == name:
        return name.lstrip("_")
    return f"{name.lstrip('_')}: {text}"


def kafka_id(uuid: Any) -> str:
    """A confluent-kafka Uuid as Kafka prints one: URL-safe base64, unpadded (librdkafka's
    str() uses standard base64, with + and /)."""
    mask = (1 << 64) - 1
    value = (uuid.get_most_significant_bits() & mask) << 64
    value |= uuid.get_least_significant_bits() & mask
    return base64.urlsafe_b64encode(value.to_bytes(16, "big")).rstrip(b"=").decode()


@dataclass
class PartitionInfo:
    partition: int
    start: int | None
    end: int | None
    leader: int | None
    epoch: int | None


@dataclass
class TopicInfo:
    """What the wire says of a topic: describe's data."""

    name: str
    topic_id: str | None  # None: not told (a broker without DescribeTopics)
    cluster_id: str | None
    partitions: list[PartitionInfo]
    configs: list[tuple[str, str, str]]  # name, value, source: topic / broker default / default


class WireClient:
    """The clients for one command, over one set of settings."""

    def __init__(self, settings: WireSettings, *, tolerate_down: bool = False) -> None:
        self.bootstrap = settings.bootstrap
        self.tolerate_down = tolerate_down  # consume --follow waits a broker's restart out
        self.logger = logging.getLogger(LOGGER)
        verbose = logging.getLogger().getEffectiveLevel() <= logging.INFO
        if not verbose:
            self.logger.setLevel(logging.CRITICAL + 1)  # librdkafka's lines stay off stderr
        self.failure: str | None = None  # what ends this command: unreachable, refused
        self._transport: str | None = None
        self.config: dict[str, Any] = {
            "log.connection.close": False,
            # Looking a topic up must not create it (a producer's Metadata would).
            "allow.auto.create.topics": False,
            **settings.properties,
            "bootstrap.servers": settings.bootstrap,
            "logger": self.logger,
            "error_cb": self._on_error,
        }
        if not verbose:
            self.config.setdefault("log_level", 0)
        self._admin: AdminClient | None = None
        self._partitionwise: set[str] = set()  # groups whose offsets are asked one by one

    # -- failures --------------------------------------------------------------------------

    def _on_error(self, err: KafkaError) -> None:
        name = err.name()
        if name in ("_TRANSPORT", "_SSL", "_RESOLVE"):
            self._transport = describe_error(err, self.bootstrap)
        elif name == "_ALL_BROKERS_DOWN":
            if not self.tolerate_down:
                self.failure = self._transport or describe_error(err, self.bootstrap)
        elif name == "_AUTHENTICATION" or err.fatal():
            self.failure = describe_error(err, self.bootstrap)

    def check(self) -> None:
        if self.failure is not None:
            raise WireFailure(self.failure)

    def failed(self, exc: KafkaException) -> WireFailure:
        """The one line for a client exception (a failure seen meanwhile first)."""
        if self.failure is not None:
            return WireFailure(self.failure)
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError):
            return WireFailure(str(exc))
        if err.name() in _UNREACHABLE and self._transport is not None:
            return WireFailure(self._transport)
        return WireFailure(describe_error(err, self.bootstrap))

    # -- admin -----------------------------------------------------------------------------

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.config)
        return self._admin

    def wait(self, future: Any) -> Any:
        """A future's result, serving the client's callbacks meanwhile; a broker that
        cannot be reached fails at once (not after the timeout)."""
        deadline = time.monotonic() + TIMEOUT
        while not future.done():
            self.admin.poll(POLL)
            self.check()
            if time.monotonic() > deadline:
                raise WireFailure(self._transport or f"cannot reach {self.bootstrap}: no answer")
        try:
            return future.result()
        except KafkaException as exc:
            raise self.failed(exc) from None

    def metadata(self, topic: str | None = None) -> Any:
        """The cluster's metadata (ClusterMetadata), of one topic or all."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                return self.admin.list_topics(topic, timeout=0.5)
            except KafkaException as exc:
                self.admin.poll(0)
                self.check()
                err = exc.args[0] if exc.args else None
                retry = isinstance(err, KafkaError) and err.name() in _UNREACHABLE
                if not retry or time.monotonic() > deadline:
                    raise self.failed(exc) from None

    def partition_count(self, topic: str) -> int:
        """How many partitions the topic has; an unknown one fails."""
        found = self.metadata(topic).topics.get(topic)
        if found is None or found.error is not None:
            err = found.error if found is not None else None
            if err is None or err.name() == "UNKNOWN_TOPIC_OR_PART":
                raise WireFailure(f"no such topic: {topic}")
            raise WireFailure(describe_error(err, self.bootstrap))
        return len(found.partitions)

    def topic_rows(self, details: bool) -> list[list[object]]:
        """Every topic: [name, partitions, topic id] (with ``details``; else the name and
        None), by name; internal topics left out."""
        metadata = self.metadata()
        names = sorted(n for n in metadata.topics if n not in INTERNAL_TOPICS)
        if not details or not names:
            return [[n, None, None] for n in names]
        if not has_controller(metadata):  # DescribeTopics needs one (the mock has none)
            return [[n, len(metadata.topics[n].partitions), None] for n in names]
        futures = self.admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT)
        rows = []
        for name in names:
            description = self.wait(futures[name])
            if not description.is_internal:
                rows.append([name, len(description.partitions), kafka_id(description.topic_id)])
        return rows

    def describe_topic(self, topic: str) -> TopicInfo:
        self.partition_count(topic)  # an unknown topic fails here
        metadata = self.metadata(topic)
        topic_id = None
        if has_controller(metadata):  # DescribeTopics needs one (not so the mock)
            futures = self.admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT)
            description = self.wait(futures[topic])
            topic_id = kafka_id(description.topic_id)
            leaders = {
                p.id: p.leader.id if p.leader is not None and p.leader.id >= 0 else None
                for p in description.partitions
            }
        else:
            leaders = {
                p.id: p.leader if p.leader >= 0 else None
                for p in metadata.topics[topic].partitions.values()
            }
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = {}  # none from a cluster without a controller: the mock has no configs
        if has_controller(metadata):
            entries = self.wait(
                self.admin.describe_configs([resource], request_timeout=TIMEOUT)[resource]
            )
        configs = [
            (e.name, e.value, source_of(e))
            for e in sorted(entries.values(), key=lambda e: e.name)
            if e.value is not None and not e.is_sensitive
        ]
        tps = [(topic, p) for p in sorted(leaders)]
        starts = self.list_offsets(tps, "earliest")
        ends = self.list_offsets(tps, "latest")
        partitions = []
        for p_id, leader in sorted(leaders.items()):
            end = ends[topic, p_id]
            epoch = end.leader_epoch if end.leader_epoch is not None else None
            partitions.append(
                PartitionInfo(
                    p_id,
                    starts[topic, p_id].offset,
                    end.offset,
                    leader,
                    epoch if epoch is None or epoch >= 0 else None,
                )
            )
        return TopicInfo(topic, topic_id, metadata.cluster_id, partitions, configs)

    def list_offsets(self, tps: Sequence[TP], spec: str | int) -> dict[TP, Any]:
        """ListOffsets of the partitions: "earliest", "latest" or a timestamp (ms)."""
        if not tps:
            return {}
        if spec == "earliest":
            offset_spec = OffsetSpec.earliest()
        elif spec == "latest":
            offset_spec = OffsetSpec.latest()
        else:
            offset_spec = OffsetSpec.for_timestamp(int(spec))
        request = {TopicPartition(t, p): offset_spec for t, p in tps}
        futures = self.admin.list_offsets(request, request_timeout=TIMEOUT)
        return {(tp.topic, tp.partition): self.wait(f) for tp, f in futures.items()}

    def bounds(self, tps: Sequence[TP]) -> dict[TP, tuple[int | None, int | None]]:
        """Each partition's log start and end; (None, None) for a topic that is gone."""
        known = {}
        for t in {t for t, _ in tps}:
            found = self.metadata(t).topics.get(t)
            if found is not None and found.error is None:
                known[t] = set(found.partitions)
        present = [(t, p) for t, p in tps if p in known.get(t, ())]
        starts = self.list_offsets(present, "earliest")
        ends = self.list_offsets(present, "latest")
        return {
            tp: (starts[tp].offset, ends[tp].offset) if tp in starts else (None, None) for tp in tps
        }

    def need_controller(self, what: str) -> None:
        """Fail at once where a request needs a controller and the cluster names none
        (librdkafka's mock cluster), rather than after the timeout."""
        if not has_controller(self.metadata()):
            raise WireFailure(
                f"{what} needs a controller, and the brokers at {self.bootstrap} name none"
            )

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        self.need_controller("CreateTopics")
        new = NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=configs)
        futures = self.admin.create_topics([new], request_timeout=TIMEOUT)
        try:
            self.wait(futures[topic])
        except WireFailure as exc:
            if exc.message.startswith(("INVALID_CONFIG", "POLICY_VIOLATION")):
                # a config the broker refuses is a usage mistake, as in the direct mode
                raise click.BadParameter(exc.message, param_hint="--config") from None
            raise

    def delete_topic(self, topic: str) -> None:
        self.need_controller("DeleteTopics")
        futures = self.admin.delete_topics([topic], request_timeout=TIMEOUT)
        self.wait(futures[topic])

    def topic_configs(self, topic: str) -> dict[str, tuple[str, str]]:
        """The topic's configs: name -> (value, source: topic / broker default / default)."""
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = self.wait(
            self.admin.describe_configs([resource], request_timeout=TIMEOUT)[resource]
        )
        return {e.name: (e.value, source_of(e)) for e in entries.values() if e.value is not None}

    def alter_topic(
        self,
        topic: str,
        partitions: int | None,
        configs: dict[str, str],
        deleted: Sequence[str],
    ) -> None:
        """IncrementalAlterConfigs (set ``configs``, delete ``deleted``), then
        CreatePartitions up to ``partitions``; a config the broker refuses is a usage
        mistake, as in the direct mode."""
        if configs or deleted:
            entries = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()
            ]
            entries += [
                ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in deleted
            ]
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
            futures = self.admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)
            try:
                self.wait(futures[resource])
            except WireFailure as exc:
                if exc.message.startswith(("INVALID_CONFIG", "INVALID_REQUEST")):
                    raise click.BadParameter(exc.message, param_hint="--config") from None
                raise
        if partitions is not None:
            self.need_controller("CreatePartitions")
            grown = self.admin.create_partitions(
                [NewPartitions(topic, partitions)], request_timeout=TIMEOUT
            )
            self.wait(grown[topic])

    def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        """DeleteRecords below each partition's offset (-1: the log end); the new log
        starts."""
        request = [TopicPartition(topic, p, offset) for p, offset in before.items()]
        futures = self.admin.delete_records(request, request_timeout=TIMEOUT)
        return {tp.partition: self.wait(future).low_watermark for tp, future in futures.items()}

    # -- users ---------------------------------------------------------------------------

    def users(self) -> list[list[object]]:
        """Every SCRAM credential: [user, mechanism, iterations], by user."""
        found = self.wait(self.admin.describe_user_scram_credentials(request_timeout=TIMEOUT))
        return [
            [user, c.mechanism.name.replace("_", "-"), c.iterations]
            for user in sorted(found)
            for c in found[user].scram_credential_infos
        ]

    def user_mechanisms(self, user: str) -> list[str]:
        futures = self.admin.describe_user_scram_credentials([user], request_timeout=TIMEOUT)
        described = self.wait(cast(dict[str, Any], futures)[user])
        return [c.mechanism.name.replace("_", "-") for c in described.scram_credential_infos]

    def set_user(self, user: str, mechanism: str, iterations: int, password: str) -> None:
        info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], iterations)
        change = UserScramCredentialUpsertion(user, info, password.encode())
        self.wait(self.admin.alter_user_scram_credentials([change], request_timeout=TIMEOUT)[user])

    def delete_user(self, user: str, mechanisms: Sequence[str]) -> None:
        changes: list[Any] = [
            UserScramCredentialDeletion(user, ScramMechanism[m.replace("-", "_")])
            for m in mechanisms
        ]
        futures = self.admin.alter_user_scram_credentials(changes, request_timeout=TIMEOUT)
        self.wait(futures[user])

    # -- ACLs ----------------------------------------------------------------------------

    def create_acls(self, bindings: Sequence[acls.AclBinding]) -> None:
        wanted = [_binding(b) for b in bindings]
        futures = self.admin.create_acls(wanted, request_timeout=TIMEOUT)
        for binding in wanted:
            self.wait(futures[binding])

    def describe_acls(self, filters: Sequence[acls.AclFilter]) -> set[acls.AclBinding]:
        """The bindings any of the filters matches (one DescribeAcls each)."""
        found: set[acls.AclBinding] = set()
        for f in filters:
            future = self.admin.describe_acls(_filter(f), request_timeout=TIMEOUT)
            found.update(_ours(b) for b in self.wait(future))
        return found

    def delete_acls(self, filters: Sequence[acls.AclFilter]) -> set[acls.AclBinding]:
        """Delete what the filters match; the bindings deleted."""
        wanted = [_filter(f) for f in filters]
        futures = self.admin.delete_acls(wanted, request_timeout=TIMEOUT)
        return {_ours(b) for f in wanted for b in self.wait(futures[f])}

    # -- groups ----------------------------------------------------------------------------

    def list_groups(self) -> list[list[object]]:
        """Every group: [group, state, type], by id."""
        try:
            result = self.wait(self.admin.list_consumer_groups(request_timeout=TIMEOUT))
        except WireFailure as exc:
            if exc.message.startswith("UNSUPPORTED_FEATURE"):
                raise WireFailure(
                    f"UNSUPPORTED_FEATURE: the broker at {self.bootstrap} lists no groups "
                    "(no ListGroups)"
                ) from None
            raise
        for error in result.errors:
            raise self.failed(KafkaException(error))
        rows: list[list[object]] = []
        for g in sorted(result.valid, key=lambda g: g.group_id):
            kind = CONSUMER if g.type == ConsumerGroupType.CONSUMER else CLASSIC
            rows.append([g.group_id, STATES.get(g.state, str(g.state)), kind])
        return rows

    def describe_group(self, group: str) -> GroupView | None:
        """The group as DescribeGroups / ConsumerGroupDescribe tell; None if there is none
        (Dead, or GROUP_ID_NOT_FOUND). The generation is not told (None)."""
        futures = self.admin.describe_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            description = self.wait(futures[group])
        except WireFailure as exc:
            if "GROUP_ID_NOT_FOUND" in exc.message:
                return None
            if not exc.message.startswith("UNSUPPORTED_FEATURE"):
                raise
            # A broker without DescribeGroups (librdkafka's mock): the group as its
            # committed offsets show it, if it has any.
            # Its OffsetFetch of every offset answers none either: ask partition by partition.
            self._partitionwise.add(group)
            if not self.committed(group):
                return None
            click.echo(
                f"the broker does not describe groups (DescribeGroups): {group}'s state "
                "and members are not known",
                err=True,
            )
            return GroupView(group, CLASSIC, "Unknown", "", "", None)
        state = STATES.get(description.state, str(description.state))
        if state == "Dead" and not description.members:
            return None
        kind = CLASSIC
        if getattr(description, "type", None) == ConsumerGroupType.CONSUMER:  # 2.6: none
            kind = CONSUMER
        protocol_type = "" if description.is_simple_consumer_group else "consumer"
        view = GroupView(
            group, kind, state, protocol_type, description.partition_assignor or "", None
        )
        for m in description.members:
            parts = m.assignment.topic_partitions if m.assignment is not None else []
            assignment = by_topic(sorted((tp.topic, tp.partition) for tp in parts))
            view.members.append(
                MemberView(m.member_id, m.group_instance_id, m.client_id, m.host, assignment)
            )
        return view

    def committed(self, group: str) -> dict[TP, int]:
        """The group's committed offsets."""
        request = [ConsumerGroupTopicPartitions(group)]
        if group in self._partitionwise:
            topics = self.metadata().topics
            request[0].topic_partitions = [
                TopicPartition(t, p)
                for t in sorted(topics)
                if t not in INTERNAL_TOPICS
                for p in sorted(topics[t].partitions)
            ]
        futures = self.admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT)
        result = self.wait(futures[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        }

    def delete_group(self, group: str) -> str:
        """DeleteGroups; the error code's name ("NONE" when deleted)."""
        # DescribeGroups first: a broker without it has no DeleteGroups either, and
        # librdkafka 2.16 aborts on DeleteGroups' UNSUPPORTED_FEATURE.
        futures = self.admin.describe_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            self.wait(futures[group])
        except WireFailure as exc:
            if exc.message.startswith("UNSUPPORTED_FEATURE"):
                raise WireFailure(
                    f"UNSUPPORTED_FEATURE: the broker at {self.bootstrap} deletes no groups "
                    "(no DeleteGroups)"
                ) from None
        futures = self.admin.delete_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            self.wait(futures[group])
        except WireFailure as exc:
            for code in ("GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP"):
                if exc.message.startswith(code):
                    return code
            raise
        return "NONE"

    # -- records ---------------------------------------------------------------------------

    def producer(self, compression: str, batch_size: int) -> Producer:
        config = {
            "partitioner": "murmur2_random",  # Kafka's Java clients', as the direct mode
            "compression.type": compression,
            "batch.num.messages": batch_size,
            **self.config,
        }
        config.setdefault("message.timeout.ms", int(TIMEOUT * 1000))
        return Producer(config)

    def consume(
        self,
        topics: Sequence[str],
        pattern: str | None,
        partition: int | None,
        start: Callable[[TP], int | str | None],
        *,
        group: str | None,
        follow: bool,
        max_records: int | None,
        fetch_size: int,
        isolation: str,
        formatter: Callable[[str, int, bytes, int], list[bytes]],
        line_end: bytes,
        out: BinaryIO,
        stopped: Callable[[], bool],
    ) -> None:
        """Print the records (see produce_consume.consume): ``start`` says where a
        partition starts on the first assignment ("beginning", "end", "last:N", "time:MS",
        an offset, or None: the committed offset, else the log start)."""
        config = {
            # A member gone without leaving holds its partitions for a session: the CLI's
            # members take the direct mode's 10 s, not Kafka's 45 s (the command config may
            # say otherwise).
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            **self.config,
            "group.id": group or "kafkaesque-cli",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
        consumer = Consumer(config)
        assigned: set[TP] = set()
        at_end: set[TP] = set()
        first = [True]
        ready = [group is None]

        def place(tps: list[Any], explicit: bool) -> list[Any]:
            for tp in tps:
                where = start((tp.topic, tp.partition))
                if where is None:
                    if explicit:
                        tp.offset = OFFSET_BEGINNING
                    continue
                tp.offset = self._offset(consumer, tp, where)
            return tps

        try:
            if group is None:
                names = self._topics(topics, pattern)
                tps = []
                for t in names:
                    count = self.partition_count(t)
                    parts = [partition] if partition is not None else range(count)
                    tps += [TopicPartition(t, p) for p in parts]
                if not tps and not follow:
                    raise WireFailure(f"no topic matches --pattern {pattern}")
                consumer.assign(place(tps, True))
                assigned.update((tp.topic, tp.partition) for tp in tps)
            else:
                for t in topics:
                    self.partition_count(t)  # an unknown topic is an error, not a wait
                wanted = list(topics) + ([f"^{pattern}$"] if pattern is not None else [])

                def on_assign(c: Any, tps: list[Any]) -> None:
                    if first[0]:
                        place(tps, False)
                        first[0] = False
                    c.assign(tps)
                    assigned.clear()
                    assigned.update((tp.topic, tp.partition) for tp in tps)
                    at_end.difference_update(assigned)
                    ready[0] = True

                def on_revoke(c: Any, tps: list[Any]) -> None:
                    c.unassign()
                    assigned.clear()

                consumer.subscribe(wanted, on_assign=on_assign, on_revoke=on_revoke)
            printed = 0
            while not stopped():
                if not follow and ready[0] and assigned <= at_end:
                    break
                want = fetch_size
                if max_records is not None:
                    want = min(want, max_records - printed)
                messages = consumer.consume(num_messages=want, timeout=POLL * 5)
                self.check()
                lines: list[bytes] = []
                commits: dict[TP, int] = {}
                for m in cast(list[Any], messages):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            at_end.add((m.topic(), m.partition()))
                        elif err.name() in _UNREACHABLE:
                            pass
                        elif group is None and err.name() in _GROUP_ONLY:
                            pass  # the client's own group.id, never joined nor committed
                        else:
                            raise WireFailure(describe_error(err, self.bootstrap))
                        continue
                    tp = (m.topic(), m.partition())
                    at_end.discard(tp)
                    lines += formatter(tp[0], tp[1], _batch(m), 0)
                    commits[tp] = m.offset() + 1
                if lines:
                    out.write(line_end.join(lines))
                    out.write(line_end)
                    out.flush()
                    printed += len(lines)
                if group is not None and commits:
                    self._commit(consumer, commits)
                if max_records is not None and printed >= max_records:
                    break
        except KafkaException as exc:
            raise self.failed(exc) from None
        finally:
            consumer.close()  # leaves the group: its others rebalance at once

    def _commit(self, consumer: Consumer, commits: dict[TP, int]) -> None:
        offsets = [TopicPartition(t, p, o) for (t, p), o in commits.items()]
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            # A rebalance took the partitions meanwhile: their next owner reads on.
            rebalanced = ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID")
            if not isinstance(err, KafkaError) or err.name() not in rebalanced:
                raise

    def _topics(self, topics: Sequence[str], pattern: str | None) -> list[str]:
        names = list(dict.fromkeys(topics))
        if pattern is not None:
            regex = re.compile(pattern)
            every = sorted(self.metadata().topics)
            names += [n for n in every if regex.fullmatch(n) and n not in names]
        return names

    def _offset(self, consumer: Consumer, tp: Any, where: int | str) -> int:
        if isinstance(where, int):
            return where
        if where == "beginning":
            return OFFSET_BEGINNING
        if where == "end":
            return OFFSET_END
        kind, _, number = where.partition(":")
        if kind == "last":
            low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT)
            return cast(int, max(low, high - int(number)))
        found = consumer.offsets_for_times(
            [TopicPartition(tp.topic, tp.partition, int(number))], timeout=TIMEOUT
        )
        offset = found[0].offset
        return OFFSET_END if offset < 0 else cast(int, offset)


def source_of(entry: Any) -> str:
    """A config entry's source as describe prints it (the client gives a number)."""
    try:
        return SOURCES.get(ConfigSource(entry.source), "default")
    except ValueError:
        return "default"


def _binding(b: acls.AclBinding) -> Any:
    """Ours as the client's (the enums share Kafka's codes)."""
    return KafkaAclBinding(
        ResourceType(int(b.resource_type)),
        b.name,
        ResourcePatternType(int(b.pattern_type)),
        b.principal,
        b.host,
        AclOperation(int(b.operation)),
        AclPermissionType(int(b.permission)),
    )


def _filter(f: acls.AclFilter) -> Any:
    any_: Any = None  # a filter's None: any (the client's types say str)
    return KafkaAclFilter(
        ResourceType(int(f.resource_type)),
        any_ if f.name is None else f.name,
        ResourcePatternType(int(f.pattern_type)),
        any_ if f.principal is None else f.principal,
        any_ if f.host is None else f.host,
        AclOperation(int(f.operation)),
        AclPermissionType(int(f.permission)),
    )


def _ours(b: Any) -> acls.AclBinding:
    return acls.AclBinding(
        acls.ResourceType(b.restype.value),
        b.name,
        acls.PatternType(b.resource_pattern_type.value),
        b.principal,
        b.host,
        acls.Operation(b.operation.value),
        acls.Permission(b.permission_type.value),
    )


def has_controller(metadata: Any) -> bool:
    """Whether the cluster names a controller among its brokers (the mock names none)."""
    return bool(metadata.controller_id in metadata.brokers)


def _batch(message: Any) -> bytes:
    """A consumed message as a batch of one at its offset: the direct mode's formatters
    print it."""
    _, timestamp = message.timestamp()
    headers = message.headers() or []
    batch = build_batch(
        [message.value()],
        [message.key()],
        timestamps=[max(timestamp, 0)],
        headers=[headers] if headers else None,
    )
    return with_base_offset(batch, message.offset())


class WireLineProducer(LineProducer):
    """The direct mode's line parsing (keys, headers, null markers, JSON), each record
    sent by a confluent-kafka Producer (murmur2 partitions for keys, as Kafka's clients)."""

    def __init__(self, client: WireClient, topic: str, partitions: int, **options: Any) -> None:
        compression = options.pop("compression_name")
        # No Log: the records go over the wire (only the line parsing is used).
        super().__init__(cast("Log", None), TopicConfig(topic, partitions), **options)
        self.client = client
        self.topic = topic
        self.sender = client.producer(compression, self.batch_size)
        self.error: KafkaError | None = None

    def _delivered(self, err: KafkaError | None, message: Any) -> None:
        if err is not None and self.error is None:
            self.error = err

    async def send(self, lines: list[bytes]) -> int:
        try:
            if self.plain:
                records = [LineRecord(None, line, []) for line in lines]
            else:
                records = self._records(lines)
        except BadLine as exc:
            self._send(exc.records)
            exc.sent = len(exc.records)
            raise
        finally:
            self._lines += len(lines)
        self._send(records)
        return len(records)

    def _send(self, records: Iterable[LineRecord]) -> None:
        for r in records:
            options: dict[str, Any] = {}
            partition = r.partition if r.partition is not None else self.partition
            if partition is not None:
                options["partition"] = partition
            if r.timestamp is not None:
                options["timestamp"] = r.timestamp
            if r.headers:
                options["headers"] = r.headers
            while True:
                try:
                    self.sender.produce(
                        self.topic, r.value, r.key, on_delivery=self._delivered, **options
                    )
                    break
                except BufferError:  # the queue is full: let it drain
                    self.sender.poll(POLL)
                    self._check()
                except KafkaException as exc:
                    raise self.client.failed(exc) from None
            self.sender.poll(0)
        self.flush()

    def flush(self) -> None:
        while self.sender.flush(POLL) > 0:
            self._check()
        self._check()

    def _check(self) -> None:
        self.client.check()
        if self.error is not None:
            raise WireFailure(describe_error(self.error, self.client.bootstrap))
