"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic, broker and group configs.

Topic configs live with the topic (kafkaesque/config/topic_config.py). A broker's configs are
what ``serve`` was started with (its options and ``--config``: Kafka's static broker
configs), under the dynamic broker configs Kafka lets AlterConfigs change while it runs:
the topic defaults (log.retention.ms, message.max.bytes, log.segment.bytes, ...), per
broker or cluster-wide (an empty resource name), kept in Redis (``ks:broker_configs``) for
every broker on it and applied to every topic at once. A group's configs (Kafka 4.2's
GroupConfig: consumer.session.timeout.ms, share.*, streams.*) are kept with the group's
other keys (``ks:group:{G}:configs``); KIP-848 consumer groups obey their session timeout
and heartbeat interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kafkaesque.config.group_keys import GROUP_CONFIGS, parse_group
from kafkaesque.config.topic_config import (
    AlterOp,
    ConfigEntry,
    Source,
    TopicConfig,
    altered,
    altered_group,
    describe,
    dynamic_defaults,
    replaced,
)
from kafkaesque.config.topic_keys import (
    BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    Kind,
    parse_broker_config,
)
from kafkaesque.errors import InvalidConfig, InvalidRequest, KafkaesqueError
from wire.authorize import Operation, check_cluster, check_group, check_topic
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, schema_class
from wire.topic_configs import SOURCE_CODES, dynamic_broker_configs

if TYPE_CHECKING:
    from typing import TypeAlias

    from typing_extensions import TypeIs

    from wire.protocol.kio_types import (
        AlterConfigsRequest,
        AlterConfigsResource,
        AlterConfigsResourceResponse,
        AlterConfigsResponse,
        DescribeConfigsRequest,
        DescribeConfigsResource,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResource,
        IncrementalAlterConfigsResourceResponse,
        IncrementalAlterConfigsResponse,
    )

    # A resource of either alter API, and its answer.
    AlterResource: TypeAlias = AlterConfigsResource | IncrementalAlterConfigsResource
    AlterResult: TypeAlias = AlterConfigsResourceResponse | IncrementalAlterConfigsResourceResponse

TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE = 2, 4, 32
INCREMENTAL_ALTER_CONFIGS = 44  # its api key
ALTER_OPS = frozenset(op.value for op in AlterOp)  # IncrementalAlterConfigs' operations
# The broker configs AlterConfigs may change (Kafka's DynamicLogConfig: the broker names
# of the topic defaults); every other broker config is read-only here.
DYNAMIC_BROKER_CONFIGS = frozenset(BROKER_SYNONYMS)


def _broker_node(broker: Broker, name: str, describing: bool = False) -> int | None:
    """The broker a BROKER resource names: None for the cluster-wide default (""); any
    other than this one is refused, as Kafka does (its message differs a little for a
    describe)."""
    if not name:
        return None
    try:
        node = int(name)
    except ValueError:
        raise InvalidRequest(f"Node id must be an integer, but it is: {name}") from None
    if node != broker.config.node_id:
        expected = f"{broker.config.node_id}" + (" or empty string" if describing else "")
        raise InvalidRequest(f"Unexpected broker id, expected {expected}, but received {name}")
    return node


def _checked_broker_configs(settings: dict[str, str]) -> dict[str, str]:
    """Dynamic broker configs checked as Kafka's DynamicBrokerConfig checks them (its
    refusals are INVALID_REQUEST), in canonical text."""
    static = sorted(n for n in settings if n not in DYNAMIC_BROKER_CONFIGS)
    if static:
        # Kafka prints a Scala Set.
        raise InvalidRequest(f"Cannot update these configs dynamically: Set({', '.join(static)})")
    checked = {}
    for name, value in settings.items():
        try:
            checked[name] = parse_broker_config(name, value)
        except InvalidConfig as exc:
            raise InvalidRequest(str(exc)) from None
    return checked


def _incremental(resource: AlterResource) -> TypeIs[IncrementalAlterConfigsResource]:
    """IncrementalAlterConfigs' resources say an operation per config; AlterConfigs'
    replace them all."""
    return resource.__api_key__ == INCREMENTAL_ALTER_CONFIGS


