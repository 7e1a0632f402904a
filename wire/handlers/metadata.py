"""ApiVersions, Metadata and DescribeCluster: what clients ask before anything else."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig, check_topic_name
from kafkaesque.errors import KafkaesqueError, StorageUnavailable, TopicExists, UnknownTopic
from kafkaesque.hot.outage import REDIS_CONNECTION_ERRORS
from kafkaesque.security.acls import CLUSTER_NAME
from wire.authorize import (
    Operation,
    ResourceType,
    allowed,
    authorized_operations,
    cluster_allowed,
    topics_allowed,
)
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, error_response, ok_response
from wire.protocol.kio_types import says_auto_create
from wire.topics import (
    NO_TOPIC_ID,
    broker_entries,
    known_topics,
    partition_entries,
    partition_leaders,
    remember_topics,
    topic_by_id,
    topic_error_entry,
)

if TYPE_CHECKING:
    from typing import TypeGuard

    from wire.protocol.kio_types import (
        DescribeClusterRequest,
        DescribeClusterResponse,
        MetadataRequest,
        MetadataRequestTopic,
        MetadataRequestTopicV12Plus,
        MetadataResponse,
    )

# Redis (or the archive) away, as the core or redis-py says it.
UNAVAILABLE: tuple[type[BaseException], ...] = (StorageUnavailable, *REDIS_CONNECTION_ERRORS)


async def topic_config(broker: Broker, name: str, auto_create: bool) -> TopicConfig | ErrorCode:
    """The topic's config, creating it when allowed; else the error code for the client."""
    try:
        return await _topic_config(broker, name, auto_create)
    except UNAVAILABLE:
        # Redis (or the archive a restore needs) is away: as Kafka says of a partition
        # whose leader is offline, so clients wait and ask again.
        return ErrorCode.leader_not_available


async def _topic_config(broker: Broker, name: str, auto_create: bool) -> TopicConfig | ErrorCode:
    try:
        check_topic_name(name)
        return await broker.log.topic(name)
    except UnknownTopic as exc:
        if not (auto_create and broker.config.auto_create_topics):
            return error_code(exc)
    except StorageUnavailable:
        raise
    except KafkaesqueError as exc:
        return error_code(exc)
    try:
        return await broker.log.create_topic(TopicConfig(name, broker.config.default_partitions))
    except TopicExists:  # another client created it meanwhile
        return await broker.log.topic(name)
    except KafkaesqueError as exc:
        return error_code(exc)


def controller_id(broker: Broker) -> int:
    """Any broker can do what Kafka's controller does (all share Redis): the lowest id."""
    return min(broker.registry.live)


def _by_id(
    entry: MetadataRequestTopic,
) -> TypeGuard[MetadataRequestTopicV12Plus]:
    """v12 may name a topic by its id alone (a null name)."""
    return entry.name is None and entry.__version__ >= 12


async def requested_topic(
    broker: Broker, entry: MetadataRequestTopic, auto_create: bool
) -> tuple[str | None, TopicConfig | ErrorCode]:
    """(name, config or error) for one topic of a Metadata request: by name, or by id."""
    if _by_id(entry):  # never auto-created
        try:
            config = await topic_by_id(broker, entry.topic_id or NO_TOPIC_ID)
        except UNAVAILABLE:
            return None, ErrorCode.leader_not_available
        if config is None:
            return None, ErrorCode.unknown_topic_id
        return config.name, config
    if entry.name is None:
        # v10 and v11 carry a topic id but no null name in the answer: Kafka refuses them.
        return "", ErrorCode.invalid_request
    return entry.name, await topic_config(broker, entry.name, auto_create)


async def authorized_topic(
    broker: Broker,
    request: Request[MetadataRequest],
    entry: MetadataRequestTopic,
    auto_create: bool,
) -> tuple[str | None, TopicConfig | ErrorCode]:
    """``requested_topic`` as the principal may see it: DESCRIBE to see a topic, CREATE
    (on the cluster or the topic) to have it auto-created; else TOPIC_AUTHORIZATION_FAILED,
    as Kafka answers."""
    may_create = True
    if entry.name is not None:
        if not allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, entry.name):
            return entry.name, ErrorCode.topic_authorization_failed
        may_create = cluster_allowed(broker, request, Operation.CREATE) or allowed(
            broker, request, Operation.CREATE, ResourceType.TOPIC, entry.name
        )
    name, config = await requested_topic(broker, entry, auto_create and may_create)
    if config == ErrorCode.unknown_topic_or_partition and not may_create:
        if auto_create and broker.config.auto_create_topics:
            return name, ErrorCode.topic_authorization_failed
    if name is not None and entry.name is None:  # by id: DESCRIBE on the name it has
        if not allowed(broker, request, Operation.DESCRIBE, ResourceType.TOPIC, name):
            return name, ErrorCode.topic_authorization_failed
    return name, config


