"""The authorization checks handlers make, as Kafka's KafkaApis (AuthHelper) makes them.

Each check asks the broker's ``Authorizer`` (kafkaesque/security/authorizer.py) about the request's
principal and peer host; without an authorizer (``serve`` without ``--authorizer acl``)
everything is allowed and a check costs one attribute test. The ``check_*`` functions
raise the core's ``*AuthorizationFailed``, which ``wire/errors.py`` turns into Kafka's
TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED wherever the handler puts
errors (per partition, per topic, or the whole response).

For transactions (not in this module's callers yet), Kafka checks: InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit: WRITE on the transactional
id (``check_transactional_id``); FindCoordinator with key type TRANSACTION: DESCRIBE on it;
AddPartitionsToTxn also WRITE on each topic, TxnOffsetCommit READ on the group and topics.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkaesque.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from kafkaesque.security.acls import CLUSTER_NAME, Operation, ResourceType
from wire.broker import Broker
from wire.protocol.codec import Request

__all__ = ["Operation", "ResourceType"]


def peer_host(request: Request) -> str:
    """The client's IP as ACL hosts name it (``client_host`` is Kafka's "/IP")."""
    return request.client_host.removeprefix("/")


def allowed(
    broker: Broker, request: Request, operation: Operation, resource_type: ResourceType, name: str
) -> bool:
    """May the request's principal do ``operation`` on the resource?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(
        request.connection.principal, peer_host(request), operation, resource_type, name
    )


# The operations each resource type supports (Kafka's AclEntry.supportedOperations), and
# the value of an authorized-operations field a request did not ask for (Integer.MIN_VALUE).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        Operation.READ,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
}
NOT_ASKED = -(2**31)


def authorized_operations(
    broker: Broker, request: Request, resource_type: ResourceType, name: str, asked: bool = True
) -> int:
    """The bit field of the operations the request's principal may do on the resource,
    among those its type supports (every one of them without an authorizer), as Kafka's
    KafkaApis.authorizedOperations; NOT_ASKED unless ``asked``."""
    if not asked:
        return NOT_ASKED
    field = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(broker, request, operation, resource_type, name):
            field |= 1 << operation
    return field


def cluster_allowed(broker: Broker, request: Request, operation: Operation) -> bool:
    return allowed(broker, request, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def any_allowed(
    broker: Broker, request: Request, operation: Operation, resource_type: ResourceType
) -> bool:
    """Is ``operation`` allowed on some resource of the type (Kafka's
    authorizeByResourceType)?"""
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize_any(
        request.connection.principal, peer_host(request), operation, resource_type
    )


def topics_allowed(
    broker: Broker, request: Request, operation: Operation, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on."""
    return {n for n in names if allowed(broker, request, operation, ResourceType.TOPIC, n)}


def check_cluster(broker: Broker, request: Request, operation: Operation) -> None:
    if not cluster_allowed(broker, request, operation):
        raise ClusterAuthorizationFailed(
            f"Cluster authorization failed: {operation.name} on the cluster"
        )


def check_topic(broker: Broker, request: Request, operation: Operation, name: str) -> None:
    if not allowed(broker, request, operation, ResourceType.TOPIC, name):
        raise TopicAuthorizationFailed(f"Not authorized to {operation.name} topic {name}")


def check_group(broker: Broker, request: Request, operation: Operation, group: str) -> None:
    if not allowed(broker, request, operation, ResourceType.GROUP, group):
        raise GroupAuthorizationFailed(f"Not authorized to {operation.name} group {group}")


def check_transactional_id(
    broker: Broker, request: Request, operation: Operation, transactional_id: str
) -> None:
    if not allowed(broker, request, operation, ResourceType.TRANSACTIONAL_ID, transactional_id):
        raise TransactionalIdAuthorizationFailed(
            f"Not authorized to {operation.name} transactional id {transactional_id}"
        )


def check_create_topic(broker: Broker, request: Request, name: str) -> None:
    """CreateTopics and auto-creation: CREATE on the cluster or on the topic."""
    if not cluster_allowed(broker, request, Operation.CREATE):
        check_topic(broker, request, Operation.CREATE, name)


def check_idempotent_write(broker: Broker, request: Request) -> None:
    """An idempotent producer's InitProducerId: IDEMPOTENT_WRITE on the cluster, or (Kafka
    2.8+) WRITE on any topic."""
    if not cluster_allowed(broker, request, Operation.IDEMPOTENT_WRITE) and not any_allowed(
        broker, request, Operation.WRITE, ResourceType.TOPIC
    ):
        raise ClusterAuthorizationFailed(
            "Cluster authorization failed: IDEMPOTENT_WRITE on the cluster (or WRITE on a topic)"
        )
