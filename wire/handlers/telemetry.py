"""GetTelemetrySubscriptions (KIP-714): client metrics are not collected here.

Answered as a Kafka broker's ClientMetricsManager answers a client no client-metrics
subscription matches: no requested metrics, so the client pushes nothing and only asks
again after the push interval. A client sending the zero uuid is given an instance id.
"""

from __future__ import annotations

import datetime
import uuid
import zlib
from typing import Any

from wire.broker import Broker
from wire.protocol.codec import Request, ok_response

NO_INSTANCE = uuid.UUID(int=0)
# Kafka's defaults: the subscription interval (ClientMetricsConfigs) and telemetry.max.bytes.
PUSH_INTERVAL = datetime.timedelta(minutes=5)
TELEMETRY_MAX_BYTES = 1024 * 1024
# The codecs Kafka accepts pushes in, by preference: zstd, lz4, gzip, snappy.
ACCEPTED_COMPRESSION = (4, 3, 1, 2)


def subscription_id(instance: uuid.UUID) -> int:
    """A stable id for "no metrics" for this client (Kafka hashes the subscription
    with the client instance id too), as a signed int32."""
    crc = zlib.crc32(b"[]" + instance.bytes)
    return crc - (1 << 32) if crc >= 1 << 31 else crc


async def get_telemetry_subscriptions(broker: Broker, request: Request) -> Any:
    instance = request.body.client_instance_id
    if instance is None or instance == NO_INSTANCE:
        instance = uuid.uuid4()
    return ok_response(
        request.response_class,
        client_instance_id=instance,
        subscription_id=subscription_id(instance),
        accepted_compression_types=ACCEPTED_COMPRESSION,
        push_interval=PUSH_INTERVAL,
        telemetry_max_bytes=TELEMETRY_MAX_BYTES,
        delta_temporality=True,
        requested_metrics=(),
    )