async def _all_topics(
    broker: Broker, request: Request
) -> list[tuple[str | None, TopicConfig | ErrorCode]]:
    """Every topic the principal may DESCRIBE (others hidden). Redis away: the topics this
    broker listed last, each LEADER_NOT_AVAILABLE, as Kafka answers for a partition whose
    leader is offline. An answer without them would tell a client that lists all topics
    (a regex subscription, librdkafka's full refresh) that they were deleted; with a
    retriable error per topic it keeps them and asks again."""
    try:
        names = await broker.log.list_topics()
    except UNAVAILABLE:
        names = known_topics(broker)
        visible = topics_allowed(broker, request, Operation.DESCRIBE, names)
        return [(name, ErrorCode.leader_not_available) for name in names if name in visible]
    remember_topics(broker, names)
    visible = topics_allowed(broker, request, Operation.DESCRIBE, names)
    return [(name, await topic_config(broker, name, False)) for name in names if name in visible]


async def metadata(broker: Broker, request: Request[MetadataRequest]) -> MetadataResponse:
    body, version = request.body, request.api_version
    topic_class, partition_class = request.response_entities(
        "MetadataResponseTopic", "MetadataResponsePartition"
    )
    # Null means all topics; so does an empty list in v0.
    if body.topics is None or (version == 0 and not body.topics):
        entries = await _all_topics(broker, request)
    else:
        auto_create = body.allow_auto_topic_creation if says_auto_create(body) else True
        entries = [await authorized_topic(broker, request, t, auto_create) for t in body.topics]
    # v8+: the operations the principal may do, when asked (v8-10 for the cluster too).
    topic_operations = getattr(body, "include_topic_authorized_operations", False)
    topics = []
    for name, config in entries:
        if not isinstance(config, ErrorCode):
            try:
                leaders = await partition_leaders(broker, config, range(config.partitions))
            except UNAVAILABLE:
                config = ErrorCode.leader_not_available  # as in topic_config
        if isinstance(config, ErrorCode):
            topics.append(topic_error_entry(topic_class, name, config))
            continue
        partitions = partition_entries(broker, partition_class, config, enumerate(leaders))
        topics.append(
            build(
                topic_class,
                error_code=ErrorCode.none,
                name=config.name,
                topic_id=uuid.UUID(bytes=config.topic_id),
                is_internal=False,
                partitions=partitions,
                topic_authorized_operations=authorized_operations(
                    broker, request, ResourceType.TOPIC, config.name, topic_operations
                ),
            )
        )
    return build(
        request.response_class,
        throttle_time=NO_THROTTLE,
        brokers=broker_entries(
            broker, request.response_entity("MetadataResponseBroker"), request.connection.listener
        ),
        cluster_id=broker.cluster_id,
        controller_id=controller_id(broker),
        topics=tuple(topics),
        cluster_authorized_operations=cluster_operations(
            broker, request, getattr(body, "include_cluster_authorized_operations", False)
        ),
    )


def cluster_operations(broker: Broker, request: Request, asked: bool) -> int:
    """The cluster's authorized operations as Kafka answers them: none (0) for a
    principal that may not DESCRIBE the cluster."""
    if asked and not cluster_allowed(broker, request, Operation.DESCRIBE):
        return 0
    return authorized_operations(broker, request, ResourceType.CLUSTER, CLUSTER_NAME, asked)


BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2  # DescribeCluster v1+'s endpoint types


async def describe_cluster(
    broker: Broker, request: Request[DescribeClusterRequest]
) -> DescribeClusterResponse:
    """The live brokers (v2: never fenced, so include_fenced_brokers adds none). Their
    listeners are broker endpoints: asked for controllers (KIP-919's
    bootstrap.controllers), it says so as Kafka's brokers do."""
    schema = request.response_class
    wanted = getattr(request.body, "endpoint_type", BROKER_ENDPOINTS)
    if wanted != BROKER_ENDPOINTS:
        mismatched = wanted == CONTROLLER_ENDPOINTS
        code = (
            ErrorCode.mismatched_endpoint_type
            if mismatched
            else ErrorCode.unsupported_endpoint_type
        )
        response = error_response(schema, code)
        assert response is not None  # every DescribeCluster version has an error_code
        return response
    return ok_response(
        schema,
        cluster_id=broker.cluster_id,
        controller_id=controller_id(broker),
        brokers=broker_entries(
            broker, request.response_entity("DescribeClusterBroker"), request.connection.listener
        ),
        cluster_authorized_operations=cluster_operations(
            broker, request, request.body.include_cluster_authorized_operations
        ),
        endpoint_type=1,  # v1+: these are broker endpoints
    )
