"""CreateTopics, DeleteTopics and CreatePartitions."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig, check_topic_name
from kafkaesque.config.topic_keys import parse
from kafkaesque.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplication,
    InvalidRequest,
    InvalidTopic,
    KafkaesqueError,
    TopicExists,
    UnknownTopic,
    UnknownTopicId,
)
from kafkaesque.partition.replicas import Replicas, check_replicas
from wire.authorize import Operation, check_create_topic, check_topic
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build
from wire.protocol.kio_types import deletes_by_id
from wire.topic_configs import created_configs
from wire.topics import NO_TOPIC_ID, topic_by_id

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        CreatableTopic,
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        DeleteTopicState,
    )

MAX_NAME_SHOWN = 255  # characters of a client's name repeated in an error message


def check_existing_topic_name(name: str) -> None:
    """UnknownTopic for a name no topic can have (Kafka's Topic.validate: 1-249 of
    [a-zA-Z0-9._-], not "." or ".."), before it reaches Redis or the archive (a NUL byte
    is no text to PostgreSQL): Kafka answers UNKNOWN_TOPIC_OR_PARTITION when deleting
    or altering such a topic, as for any topic that does not exist."""
    try:
        check_topic_name(name)
    except InvalidTopic:
        raise UnknownTopic(
            f"This server does not host this topic: {name[:MAX_NAME_SHOWN]!r}"
        ) from None


def config_from_request(broker: Broker, topic: CreatableTopic) -> TopicConfig:
    """A TopicConfig from a CreateTopics entry (Kafka's topic configs, checked); raises
    KafkaesqueError for bad input."""
    partitions: int = topic.num_partitions
    if topic.assignments:
        if partitions not in (-1, len(topic.assignments)):
            raise InvalidConfig("num_partitions and the replica assignment disagree")
        for assignment in topic.assignments:
            check_replicas(assignment.broker_ids, broker.registry.live)
        partitions = len(topic.assignments)
    if partitions == -1:
        partitions = broker.config.default_partitions
    factor = replication_factor(broker, topic.replication_factor, bool(topic.assignments))
    configs: dict[str, str] = {}
    for entry in topic.configs:
        if entry.name in configs:
            raise InvalidConfig(f"Error due to duplicate config keys: {entry.name}")
        configs[entry.name] = parse(entry.name, entry.value)
    config = TopicConfig(
        topic.name,
        partitions,
        configs=configs,
        defaults=broker.config.topic_defaults,
        replication_factor=factor,
    )
    config.validate()
    return config


def replication_factor(broker: Broker, asked: int, assigned: bool) -> int:
    """The replication factor of a new topic, checked as Kafka's controller does. The data
    is in Redis, which every broker on it serves: a factor up to the live brokers is kept
    (Metadata lists that many replicas, all in sync); a larger one is refused with Kafka's
    message. -1 is the default, 1; a manual assignment names one broker per partition."""
    if assigned:
        if asked != -1:
            raise InvalidRequest(
                "Both replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time."
            )
        return 1
    if asked == -1:
        return 1
    if asked < 1:
        raise InvalidReplication(
            "Replication factor must be larger than 0, or -1 to use the default value."
        )
    brokers = len(broker.registry.live) or 1  # this broker, before its first heartbeat
    if asked > brokers:
        raise InvalidReplication(
            f"Unable to replicate the partition {asked} time(s): The target replication "
            f"factor of {asked} cannot be reached because only {brokers} broker(s) are "
            "registered."
        )
    return asked


async def create_topics(
    broker: Broker, request: Request[CreateTopicsRequest]
) -> CreateTopicsResponse:
    result_class = request.response_entity("CreatableTopicResult")
    # v5+ tells the client the new topic's partitions, replication and configs.
    config_class = (
        request.response_entity("CreatableTopicConfigs") if request.api_version >= 5 else None
    )
    results = []
    for topic in request.body.topics:
        error, message, config = ErrorCode.none, None, None
        try:
            check_create_topic(broker, request, topic.name)
            config = config_from_request(broker, topic)
            if request.body.validate_only:
                check_topic_name(topic.name)
                if topic.name in await broker.log.list_topics():
                    raise TopicExists(f"topic already exists: {topic.name}")
            else:
                await broker.log.create_topic(config)
                broker.partitions.forget_config(topic.name)  # it may have existed before
                if topic.assignments:
                    assignments = [a.broker_ids for a in topic.assignments]
                    await Replicas(broker.leadership).assign(topic.name, assignments)
        except KafkaesqueError as exc:
            error, message, config = error_code(exc), str(exc), None
        configs = (
            tuple(
                build(
                    config_class,
                    name=n,
                    value=v,
                    read_only=False,
                    config_source=source,
                    is_sensitive=False,
                )
                for n, v, source in created_configs(config)
            )
            if config and config_class
            else ()
        )
        results.append(
            build(
                result_class,
                name=topic.name,
                topic_id=uuid.UUID(bytes=config.topic_id) if config else None,
                error_code=error,
                error_message=message,
                num_partitions=config.partitions if config else -1,
                replication_factor=config.replication_factor if config else -1,
                configs=configs if config else None,
            )
        )
    return build(request.response_class, throttle_time=NO_THROTTLE, topics=tuple(results))


async def _deletion_target(
    broker: Broker, entry: str | DeleteTopicState
) -> tuple[str, uuid.UUID | None]:
    """(name, topic id if Redis knows the topic) of a DeleteTopics entry: a name (v1-v5),
    or a name or an id, not both (v6: Kafka's INVALID_REQUEST); UnknownTopicId for an id
    no topic has. An unknown name is left to Log.delete_topic: the archive may have it."""
    if isinstance(entry, str):
        name = entry
    else:
        topic_id = None if entry.topic_id == NO_TOPIC_ID else entry.topic_id
        if topic_id is None:
            if entry.name is None:
                raise InvalidRequest("Neither topic name nor id were specified.")
            name = entry.name
        elif entry.name is not None:
            raise InvalidRequest("You may not specify both topic name and topic id.")
        else:
            config = await topic_by_id(broker, topic_id)
            if config is None:
                raise UnknownTopicId(f"no topic has the id {topic_id}")
            return config.name, topic_id
    check_existing_topic_name(name)
    try:
        return name, uuid.UUID(bytes=(await broker.log.topic(name)).topic_id)
    except UnknownTopic:
        return name, None


async def delete_topics(
    broker: Broker, request: Request[DeleteTopicsRequest]
) -> DeleteTopicsResponse:
    """Delete topics by name (v1-v5) or by name or topic id (v6); each result names the
    topic and its id where known."""
    result_class = request.response_entity("DeletableTopicResult")
    body = request.body
    results = []
    for entry in body.topics if deletes_by_id(body) else body.topic_names:
        name: str | None
        topic_id: uuid.UUID | None
        name, topic_id = (entry, None) if isinstance(entry, str) else (entry.name, entry.topic_id)
        error, message = ErrorCode.none, None
        try:
            name, topic_id = await _deletion_target(broker, entry)
            check_topic(broker, request, Operation.DELETE, name)
            await broker.log.delete_topic(name)
            broker.partitions.forget_config(name)
            await broker.groups.admin.forget_topic(name)
            await broker.share_groups.forget_topic(name)  # its share-partitions' state
        except KafkaesqueError as exc:
            error, message = error_code(exc), str(exc)
        results.append(
            build(
                result_class,
                name=name,
                topic_id=topic_id or NO_TOPIC_ID,
                error_code=error,
                error_message=message,
            )
        )
    return build(request.response_class, throttle_time=NO_THROTTLE, responses=tuple(results))


async def create_partitions(
    broker: Broker, request: Request[CreatePartitionsRequest]
) -> CreatePartitionsResponse:
    result_class = request.response_entity("CreatePartitionsTopicResult")
    results = []
    for topic in request.body.topics:
        error, message = ErrorCode.none, None
        try:
            check_topic(broker, request, Operation.ALTER, topic.name)
            check_existing_topic_name(topic.name)
            current = await broker.log.topic(topic.name)
            if topic.count <= current.partitions:
                raise InvalidPartitions(
                    f"topic has {current.partitions} partitions; the new count must be larger"
                )
            if topic.assignments is not None:
                added = topic.count - current.partitions
                if len(topic.assignments) != added:
                    raise InvalidReplicaAssignment(
                        f"Increasing the number of partitions by {added} but "
                        f"{len(topic.assignments)} assignments provided."
                    )
                for assignment in topic.assignments:
                    check_replicas(assignment.broker_ids, broker.registry.live)
            if not request.body.validate_only:
                await broker.log.add_partitions(topic.name, topic.count)
                if topic.assignments:
                    assignments = [a.broker_ids for a in topic.assignments]
                    await Replicas(broker.leadership).assign(
                        topic.name, assignments, first=current.partitions
                    )
        except KafkaesqueError as exc:
            error, message = error_code(exc), str(exc)
        results.append(
            build(result_class, name=topic.name, error_code=error, error_message=message)
        )
    return build(request.response_class, throttle_time=NO_THROTTLE, results=tuple(results))
