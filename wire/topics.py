"""Topic lookups and Metadata entries that several APIs answer alike.

- ``NO_TOPIC_ID``, ``NO_OPERATIONS``: what a topic in error says of its id and operations;
- ``known_topics``, ``remember_topics``: the topics a broker's last Metadata for all
  topics listed, answered (each unavailable) while Redis is away;
- ``topic_by_id``: a topic found by its id (Metadata v12, DeleteTopics v6+);
- ``broker_entries``: the live brokers as Metadata, DescribeCluster and Fetch list them;
- ``partition_leaders``, ``partition_entries``: a topic's partitions, with their leaders,
  replicas and ISR, as Metadata and DescribeTopicPartitions list them.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import UnknownTopic
from wire.authorize import NOT_ASKED
from wire.broker import Broker
from wire.protocol.codec import build

NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's "no id", for topics in error
NO_OPERATIONS = NOT_ASKED  # authorized operations of a topic in error: none told
# Per broker, the topics its last Metadata for all topics listed: what it answers, each
# LEADER_NOT_AVAILABLE, while Redis is away (see wire/handlers/metadata.py).
_KNOWN_TOPICS: weakref.WeakKeyDictionary[Broker, list[str]] = weakref.WeakKeyDictionary()


def known_topics(broker: Broker) -> list[str]:
    """The topics this broker's last Metadata for all topics listed (empty before the
    first one): what a listing answers, each unavailable, while Redis is away."""
    return list(_KNOWN_TOPICS.get(broker, []))


def remember_topics(broker: Broker, names: Iterable[str]) -> None:
    """Keep the topics a Metadata for all topics just listed, for ``known_topics``."""
    _KNOWN_TOPICS[broker] = list(names)


async def topic_by_id(broker: Broker, topic_id: uuid.UUID) -> TopicConfig | None:
    """The topic with this id (Metadata v12 may name topics by id only)."""
    name = await broker.topic_ids.name(topic_id.bytes)
    if name is None:
        return None
    try:
        config = await broker.log.topic(name)
    except UnknownTopic:  # deleted meanwhile
        return None
    return config if config.topic_id == topic_id.bytes else None


def broker_entries(
    broker: Broker, entry_class: type, listener: str = "PLAINTEXT"
) -> tuple[Any, ...]:
    """The live brokers (kafkaesque.hot.registry) at the advertised address of the
    ``listener`` the client used; a broker without that listener is not listed, as Kafka
    lists brokers per listener."""
    c = broker.config
    entries = []
    for node, info in sorted(broker.registry.live.items()):
        if node == c.node_id:
            host, port = c.endpoint(listener)
        elif listener in info.endpoints:
            host, port = info.endpoints[listener]
        else:
            continue
        entries.append(
            build(
                entry_class,
                node_id=node,
                broker_id=node,
                host=host,
                port=port,
                rack=info.rack,
                is_fenced=False,  # DescribeCluster v2: an expired broker is not listed
            )
        )
    return tuple(entries)


async def partition_leaders(
    broker: Broker, config: TopicConfig, partitions: range
) -> list[tuple[int | None, int]]:
    """(leader node, leader epoch) of each of a topic's ``partitions``, one round trip;
    the node is None while the leader that left is being replaced (its winner takes the
    partition over at once), or the partition is still being created."""
    leadership = broker.leadership
    found: list[tuple[int | None, int]] = []
    seen = await broker.log.leaders([(config.name, p) for p in partitions])
    for p, entry in zip(partitions, seen, strict=True):
        if entry is None:  # being created (a cluster's steps) or deleted meanwhile
            found.append((None, 0))
            continue
        leader, epoch, preferred = entry
        if leader == "":
            leadership.soon()  # no leader written yet: its winner, written soon
        found.append((leadership.effective(config.topic_id, p, leader, preferred), epoch))
    return found


def partition_entries(
    broker: Broker,
    partition_class: type,
    config: TopicConfig,
    leaders: Iterable[tuple[int, tuple[int | None, int]]],
    **extra: object,
) -> tuple[Any, ...]:
    """A topic's partition entries (Metadata, DescribeTopicPartitions: ``extra`` fields
    for the latter's) from (partition, (leader node, leader epoch)) pairs."""
    return tuple(
        build(
            partition_class,
            error_code=leader_error(node),
            partition_index=p,
            leader_id=-1 if node is None else node,
            leader_epoch=epoch,
            replica_nodes=replicas(broker, config, node),
            isr_nodes=replicas(broker, config, node),
            offline_replicas=(),
            **extra,
        )
        for p, (node, epoch) in leaders
    )


def topic_error_entry(topic_class: type, name: str | None, code: ErrorCode) -> Any:
    """Metadata's or DescribeTopicPartitions' entry for a topic in error: ``code`` only."""
    return build(
        topic_class,
        error_code=code,
        name=name,
        topic_id=NO_TOPIC_ID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=NO_OPERATIONS,
    )


def leader_error(node: int | None) -> ErrorCode:
    return ErrorCode.none if node is not None else ErrorCode.leader_not_available


def replicas(broker: Broker, config: TopicConfig, node: int | None) -> tuple[int, ...]:
    """A partition's replicas and ISR: its leader, then the live brokers after it (by id,
    round the ring) up to the topic's replication factor. One copy in Redis serves them
    all, so each is in sync; with fewer brokers live than the factor, fewer are listed."""
    if node is None:
        return ()
    others = sorted(set(broker.registry.live) - {node})
    later = [b for b in others if b > node] + [b for b in others if b < node]
    return (node, *later[: config.replication_factor - 1])
