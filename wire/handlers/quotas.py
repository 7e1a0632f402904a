"""DescribeClientQuotas and AlterClientQuotas, and the quotas' part in every request:
``Throttling`` caps a Fetch to its consumer quota before the handler, and after it records
the bytes, sets the response's throttle_time and says how long to mute the connection."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import ClusterAuthorizationFailed, StorageUnavailable
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.security.quota_rates import QuotaManager
from kafkaesque.security.quotas import (
    ANONYMOUS,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
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
from wire.protocol.codec import NO_THROTTLE, Request, build, schema_class

PRODUCE, FETCH, ALTER_CLIENT_QUOTAS = 0, 1, 49


def store(broker: Broker) -> QuotaStore:
    return QuotaStore(broker.log.redis, broker.log.ns)


async def describe_client_quotas(broker: Broker, request: Request) -> Any:
    body = request.body
    check_cluster(broker, request, Operation.DESCRIBE_CONFIGS)
    schema = request.response_class
    try:
        wanted = check_filter(
            ((c.entity_type, c.match_type, c.match) for c in body.components), body.strict
        )
    except InvalidQuota as exc:
        unsupported = isinstance(exc, UnsupportedEntityType)
        return build(
            schema,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.unsupported_version if unsupported else ErrorCode.invalid_request,
            error_message=str(exc),
            entries=None,
        )
    entry_class = schema_class(schema, "EntryData")
    entity_class = schema_class(schema, "EntityData")
    value_class = schema_class(schema, "ValueData")
    entries = tuple(
        build(
            entry_class,
            entity=tuple(build(entity_class, entity_type=t, entity_name=n) for t, n in entity),
            values=tuple(build(value_class, key=k, value=v) for k, v in values.items()),
        )
        for entity, values in describe(await store(broker).read(), wanted).items()
    )
    return build(
        schema,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=entries,
    )


async def alter_client_quotas(broker: Broker, request: Request) -> Any:
    """Every entry is checked on its own; the valid ones are applied in one transaction,
    unless validate_only. Redis away: none is applied, and each of them answers
    KAFKA_STORAGE_ERROR (retried)."""
    body = request.body
    schema = request.response_class
    entry_class = schema_class(schema, "EntryData")
    entity_class = schema_class(schema, "EntityData")
    valid: list[Alteration] = []
    # per entry: (code, message); None for a valid one until it is applied
    outcomes: list[tuple[ErrorCode, str] | None] = []
    may_alter = cluster_allowed(broker, request, Operation.ALTER_CONFIGS)
    for entry in body.entries:
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
        for entry, outcome in zip(body.entries, outcomes, strict=True)
    )
    return build(schema, throttle_time=NO_THROTTLE, entries=results)


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """``response`` saying it was throttled ``throttle_ms`` (or what it says already, if
    longer); unchanged if its version has no throttle_time (Produce v0)."""
    current = getattr(response, "throttle_time", None)
    wanted = datetime.timedelta(milliseconds=throttle_ms)
    if current is None or current >= wanted:
        return response
    return dataclasses.replace(response, throttle_time=wanted)


class Throttling:
    """The quotas applied around the handlers, for the server. Every client is the user
    ANONYMOUS (no authentication yet), as on Kafka's PLAINTEXT listener."""

    def __init__(self, manager: QuotaManager) -> None:
        self.manager = manager

    def before(self, request: Request) -> Request:
        """A Fetch asks for no more than its consumer quota allows in the measured window
        (Kafka's cap), so one response cannot be throttled for ever."""
        if request.api_key != FETCH or not self.manager.active:
            return request
        cap = self.manager.max_in_window(CONSUMER_BYTE_RATE, ANONYMOUS, request.client_id or "")
        if cap is None or request.body.max_bytes <= cap:
            return request
        body = dataclasses.replace(request.body, max_bytes=max(int(cap), 1))
        return dataclasses.replace(request, body=body)

    def after(self, request: Request, response: Any, response_size: int) -> tuple[Any, int]:
        """The response to send (with its throttle time) and the ms to mute the connection
        after sending it; ``response_size`` is the encoded response's, for Fetch."""
        if request.api_key == ALTER_CLIENT_QUOTAS and not request.body.validate_only:
            self.manager.changed()  # this broker's own change applies at once
        if not self.manager.active:
            return response, 0
        client_id = request.client_id or ""
        if request.api_key == PRODUCE:
            # Kafka counts the whole request, and throttles acks=0 producers too.
            ms = self.manager.record(PRODUCER_BYTE_RATE, ANONYMOUS, client_id, request.size)
        elif request.api_key == FETCH:
            ms = self.manager.record(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
            if ms:
                # As Kafka: the data is not sent (nor counted); the client fetches it again
                # after the throttle time.
                self.manager.unrecord(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
                response = dataclasses.replace(response, responses=())
        else:
            return response, 0
        if ms and response is not None:
            response = with_throttle(response, ms)
        return response, ms
