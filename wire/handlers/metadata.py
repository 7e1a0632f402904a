"""ApiVersions, Metadata and DescribeCluster: what clients ask before anything else."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.log import (
    InvalidTopic,
    LogError,
    TopicConfig,
    TopicExists,
    UnknownTopic,
    check_topic_name,
)
from wire.broker import Broker, api
from wire.protocol import Request, build, response_schema, schema_class

NO_THROTTLE = datetime.timedelta(0)


@api(18, 0, 4)
async def api_versions(broker: Broker, request: Request) -> Any:
    schema = response_schema(18, request.api_version)
    version = schema_class(schema, "ApiVersion")
    keys = tuple(
        build(version, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(broker.supported().items())
    )
    return build(schema, error_code=ErrorCode.none, api_keys=keys, throttle_time=NO_THROTTLE)


async def topic_config(broker: Broker, name: str, auto_create: bool) -> TopicConfig | ErrorCode:
    """The topic's config, creating it when allowed; else the error code for the client."""
    try:
        check_topic_name(name)
        return await broker.log.topic(name)
    except InvalidTopic:
        return ErrorCode.invalid_topic_exception
    except UnknownTopic:
        if not (auto_create and broker.config.auto_create_topics):
            return ErrorCode.unknown_topic_or_partition
    try:
        return await broker.log.create_topic(TopicConfig(name, broker.config.default_partitions))
    except TopicExists:  # another client created it meanwhile
        return await broker.log.topic(name)
    except LogError:
        return ErrorCode.invalid_topic_exception


def broker_entries(broker: Broker, entry_class: type) -> tuple[Any, ...]:
    c = broker.config
    return (
        build(
            entry_class, node_id=c.node_id, broker_id=c.node_id, host=c.host, port=c.port, rack=None
        ),
    )


@api(3, 0, 7)
async def metadata(broker: Broker, request: Request) -> Any:
    body, version = request.body, request.api_version
    schema = response_schema(3, version)
    topic_class = schema_class(schema, "MetadataResponseTopic")
    partition_class = schema_class(schema, "MetadataResponsePartition")
    # Null means all topics; so does an empty list in v0.
    if body.topics is None or (version == 0 and not body.topics):
        names = await broker.log.list_topics()
        auto_create = False
    else:
        names = [t.name for t in body.topics]
        auto_create = body.allow_auto_topic_creation if version >= 4 else True
    node = broker.config.node_id
    topics = []
    for name in names:
        config = await topic_config(broker, name, auto_create)
        if isinstance(config, ErrorCode):
            topics.append(
                build(topic_class, error_code=config, name=name, is_internal=False, partitions=())
            )
            continue
        epochs = await broker.log.leader_epochs(name, config.partitions) if version >= 7 else None
        partitions = tuple(
            build(
                partition_class,
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node,
                leader_epoch=epochs[p] if epochs else 0,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for p in range(config.partitions)
        )
        topics.append(
            build(
                topic_class,
                error_code=ErrorCode.none,
                name=name,
                is_internal=False,
                partitions=partitions,
            )
        )
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        brokers=broker_entries(broker, schema_class(schema, "MetadataResponseBroker")),
        cluster_id=broker.cluster_id,
        controller_id=node,
        topics=tuple(topics),
    )


@api(60, 0, 1)
async def describe_cluster(broker: Broker, request: Request) -> Any:
    schema = response_schema(60, request.api_version)
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        cluster_id=broker.cluster_id,
        controller_id=broker.config.node_id,
        brokers=broker_entries(broker, schema_class(schema, "DescribeClusterBroker")),
        cluster_authorized_operations=-2147483648,  # not requested / not supported
        endpoint_type=1,  # v1+: these are broker endpoints
    )