def _broker_change(resource: AlterResource) -> Callable[[dict[str, str]], dict[str, str]]:
    """What an (Incremental)AlterConfigs resource does to a broker's dynamic configs."""
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise InvalidRequest("Error due to duplicate config keys")
    if not _incremental(resource):
        nulls = [c.name for c in resource.configs if c.value is None]
        if nulls:
            raise InvalidRequest(f"Null value not supported for : {', '.join(nulls)}")
        given = {c.name: c.value for c in resource.configs if c.value is not None}  # all
        return lambda _: _checked_broker_configs(given)

    def change(current: dict[str, str]) -> dict[str, str]:
        settings = dict(current)
        for c in resource.configs:
            if c.config_operation not in ALTER_OPS:
                raise InvalidRequest(f"Unknown operations type {c.config_operation}")
            op = AlterOp(c.config_operation)
            if op == AlterOp.DELETE:
                settings.pop(c.name, None)
                continue
            if c.value is None:
                raise InvalidRequest(f"Null value not supported for : {c.name}")
            if op == AlterOp.SET:
                settings[c.name] = c.value
                continue
            topic_name = BROKER_SYNONYMS.get(c.name)
            if topic_name is None or TOPIC_CONFIGS[topic_name].kind is not Kind.LIST:
                raise InvalidConfig(f"Config value append is not allowed for config key: {c.name}")
            have = settings.get(c.name, TOPIC_CONFIGS[topic_name].default)
            items = [i for i in have.split(",") if i]
            given = [i.strip() for i in c.value.split(",") if i.strip()]
            if op == AlterOp.APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            settings[c.name] = ",".join(items)
        return _checked_broker_configs(settings)

    return change


async def _alter_broker(broker: Broker, resource: AlterResource, only: bool) -> None:
    """Dynamic broker configs: stored, then applied to every topic (each broker on the
    Redis reads the topic defaults with every topic)."""
    node = _broker_node(broker, resource.resource_name)
    change = _broker_change(resource)
    cluster, per_broker = await dynamic_broker_configs(broker)
    current = cluster if node is None else per_broker.get(node, {})
    configs = change(current)
    if only:
        return
    await broker.log.stores.broker_configs.write(node, configs)
    if node is None:
        cluster = configs
    else:
        per_broker[node] = configs
    await broker.log.set_topic_defaults(
        dynamic_defaults(broker.config.topic_defaults, cluster, per_broker)
    )
    for topic in await broker.log.list_topics():
        broker.partitions.forget_config(topic)  # this broker's appends see it at once


# -- describing -------------------------------------------------------------------------------
def _layers(
    name: str, static: str | None, default: str, dynamic: list[tuple[str | None, Source]]
) -> tuple[str, Source, list[tuple[str, str, Source]]]:
    """A broker config's value, source and synonyms (most specific first) from its
    dynamic values (per broker, then cluster-wide), its start-up value and Kafka's."""
    synonyms: list[tuple[str, str, Source]] = [(name, v, s) for v, s in dynamic if v is not None]
    if static is not None:
        synonyms.append((name, static, "broker"))
    synonyms.append((name, default, "default"))
    value, source = synonyms[0][1], synonyms[0][2]
    return value, source, synonyms


async def broker_entries(broker: Broker, node: int | None = 0) -> list[ConfigEntry]:
    """The broker's configs: its own settings, then every topic default it sets, each
    with its dynamic value where one is set; ``node`` None: the cluster-wide default's
    dynamic configs only, as Kafka describes the empty broker name."""
    cluster, per_broker = await dynamic_broker_configs(broker)
    own = per_broker.get(node, {}) if node is not None else {}
    if node is None:
        return [
            ConfigEntry(
                name, value, "dynamic_default", [(name, value, "dynamic_default")], kind, ""
            )
            for name, value in sorted(cluster.items())
            for kind in [TOPIC_CONFIGS[BROKER_SYNONYMS[name]].kind]
        ]

    def dynamic(name: str) -> list[tuple[str | None, Source]]:
        return [(own.get(name), "dynamic_broker"), (cluster.get(name), "dynamic_default")]

    entries = []
    for name, text, kind, doc in broker.config.describe():
        if name in DYNAMIC_BROKER_CONFIGS:
            value, source, synonyms = _layers(name, text, text, dynamic(name))
            entries.append(ConfigEntry(name, value, source, synonyms, kind, doc))
        else:
            entries.append(ConfigEntry(name, text, "broker", [], kind, doc))
    defaults = broker.config.topic_defaults
    for key in TOPIC_CONFIGS.values():
        if key.broker is None or any(e.name == key.broker for e in entries):
            continue
        value, source, synonyms = _layers(
            key.broker, defaults.get(key.name), key.default, dynamic(key.broker)
        )
        entries.append(ConfigEntry(key.broker, value, source, synonyms, key.kind, key.doc))
    return entries


