"""The wire mode's client: confluent-kafka (librdkafka) speaking the Kafka protocol to
any broker. Loaded only in wire mode (``-b``): the direct mode never imports it.

Each method gets data the commands print (the printing is the commands' own, shared with
the direct mode). This module holds the client (failures, metadata, offsets) and the
topic requests; groups are wire_groups.py's, users and ACLs wire_security.py's, produce
and consume wire_records.py's, each taking a ``WireClient``. Failures become one line
(``WireFailure``, exit code 1): a broker's error by its Kafka name
(``TOPIC_ALREADY_EXISTS: ...``), an unreachable broker as ``cannot reach HOST:PORT:
connection refused``. librdkafka's own log goes to the logger ``kafkaesque.cli.librdkafka``,
silent unless -v."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from kafkaesque.cli.output import kafka_uuid
from kafkaesque.types import TopicPartition as TP

if TYPE_CHECKING:
    from kafkaesque.cli.wire import WireSettings

TIMEOUT = 30.0  # seconds a request (or reaching a broker at all) may take
POLL = 0.1
LOGGER = "kafkaesque.cli.librdkafka"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

SOURCES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG: "broker default",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "broker default",
    ConfigSource.STATIC_BROKER_CONFIG: "broker default",
}
DOWN_GRACE = 0.5  # seconds a refused login's error may follow the brokers' disconnect
# librdkafka's errors that say no broker answered (yet)
UNREACHABLE = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_SSL", "_RESOLVE", "_TIMED_OUT"}
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
    if name in UNREACHABLE:
        why = reason.split("failed: ", 1)[1] if "failed: " in reason else reason
        if name == "_TIMED_OUT" and not found:
            why = "no answer in time"
        return f"cannot reach {broker}: {why[:1].lower()}{why[1:]}"
    if name == "_AUTHENTICATION":
        return f"authentication failed at {broker}: {reason}"
    if not text or text == name:
        return name.lstrip("_")
    return f"{name.lstrip('_')}: {text}"


@contextlib.contextmanager
def config_refused(*codes: str) -> Iterator[None]:
    """A failure with one of these Kafka codes is a config the broker refuses: a usage
    mistake (--config), as in the direct mode."""
    try:
        yield
    except WireFailure as exc:
        if exc.message.startswith(codes):
            raise click.BadParameter(exc.message, param_hint="--config") from None
        raise


def kafka_id(uuid: Any) -> str:
    """A confluent-kafka Uuid as Kafka prints one: URL-safe base64, unpadded (librdkafka's
    str() uses standard base64, with + and /)."""
    mask = (1 << 64) - 1
    value = (uuid.get_most_significant_bits() & mask) << 64
    value |= uuid.get_least_significant_bits() & mask
    return kafka_uuid(value.to_bytes(16, "big"))


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
        # Every broker down, and since when: it ends the command only after DOWN_GRACE,
        # as librdkafka may report a refused login (the reason) just after the disconnect.
        self._down: tuple[str, float] | None = None
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

    # -- failures --------------------------------------------------------------------------

    def _on_error(self, err: KafkaError) -> None:
        name = err.name()
        if name in ("_TRANSPORT", "_SSL", "_RESOLVE"):
            self._transport = describe_error(err, self.bootstrap)
        elif name == "_ALL_BROKERS_DOWN":
            if not self.tolerate_down and self._down is None:
                why = self._transport or describe_error(err, self.bootstrap)
                self._down = (why, time.monotonic())
        elif name == "_AUTHENTICATION" or err.fatal():
            self.failure = describe_error(err, self.bootstrap)

    def check(self) -> None:
        if self.failure is not None:
            raise WireFailure(self.failure)
        if self._down is not None and time.monotonic() - self._down[1] >= DOWN_GRACE:
            raise WireFailure(self._down[0])

    def failed(self, exc: KafkaException) -> WireFailure:
        """The one line for a client exception (a failure seen meanwhile first)."""
        if self.failure is not None:
            return WireFailure(self.failure)
        err = exc.args[0] if exc.args else None
        if not isinstance(err, KafkaError):
            return WireFailure(str(exc))
        if err.name() in UNREACHABLE and (self._down or self._transport):
            return WireFailure(self._down[0] if self._down else str(self._transport))
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
                retry = isinstance(err, KafkaError) and err.name() in UNREACHABLE
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
        with config_refused("INVALID_CONFIG", "POLICY_VIOLATION"):
            self.wait(futures[topic])

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
            with config_refused("INVALID_CONFIG", "INVALID_REQUEST"):
                self.wait(futures[resource])
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


def source_of(entry: Any) -> str:
    """A config entry's source as describe prints it (the client gives a number)."""
    try:
        return SOURCES.get(ConfigSource(entry.source), "default")
    except ValueError:
        return "default"


def has_controller(metadata: Any) -> bool:
    """Whether the cluster names a controller among its brokers (the mock names none)."""
    return bool(metadata.controller_id in metadata.brokers)
