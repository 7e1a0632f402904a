"""DescribeAcls, CreateAcls, DeleteAcls: the ACLs of the authorizer (kafkaesque/security/acls.py).

As Kafka: DESCRIBE on the cluster to list them, ALTER to change them; a broker without an
authorizer answers SECURITY_DISABLED; a filter or binding with unknown or (for a binding)
ANY/MATCH elements is INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import (
    InvalidRequest,
    KafkaesqueError,
    SecurityDisabled,
    StorageUnavailable,
)
from kafkaesque.security.acls import AclBinding, AclFilter, check_binding, check_filter
from kafkaesque.security.authorizer import Authorizer
from wire.authorize import Operation, check_cluster
from wire.broker import Broker
from wire.errors import error_code, error_message
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response, refused_response

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        CreateAclsRequest,
        CreateAclsResponse,
        DeleteAclsFilter,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
    )

NO_AUTHORIZER = "No Authorizer is configured."


def _authorizer(broker: Broker) -> Authorizer:
    if broker.authorizer is None:
        raise SecurityDisabled(NO_AUTHORIZER)
    return broker.authorizer


def _filter(entry: DescribeAclsRequest | DeleteAclsFilter) -> AclFilter:
    """The filter a DescribeAcls request or a DeleteAcls filter entry says, checked."""
    return check_filter(
        entry.resource_type_filter,
        entry.resource_name_filter,
        entry.pattern_type_filter,
        entry.principal_filter,
        entry.host_filter,
        entry.operation,
        entry.permission_type,
    )


async def describe_acls(
    broker: Broker, request: Request[DescribeAclsRequest]
) -> DescribeAclsResponse:
    schema = request.response_class
    check_cluster(broker, request, Operation.DESCRIBE)
    try:
        authorizer = _authorizer(broker)
        found = await authorizer.store.describe(_filter(request.body))
    except (SecurityDisabled, InvalidRequest) as exc:
        return refused_response(schema, error_code(exc), str(exc), resources=())
    resource_class, acl_class = request.response_entities("DescribeAclsResource", "AclDescription")
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in found:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    resources = tuple(
        build(
            resource_class,
            resource_type=int(rtype),
            resource_name=name,
            pattern_type=int(pattern),
            acls=tuple(
                build(
                    acl_class,
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in bindings
            ),
        )
        for (rtype, name, pattern), bindings in by_resource.items()
    )
    return ok_response(schema, resources=resources)


async def _refresh(authorizer: Authorizer) -> None:
    """Re-read the bindings, so this broker's next request sees a change just made. The
    change is in Redis already: if Redis went away since, it stands all the same, and the
    background refresh (Authorizer.run) reads it once Redis is back."""
    try:
        await authorizer.refresh()
    except StorageUnavailable:
        pass


async def create_acls(broker: Broker, request: Request[CreateAclsRequest]) -> CreateAclsResponse:
    """Each creation checked on its own; the valid ones are added in one transaction.
    Redis away: none is added, and each of them answers KAFKA_STORAGE_ERROR (retried)."""
    result_class = request.response_entity("AclCreationResult")
    valid: list[AclBinding] = []
    errors: list[KafkaesqueError | None] = []
    for c in request.body.creations:
        try:
            check_cluster(broker, request, Operation.ALTER)  # no top-level error: per entry
            _authorizer(broker)
            valid.append(
                check_binding(
                    c.resource_type,
                    c.resource_name,
                    c.resource_pattern_type,
                    c.principal,
                    c.host,
                    c.operation,
                    c.permission_type,
                )
            )
            errors.append(None)
        except KafkaesqueError as exc:
            errors.append(exc)
    if valid:
        authorizer = _authorizer(broker)
        try:
            await authorizer.store.add(valid)
        except StorageUnavailable as exc:
            errors = [exc if error is None else error for error in errors]
        else:
            await _refresh(authorizer)  # this broker's next request sees them
    results = tuple(
        build(result_class, error_code=error_code(error), error_message=error_message(error))
        for error in errors
    )
    return build(request.response_class, throttle_time=NO_THROTTLE, results=results)


async def delete_acls(broker: Broker, request: Request[DeleteAclsRequest]) -> DeleteAclsResponse:
    """Every valid filter's matching bindings go, in one transaction. Redis away: none
    goes, and each valid filter answers KAFKA_STORAGE_ERROR (retried), matching none."""
    result_class, matching_class = request.response_entities(
        "DeleteAclsFilterResult", "DeleteAclsMatchingAcl"
    )
    filters = []
    errors: list[KafkaesqueError | None] = []
    for entry in request.body.filters:
        try:
            check_cluster(broker, request, Operation.ALTER)  # no top-level error: per filter
            _authorizer(broker)
            filters.append(_filter(entry))
            errors.append(None)
        except KafkaesqueError as exc:
            errors.append(exc)
    removed: list[list[AclBinding]] = []
    if filters:
        authorizer = _authorizer(broker)
        try:
            removed = await authorizer.store.remove(filters)
        except StorageUnavailable as exc:
            errors = [exc if error is None else error for error in errors]
        else:
            await _refresh(authorizer)
    gone_by_filter = iter(removed)
    results = []
    for error in errors:
        gone = [] if error is not None else next(gone_by_filter)
        results.append(
            build(
                result_class,
                error_code=error_code(error),
                error_message=error_message(error),
                matching_acls=tuple(
                    build(
                        matching_class,
                        error_code=ErrorCode.none,
                        error_message=None,
                        resource_type=int(b.resource_type),
                        resource_name=b.name,
                        pattern_type=int(b.pattern_type),
                        principal=b.principal,
                        host=b.host,
                        operation=int(b.operation),
                        permission_type=int(b.permission),
                    )
                    for b in gone
                ),
            )
        )
    return build(request.response_class, throttle_time=NO_THROTTLE, filter_results=tuple(results))