def group_defaults(broker: Broker) -> dict[str, str]:
    """The broker's defaults of the group configs, and their bounds."""
    return {
        **broker.consumer_groups.config.group_defaults(),
        **broker.share_groups.config.group_defaults(),
    }


def group_entries(broker: Broker, configs: dict[str, str]) -> list[ConfigEntry]:
    """Every group config: set on the group (GROUP_CONFIG), else the broker's value (its
    start-up config where it differs from Kafka's default), else Kafka's."""
    defaults = group_defaults(broker)
    entries = []
    for key in GROUP_CONFIGS.values():
        synonyms: list[tuple[str, str, Source]] = []
        if key.name in configs:
            synonyms.append((key.name, configs[key.name], "group"))
        broker_value = defaults.get(key.name, key.default)
        if broker_value != key.default:
            synonyms.append((key.broker, broker_value, "broker"))
        synonyms.append((key.broker, key.default, "default"))
        doc = key.doc or "accepted and described; no effect here"
        entries.append(
            ConfigEntry(key.name, synonyms[0][1], synonyms[0][2], synonyms, key.kind, doc)
        )
    return entries


def _resource_error(
    resource: DescribeConfigsResource | AlterResource,
) -> tuple[ErrorCode, str] | None:
    if resource.resource_type in (TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE):
        return None
    return ErrorCode.invalid_request, f"Unsupported resource type: {resource.resource_type}"


async def _describe_one(
    broker: Broker, request: Request, resource: DescribeConfigsResource
) -> list[ConfigEntry]:
    """One resource's entries; raises a core error for its refusal."""
    name = resource.resource_name
    if resource.resource_type == TOPIC_RESOURCE:
        check_topic(broker, request, Operation.DESCRIBE_CONFIGS, name)
        return describe(await broker.log.topic(name))
    if resource.resource_type == GROUP_RESOURCE:
        if not name:
            raise InvalidRequest("Group name must not be empty")
        check_group(broker, request, Operation.DESCRIBE_CONFIGS, name)
        return group_entries(broker, await broker.groups.admin.group_configs(name))
    node = _broker_node(broker, name, describing=True)
    check_cluster(broker, request, Operation.DESCRIBE_CONFIGS)
    return await broker_entries(broker, node)


