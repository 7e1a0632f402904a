"""DescribeClientQuotas and AlterClientQuotas; wire/net/throttling.py applies the quotas
around every request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import ClusterAuthorizationFailed, StorageUnavailable
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.security.quotas import (
    Alteration,
    InvalidQuota,
    UnsupportedEntityType,
    check_alteration,
    check_filter,
    describe,
    describe_entity,
)
from wire.authorize import Operation, check_cluster, cluster_allowed
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import NO_THROTTLE, Request, build, ok_response, refused_response

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        AlterClientQuotasEntry,
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    )


def store(broker: Broker) -> QuotaStore:
    return broker.log.stores.quotas


async def describe_client_quotas(
    broker: Broker, request: Request[DescribeClientQuotasRequest]
) -> DescribeClientQuotasResponse:
    body = request.body
    check_cluster(broker, request, Operation.DESCRIBE_CONFIGS)
    schema = request.response_class
    try:
        wanted = check_filter(
            ((c.entity_type, c.match_type, c.match) for c in body.components), body.strict
        )
    except InvalidQuota as exc:
        unsupported = isinstance(exc, UnsupportedEntityType)
        code = ErrorCode.unsupported_version if unsupported else ErrorCode.invalid_request
        return refused_response(schema, code, str(exc), entries=None)
    entry_class, entity_class, value_class = request.response_entities(
        "EntryData", "EntityData", "ValueData"
    )
    entries = tuple(
        build(
            entry_class,
            entity=tuple(build(entity_class, entity_type=t, entity_name=n) for t, n in entity),
            values=tuple(build(value_class, key=k, value=v) for k, v in values.items()),
        )
        for entity, values in describe(await store(broker).read(), wanted).items()
    )
    return ok_response(schema, entries=entries)


async def alter_client_quotas(
    broker: Broker, request: Request[AlterClientQuotasRequest]
) -> AlterClientQuotasResponse:
    """Every entry is checked on its own; the valid ones are applied in one transaction,
    unless validate_only. Redis away: none is applied, and each of them answers
    KAFKA_STORAGE_ERROR (retried)."""
    body = request.body
    # One element type for both versions, which zip below keeps.
    entries: tuple[AlterClientQuotasEntry, ...] = body.entries
    entry_class, entity_class = request.response_entities("EntryData", "EntityData")
    valid: list[Alteration] = []
    # per entry: (code, message); None for a valid one until it is applied
    outcomes: list[tuple[ErrorCode, str] | None] = []
    may_alter = cluster_allowed(broker, request, Operation.ALTER_CONFIGS)
    for entry in entries:
        try:
            if not may_alter:
                raise ClusterAuthorizationFailed("Cluster authorization failed: ALTER_CONFIGS")
            alteration = check_alteration(
                ((e.entity_type, e.entity_name) for e in entry.entity),
                ((op.key, op.value, op.remove) for op in entry.ops),
            )
            if any(a.entity == alteration.entity for a in valid):
                raise InvalidQuota(
                    f"Ignoring duplicate entity {describe_entity(alteration.entity)}"
                )
            valid.append(alteration)
            outcomes.append(None)
        except ClusterAuthorizationFailed as exc:
            outcomes.append((error_code(exc), str(exc)))
        except InvalidQuota as exc:
            outcomes.append((ErrorCode.invalid_request, str(exc)))
    if not body.validate_only:
        try:
            await store(broker).alter(valid)
        except StorageUnavailable as exc:
            failed = (error_code(exc), str(exc))
            outcomes = [failed if outcome is None else outcome for outcome in outcomes]
    results = tuple(
        build(
            entry_class,
            error_code=ErrorCode.none if outcome is None else outcome[0],
            error_message=None if outcome is None else outcome[1],
            entity=tuple(
                build(entity_class, entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity
            ),
        )
        for entry, outcome in zip(entries, outcomes, strict=True)
    )
    return build(request.response_class, throttle_time=NO_THROTTLE, entries=results)
