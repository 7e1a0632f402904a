"""Replica management and the metadata quorum: ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments and DescribeQuorum.

One broker holds and leads every partition (kafkaesque.partition.replicas), so these answer what a
Kafka cluster of one KRaft node in combined mode would: no election is needed, nothing
can move or is moving, and the quorum is this node alone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import InvalidRequest, KafkaesqueError, StorageUnavailable
from kafkaesque.partition.replicas import PREFERRED, UNCLEAN, Replicas
from wire.authorize import Operation, check_cluster
from wire.broker import Broker
from wire.errors import error_code, error_message
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response
from wire.protocol.kio_types import chooses_election

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        DescribeQuorumNode,
        DescribeQuorumPartitionData,
        DescribeQuorumRequest,
        DescribeQuorumResponse,
        ElectLeadersRequest,
        ElectLeadersResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

METADATA_TOPIC = "__cluster_metadata"  # the KRaft quorum's log, partition 0
# The epoch of a quorum whose first (and only) election made this node leader.
QUORUM_EPOCH = 1
NO_DIRECTORY = uuid.UUID(int=0)  # a voter whose log directory id is not known (KIP-853)


def replicas(broker: Broker) -> Replicas:
    return Replicas(broker.leadership)


async def _outcome(action: Awaitable[None]) -> tuple[ErrorCode, str | None]:
    """(code, message) of one partition's action: none when it returns."""
    try:
        await action
    except KafkaesqueError as exc:
        return error_code(exc), error_message(exc)
    return ErrorCode.none, None


async def _all_partitions(broker: Broker) -> list[tuple[str, list[int]]]:
    """Every topic with all its partitions, for requests that name none."""
    found = []
    for name in await broker.log.list_topics():
        try:
            config = await broker.log.topic(name)
        except KafkaesqueError:
            continue  # deleted meanwhile
        found.append((name, list(range(config.partitions))))
    return found


# -- ElectLeaders ------------------------------------------------------------------------------


async def elect_leaders(
    broker: Broker, request: Request[ElectLeadersRequest]
) -> ElectLeadersResponse:
    """Each partition's outcome (while Redis is away KAFKA_STORAGE_ERROR, retried). When
    electing everywhere and the partitions cannot be listed (Redis away), Kafka's error
    response: the code at the top (v1+), no partitions."""
    body, version = request.body, request.api_version
    check_cluster(broker, request, Operation.ALTER)
    schema = request.response_class
    topic_class, partition_class = request.response_entities(
        "ReplicaElectionResult", "PartitionResult"
    )
    election = body.election_type if chooses_election(body) else PREFERRED
    if election not in (PREFERRED, UNCLEAN):
        raise InvalidRequest(f"unknown election type {election}")  # top-level, in v1+
    asked = body.topic_partitions
    everything = asked is None
    try:
        wanted = (
            await _all_partitions(broker)
            if asked is None
            else [(t.topic, list(t.partitions)) for t in asked]
        )
    except StorageUnavailable as exc:
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=error_code(exc),
            replica_election_results=(),
        )
    place = replicas(broker)
    results = []
    for topic, partitions in wanted:
        answers = []
        for p in partitions:
            code, message = await _outcome(place.elect(topic, p, election))
            if code == ErrorCode.election_not_needed:
                # Kafka leaves these out when electing everywhere; v0 predates the code
                # (KIP-460) and counted a partition its preferred leader led as done.
                if everything:
                    continue
                if version == 0:
                    code, message = ErrorCode.none, None
            answers.append(
                build(partition_class, partition_id=p, error_code=code, error_message=message)
            )
        if answers or not everything:
            results.append(build(topic_class, topic=topic, partition_result=tuple(answers)))
    return ok_response(schema, replica_election_results=tuple(results))


# -- partition reassignments ------------------------------------------------------------------


async def alter_partition_reassignments(
    broker: Broker, request: Request[AlterPartitionReassignmentsRequest]
) -> AlterPartitionReassignmentsResponse:
    check_cluster(broker, request, Operation.ALTER)
    topic_class, partition_class = request.response_entities(
        "ReassignableTopicResponse", "ReassignablePartitionResponse"
    )
    place = replicas(broker)
    results = []
    for topic in request.body.topics:
        answers = []
        for p in topic.partitions:
            code, message = await _outcome(
                place.reassign(topic.name, p.partition_index, p.replicas)
            )
            answers.append(
                build(
                    partition_class,
                    partition_index=p.partition_index,
                    error_code=code,
                    error_message=message,
                )
            )
        results.append(build(topic_class, name=topic.name, partitions=tuple(answers)))
    return ok_response(request.response_class, responses=tuple(results))


async def list_partition_reassignments(
    broker: Broker, request: Request[ListPartitionReassignmentsRequest]
) -> ListPartitionReassignmentsResponse:
    """None is ever in progress; like KRaft, partitions that do not exist are not an
    error here, they have no reassignment either."""
    check_cluster(broker, request, Operation.DESCRIBE)
    return ok_response(request.response_class, topics=())


# -- DescribeQuorum ---------------------------------------------------------------------------


async def describe_quorum(
    broker: Broker, request: Request[DescribeQuorumRequest]
) -> DescribeQuorumResponse:
    """The quorum of a single KRaft node in combined mode: this node, the only voter,
    leads. kafkaesque keeps its metadata in Redis, not in a replicated log, so the
    metadata log's offsets are 0 (nothing to replicate, no voter lags)."""
    check_cluster(broker, request, Operation.DESCRIBE)
    topics = request.body.topics
    asked = [(t.topic_name, p.partition_index) for t in topics for p in t.partitions]
    # Kafka answers only a request for exactly the metadata partition (KafkaRaftClient).
    valid = asked == [(METADATA_TOPIC, 0)]
    now = int(time.time() * 1000)
    node, config = broker.config.node_id, broker.config
    voter = build(
        request.response_entity("ReplicaState"),
        replica_id=node,
        replica_directory_id=NO_DIRECTORY,
        log_end_offset=0,
        # A leader fetches from itself: Kafka reports it fetched and caught up now.
        last_fetch_timestamp=now,
        last_caught_up_timestamp=now,
    )
    partition_class = request.response_entity("PartitionData")

    def answer(index: int) -> DescribeQuorumPartitionData:
        if not valid:
            return build(
                partition_class,
                partition_index=index,
                error_code=ErrorCode.unknown_topic_or_partition,
                error_message=None,
                leader_id=-1,
                leader_epoch=-1,
                high_watermark=-1,
                current_voters=(),
                observers=(),
            )
        return build(
            partition_class,
            partition_index=index,
            error_code=ErrorCode.none,
            error_message=None,
            leader_id=node,
            leader_epoch=QUORUM_EPOCH,
            high_watermark=0,
            current_voters=(voter,),
            observers=(),
        )

    nodes: tuple[DescribeQuorumNode, ...] = ()
    if valid and request.api_version >= 2:  # v2 lists the voters' endpoints (KIP-853)
        advertised = config.advertised_listeners or {"PLAINTEXT": (config.host, config.port)}
        listeners = tuple(
            build(request.response_entity("Listener"), name=name, host=host, port=port)
            for name, (host, port) in advertised.items()
        )
        nodes = (build(request.response_entity("Node"), node_id=node, listeners=listeners),)
    return build(
        request.response_class,
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(
            build(
                request.response_entity("TopicData"),
                topic_name=t.topic_name,
                partitions=tuple(answer(p.partition_index) for p in t.partitions),
            )
            for t in topics
        ),
        nodes=nodes,
    )
