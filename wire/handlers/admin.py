"""CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidReplication,
    KafkaesqueError,
    TopicExists,
)
from kafkaesque.topic_config import DEFAULT_PAGE_SIZE, TopicConfig, check_topic_name
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol import NO_THROTTLE, Request, build, schema_class

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5


# Kafka topic configs accepted when they ask for what this broker does anyway (one broker,
# batches stored as sent, the producer's timestamps): tools that set them keep working.
FIXED_CONFIGS = {
    "cleanup.policy": ("delete",),
    "compression.type": ("producer",),
    "message.timestamp.type": ("CreateTime",),
    "min.insync.replicas": ("1",),
    "unclean.leader.election.enable": ("true", "false"),
}


def config_from_request(broker: Broker, topic: Any) -> TopicConfig:
    """A TopicConfig from a CreateTopics entry; raises KafkaesqueError for bad input.

    Topic configs understood: retention.ms (how long a closed page is kept; -1 forever),
    kafkaesque.page.size, kafkaesque.max.pages, and FIXED_CONFIGS."""
    partitions = topic.num_partitions
    if topic.assignments:
        if partitions not in (-1, len(topic.assignments)):
            raise InvalidConfig("num_partitions and the replica assignment disagree")
        if any(tuple(a.broker_ids) != (broker.config.node_id,) for a in topic.assignments):
            raise InvalidReplication(f"replicas must be [{broker.config.node_id}], the only broker")
        partitions = len(topic.assignments)
    if partitions == -1:
        partitions = broker.config.default_partitions
    if topic.replication_factor not in (-1, 1):
        raise InvalidReplication(
            f"replication factor {topic.replication_factor} is larger than the 1 broker available"
        )
    settings = {"page_size": DEFAULT_PAGE_SIZE, "ttl": 0, "max_pages": 0}
    for entry in topic.configs:
        name, value = entry.name, entry.value
        try:
            if name == "retention.ms":
                ms = int(value)
                settings["ttl"] = 0 if ms < 0 else max(1, ms // 1000)
            elif name == "kafkaesque.page.size":
                settings["page_size"] = int(value)
            elif name == "kafkaesque.max.pages":
                settings["max_pages"] = int(value)
            elif name in FIXED_CONFIGS:
                if value not in FIXED_CONFIGS[name]:
                    allowed = " or ".join(FIXED_CONFIGS[name])
                    raise InvalidConfig(f"{name} can only be {allowed} here")
            else:
                raise InvalidConfig(f"unknown topic config {name!r}")
        except (TypeError, ValueError):
            raise InvalidConfig(f"invalid value {value!r} for {name}") from None
    config = TopicConfig(topic.name, partitions, **settings)
    config.validate()
    return config


async def create_topics(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    result_class = schema_class(schema, "CreatableTopicResult")
    results = []
    for topic in request.body.topics:
        error, message = ErrorCode.none, None
        try:
            config = config_from_request(broker, topic)
            if request.body.validate_only:
                check_topic_name(topic.name)
                if topic.name in await broker.log.list_topics():
                    raise TopicExists(f"topic already exists: {topic.name}")
            else:
                await broker.log.create_topic(config)
                broker.partitions.forget_config(topic.name)  # it may have existed before
        except KafkaesqueError as exc:
            error, message = error_code(exc), str(exc)
        results.append(
            build(result_class, name=topic.name, error_code=error, error_message=message)
        )
    return build(schema, throttle_time=NO_THROTTLE, topics=tuple(results))


async def delete_topics(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    result_class = schema_class(schema, "DeletableTopicResult")
    results = []
    for name in request.body.topic_names:
        error = ErrorCode.none
        try:
            await broker.log.delete_topic(name)
            broker.partitions.forget_config(name)
            await broker.groups.forget_topic(name)
        except KafkaesqueError as exc:
            error = error_code(exc)
        results.append(build(result_class, name=name, error_code=error))
    return build(schema, throttle_time=NO_THROTTLE, responses=tuple(results))


async def create_partitions(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    result_class = schema_class(schema, "CreatePartitionsTopicResult")
    results = []
    for topic in request.body.topics:
        error, message = ErrorCode.none, None
        try:
            current = await broker.log.topic(topic.name)
            if topic.count <= current.partitions:
                raise InvalidPartitions(
                    f"topic has {current.partitions} partitions; the new count must be larger"
                )
            if not request.body.validate_only:
                await broker.log.add_partitions(topic.name, topic.count)
        except KafkaesqueError as exc:
            error, message = error_code(exc), str(exc)
        results.append(
            build(result_class, name=topic.name, error_code=error, error_message=message)
        )
    return build(schema, throttle_time=NO_THROTTLE, results=tuple(results))


def topic_configs(config: TopicConfig) -> list[tuple[str, str, int]]:
    """(name, value, source) of a topic, in Kafka's names where one fits."""
    return [
        ("cleanup.policy", "delete", DEFAULT_CONFIG),
        ("retention.ms", str(config.ttl * 1000 if config.ttl else -1), DYNAMIC_TOPIC_CONFIG),
        ("kafkaesque.page.size", str(config.page_size), DYNAMIC_TOPIC_CONFIG),
        ("kafkaesque.max.pages", str(config.max_pages), DYNAMIC_TOPIC_CONFIG),
        ("message.timestamp.type", "CreateTime", DEFAULT_CONFIG),
    ]


def broker_configs(broker: Broker) -> list[tuple[str, str, int]]:
    c = broker.config
    return [
        ("broker.id", str(c.node_id), STATIC_BROKER_CONFIG),
        ("auto.create.topics.enable", str(c.auto_create_topics).lower(), STATIC_BROKER_CONFIG),
        ("num.partitions", str(c.default_partitions), STATIC_BROKER_CONFIG),
        ("message.max.bytes", str(c.max_message_bytes), STATIC_BROKER_CONFIG),
        ("advertised.listeners", f"PLAINTEXT://{c.host}:{c.port}", STATIC_BROKER_CONFIG),
    ]


async def describe_configs(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    result_class = schema_class(schema, "DescribeConfigsResult")
    entry_class = schema_class(schema, "DescribeConfigsResourceResult")
    results = []
    for resource in request.body.resources:
        error, message, entries = ErrorCode.none, None, []
        if resource.resource_type == TOPIC_RESOURCE:
            try:
                entries = topic_configs(await broker.log.topic(resource.resource_name))
            except KafkaesqueError as exc:
                error, message = error_code(exc), str(exc)
        elif resource.resource_type == BROKER_RESOURCE:
            if resource.resource_name not in ("", str(broker.config.node_id)):
                error, message = ErrorCode.invalid_request, f"no broker {resource.resource_name}"
            else:
                entries = broker_configs(broker)
        else:
            error, message = (
                ErrorCode.invalid_request,
                f"resource type {resource.resource_type} not supported",
            )
        wanted = resource.configuration_keys
        configs = tuple(
            build(
                entry_class,
                name=name,
                value=value,
                read_only=True,  # AlterConfigs is not implemented
                config_source=source,
                is_default=source == DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=(),
            )
            for name, value, source in entries
            if not wanted or name in wanted  # as Kafka, an empty list asks for all
        )
        results.append(
            build(
                result_class,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return build(schema, throttle_time=NO_THROTTLE, results=tuple(results))
