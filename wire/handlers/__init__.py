"""The API table: every Kafka API this broker answers, its versions and its handler.

The version ranges are chosen so the clients we test (librdkafka, kafka-python, aiokafka,
kafkajs, the Java client) each land on a version we implement; see README.txt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kafkaesque.errors import KafkaesqueError, StorageUnavailable
from wire.broker import Broker
from wire.errors import error_code
from wire.handlers import (
    admin,
    configs,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    records,
)
from wire.protocol import NO_THROTTLE, Request, build, error_response, schema_class

Handler = Callable[[Broker, Request], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Api:
    min_version: int
    max_version: int
    handler: Handler
    # A group coordinator's API: its clients look for the coordinator again on
    # COORDINATOR_NOT_AVAILABLE, the code Kafka gives while a coordinator cannot serve.
    coordinator: bool = False


async def handle(broker: Broker, request: Request) -> Any:
    """The handler's response; a refusal that failed the request as a whole (Redis away
    for a group's state, say) becomes the top-level error code of its response, if the
    version has one; otherwise it is raised and the connection closes."""
    api = HANDLERS[request.api_key]
    try:
        return await api.handler(broker, request)
    except KafkaesqueError as exc:
        unavailable = isinstance(exc, StorageUnavailable)
        if api.coordinator and unavailable:
            code = ErrorCode.coordinator_not_available
        else:
            code = error_code(exc)
        response = error_response(request.response_class, code)
        if response is None:
            raise
        return response


async def api_versions(broker: Broker, request: Request) -> Any:
    schema = request.response_class
    version = schema_class(schema, "ApiVersion")
    keys = tuple(
        build(version, api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(supported().items())
    )
    return build(schema, error_code=ErrorCode.none, api_keys=keys, throttle_time=NO_THROTTLE)


# api key (names: kio.schema.index.api_key_map) -> versions and handler.
HANDLERS: dict[int, Api] = {
    # Produce from v0 because librdkafka before 2.11 only compresses when Produce v0 is
    # offered; kio (like Kafka 4) parses v3 and later, and no current client sends older.
    0: Api(0, 7, produce.produce),
    1: Api(4, 11, fetch.fetch),
    # ListOffsets v4+ carries leader epochs (KIP-320), v6 is flexible; v7+ adds lookups
    # not implemented here.
    2: Api(1, 6, offsets.list_offsets),
    # v9+ is what makes librdkafka trust the leader epochs (rd_kafka_has_reliable_leader_
    # epochs), so it sends them in Fetch and validates its position after an epoch change.
    3: Api(0, 12, metadata.metadata),
    8: Api(2, 3, groups.offset_commit, coordinator=True),
    9: Api(1, 3, groups.offset_fetch, coordinator=True),
    10: Api(0, 1, groups.find_coordinator),
    11: Api(0, 5, groups.join_group, coordinator=True),
    12: Api(0, 3, groups.heartbeat, coordinator=True),
    13: Api(0, 3, groups.leave_group, coordinator=True),
    14: Api(0, 3, groups.sync_group, coordinator=True),
    15: Api(0, 4, groups.describe_groups, coordinator=True),
    16: Api(0, 2, groups.list_groups, coordinator=True),
    18: Api(0, 4, api_versions),
    19: Api(2, 7, admin.create_topics),
    20: Api(1, 1, admin.delete_topics),
    21: Api(0, 2, records.delete_records),  # v2 is flexible
    22: Api(0, 0, offsets.init_producer_id),
    23: Api(2, 3, offsets.offset_for_leader_epoch),
    32: Api(1, 4, configs.describe_configs),
    33: Api(0, 2, configs.alter_configs),
    37: Api(0, 1, admin.create_partitions),
    42: Api(0, 1, groups.delete_groups, coordinator=True),
    44: Api(0, 1, configs.incremental_alter_configs),
    60: Api(0, 1, metadata.describe_cluster),
    # KIP-848, the consumer group protocol: v1 has client-generated member ids (KIP-1082).
    68: Api(0, 1, consumer_groups.consumer_group_heartbeat, coordinator=True),
    69: Api(0, 1, consumer_groups.consumer_group_describe, coordinator=True),
}


def supported() -> dict[int, tuple[int, int]]:
    """api key -> (min version, max version), as ApiVersions answers."""
    return {key: (api.min_version, api.max_version) for key, api in HANDLERS.items()}