async def describe_configs(
    broker: Broker, request: Request[DescribeConfigsRequest]
) -> DescribeConfigsResponse:
    result_class, entry_class, synonym_class = request.response_entities(
        "DescribeConfigsResult", "DescribeConfigsResourceResult", "DescribeConfigsSynonym"
    )
    synonyms_wanted = request.body.include_synonyms  # v1+: every version offered
    docs_wanted = getattr(request.body, "include_documentation", False)
    results = []
    for resource in request.body.resources:
        error, message, entries = ErrorCode.none, None, []
        problem = _resource_error(resource)
        if problem is not None:
            error, message = problem
        else:
            try:
                entries = await _describe_one(broker, request, resource)
            except KafkaesqueError as exc:
                error, message = error_code(exc), str(exc)
        wanted = resource.configuration_keys
        configs = tuple(
            build(
                entry_class,
                name=e.name,
                value=e.value,
                # Topic and group configs change through AlterConfigs, and the broker's
                # dynamic ones; its others only at start.
                read_only=resource.resource_type == BROKER_RESOURCE
                and e.name not in DYNAMIC_BROKER_CONFIGS,
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
    return build(request.response_class, throttle_time=NO_THROTTLE, results=tuple(results))


def _result(
    cls: type,
    resource: DescribeConfigsResource | AlterResource,
    error: ErrorCode,
    message: str | None,
    **more: Any,
) -> Any:
    """One resource's answer, as both describe and alter give it."""
    return build(
        cls,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        **more,
    )


# -- altering ---------------------------------------------------------------------------------
async def _alter_group(broker: Broker, resource: AlterResource, only: bool) -> None:
    """A group's dynamic configs: replaced (AlterConfigs) or changed (incrementally), then
    checked as a whole against the broker's bounds."""
    name = resource.resource_name
    if not name:
        raise InvalidRequest("Default group resources are not allowed.")
    if _incremental(resource):
        if any(c.config_operation not in ALTER_OPS for c in resource.configs):
            raise InvalidRequest("config operation must be SET, DELETE, APPEND or SUBTRACT")
        operations = [(AlterOp(c.config_operation), c.name, c.value) for c in resource.configs]

        def change(configs: dict[str, str]) -> dict[str, str]:
            return altered_group(configs, operations)

    else:
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            raise InvalidRequest("Error due to duplicate config keys")
        settings = {c.name: parse_group(c.name, c.value) for c in resource.configs}

        def change(configs: dict[str, str]) -> dict[str, str]:
            return settings

    await broker.groups.admin.alter_group_configs(name, change, group_defaults(broker), only)


async def _alter(
    broker: Broker, request: Request[AlterConfigsRequest | IncrementalAlterConfigsRequest]
) -> tuple[AlterResult, ...]:
    """Both alter APIs' answers: each resource changed atomically, or not at all."""
    result_class = schema_class(request.response_class, "AlterConfigsResourceResponse")
    only = request.body.validate_only
    results: list[AlterResult] = []
    for resource in request.body.resources:
        error, message = ErrorCode.none, None
        try:
            problem = _resource_error(resource)
            if problem is not None:
                error, message = problem
            elif resource.resource_type == TOPIC_RESOURCE:
                check_topic(broker, request, Operation.ALTER_CONFIGS, resource.resource_name)
                change = _change(resource)
                if only:
                    change(await broker.log.topic(resource.resource_name)).validate()
                else:
                    await broker.log.configure_topic(resource.resource_name, change)
                    broker.partitions.forget_config(resource.resource_name)
            elif resource.resource_type == GROUP_RESOURCE:
                if resource.resource_name:
                    check_group(broker, request, Operation.ALTER_CONFIGS, resource.resource_name)
                await _alter_group(broker, resource, only)
            else:
                check_cluster(broker, request, Operation.ALTER_CONFIGS)
                await _alter_broker(broker, resource, only)
        except KafkaesqueError as exc:
            error, message = error_code(exc), str(exc)
        results.append(_result(result_class, resource, error, message))
    return tuple(results)


def _change(resource: AlterResource) -> Callable[[TopicConfig], TopicConfig]:
    """What an (Incremental)AlterConfigs resource does to a topic's config."""
    if _incremental(resource):
        if any(c.config_operation not in ALTER_OPS for c in resource.configs):
            raise InvalidConfig("config operation must be SET, DELETE, APPEND or SUBTRACT")
        operations = [(AlterOp(c.config_operation), c.name, c.value) for c in resource.configs]
        return lambda config: altered(config, operations)
    settings = {c.name: c.value for c in resource.configs}
    return lambda config: replaced(config, settings)


async def alter_configs(
    broker: Broker, request: Request[AlterConfigsRequest]
) -> AlterConfigsResponse:
    responses = await _alter(broker, request)
    return build(request.response_class, throttle_time=NO_THROTTLE, responses=responses)


async def incremental_alter_configs(
    broker: Broker, request: Request[IncrementalAlterConfigsRequest]
) -> IncrementalAlterConfigsResponse:
    responses = await _alter(broker, request)
    return build(request.response_class, throttle_time=NO_THROTTLE, responses=responses)
