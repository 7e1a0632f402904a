"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic and broker configs.

Topic configs live with the topic (kafkaesque/topic_config.py); the broker's are what
``serve`` was started with (its options and ``--config``), and cannot change while it runs,
as Kafka's static broker configs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.config_keys import TOPIC_CONFIGS
from kafkaesque.errors import InvalidConfig, KafkaesqueError
from kafkaesque.topic_config import (
    AlterOp,
    ConfigEntry,
    Source,
    TopicConfig,
    altered,
    describe,
    replaced,
)
from wire.authorize import Operation, check_cluster, check_topic, cluster_allowed
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol import NO_THROTTLE, Request, build, schema_class

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
# DescribeConfigs' config_source.
SOURCE_CODES: dict[Source, int] = {"topic": 1, "broker": 4, "default": 5}


def broker_entries(broker: Broker) -> list[ConfigEntry]:
    """The broker's configs: its own settings, then every topic default it sets."""
    entries = [
        ConfigEntry(name, value, "broker", [], kind, doc)
        for name, value, kind, doc in broker.config.describe()
    ]
    defaults = broker.config.topic_defaults
    for key in TOPIC_CONFIGS.values():
        if key.broker is None or any(e.name == key.broker for e in entries):
            continue
        value = defaults.get(key.name, key.default)
        source: Source = "broker" if key.name in defaults else "default"
        entries.append(ConfigEntry(key.broker, value, source, [], key.kind, key.doc))
    return entries


def _check_access(broker: Broker, request: Request, resource: Any, operation: Operation) -> None:
    """A topic's configs need ``operation`` on the topic, the broker's on the cluster."""
    if resource.resource_type == TOPIC_RESOURCE:
        check_topic(broker, request, operation, resource.resource_name)
    else:
        check_cluster(broker, request, operation)


def _resource_error(resource: Any) -> tuple[ErrorCode, str] | None:
    if resource.resource_type in (TOPIC_RESOURCE, BROKER_RESOURCE):
        return None
    return ErrorCode.invalid_request, f"resource type {resource.resource_type} not supported"


async def describe_configs(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    result_class = schema_class(schema, "DescribeConfigsResult")
    entry_class = schema_class(schema, "DescribeConfigsResourceResult")
    synonym_class = schema_class(schema, "DescribeConfigsSynonym")
    synonyms_wanted = getattr(request.body, "include_synonyms", False)
    docs_wanted = getattr(request.body, "include_documentation", False)
    results = []
    for resource in request.body.resources:
        error, message, entries = ErrorCode.none, None, []
        problem = _resource_error(resource)
        if problem is not None:
            error, message = problem
        elif resource.resource_type == TOPIC_RESOURCE:
            try:
                _check_access(broker, request, resource, Operation.DESCRIBE_CONFIGS)
                entries = describe(await broker.log.topic(resource.resource_name))
            except KafkaesqueError as exc:
                error, message = error_code(exc), str(exc)
        elif resource.resource_name not in ("", str(broker.config.node_id)):
            error, message = ErrorCode.invalid_request, f"no broker {resource.resource_name}"
        elif not cluster_allowed(broker, request, Operation.DESCRIBE_CONFIGS):
            error, message = ErrorCode.cluster_authorization_failed, None
        else:
            entries = broker_entries(broker)
        wanted = resource.configuration_keys
        configs = tuple(
            build(
                entry_class,
                name=e.name,
                value=e.value,
                # Topic configs change through AlterConfigs; the broker's only at start.
                read_only=resource.resource_type == BROKER_RESOURCE,
                config_source=SOURCE_CODES[e.source],
                is_default=e.source == "default",
                is_sensitive=False,
                synonyms=tuple(
                    build(synonym_class, name=n, value=v, source=SOURCE_CODES[s])
                    for n, v, s in e.synonyms
                )
                if synonyms_wanted
                else (),
                config_type=int(e.kind),
                documentation=e.doc if docs_wanted else None,
            )
            for e in entries
            if not wanted or e.name in wanted  # as Kafka, no list asks for all
        )
        results.append(_result(result_class, resource, error, message, configs=configs))
    return build(schema, throttle_time=NO_THROTTLE, results=tuple(results))


def _result(cls: type, resource: Any, error: ErrorCode, message: str | None, **more: Any) -> Any:
    """One resource's answer, as both describe and alter give it."""
    return build(
        cls,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        **more,
    )


async def _alter(broker: Broker, request: Request, incremental: bool) -> Any:
    """Both alter APIs: each resource changed atomically, or not at all."""
    schema = request.response_class
    result_class = schema_class(schema, "AlterConfigsResourceResponse")
    results = []
    for resource in request.body.resources:
        error, message = ErrorCode.none, None
        try:
            problem = _resource_error(resource)
            if problem is None:
                _check_access(broker, request, resource, Operation.ALTER_CONFIGS)
            if problem is not None:
                error, message = problem
            elif resource.resource_type == BROKER_RESOURCE:
                # Static broker configs: set at start with serve --config.
                raise InvalidConfig(
                    "Cannot update these configs dynamically: broker configs are set at "
                    "start with serve --config KEY=VALUE"
                )
            else:
                change = _change(resource, incremental)
                if request.body.validate_only:
                    change(await broker.log.topic(resource.resource_name)).validate()
                else:
                    await broker.log.configure_topic(resource.resource_name, change)
                    broker.partitions.forget_config(resource.resource_name)
        except KafkaesqueError as exc:
            error, message = error_code(exc), str(exc)
        results.append(_result(result_class, resource, error, message))
    return build(schema, throttle_time=NO_THROTTLE, responses=tuple(results))


def _change(resource: Any, incremental: bool) -> Callable[[TopicConfig], TopicConfig]:
    """What an (Incremental)AlterConfigs resource does to a topic's config."""
    if incremental:
        if any(c.config_operation not in iter(AlterOp) for c in resource.configs):
            raise InvalidConfig("config operation must be SET, DELETE, APPEND or SUBTRACT")
        operations = [(AlterOp(c.config_operation), c.name, c.value) for c in resource.configs]
        return lambda config: altered(config, operations)
    settings = {c.name: c.value for c in resource.configs}
    return lambda config: replaced(config, settings)


async def alter_configs(broker: Broker, request: Request) -> Any:
    return await _alter(broker, request, incremental=False)


async def incremental_alter_configs(broker: Broker, request: Request) -> Any:
    return await _alter(broker, request, incremental=True)


def created_configs(config: TopicConfig) -> list[tuple[str, str, int]]:
    """(name, value, source) of every config of a new topic, for CreateTopics v5+."""
    return [(e.name, e.value, SOURCE_CODES[e.source]) for e in describe(config)]
