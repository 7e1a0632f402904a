"""SaslHandshake and SaslAuthenticate: the kio side of wire/net/sasl.py's state machine."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kafkaesque.errors import IllegalSaslState, KafkaesqueError
from wire.broker import Broker
from wire.errors import error_code
from wire.protocol.codec import Request, build

if TYPE_CHECKING:
    from wire.protocol.kio_types import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )


async def sasl_handshake(
    broker: Broker, request: Request[SaslHandshakeRequest]
) -> SaslHandshakeResponse:
    """Choose the mechanism; v0 means the tokens follow as bare frames (no
    SaslAuthenticate). On a listener without SASL: ILLEGAL_SASL_STATE, as Kafka says."""
    sasl = request.connection.sasl
    enabled = broker.config.sasl_mechanisms if sasl is not None else ()
    try:
        if sasl is None:
            raise IllegalSaslState("SASL is not enabled on this listener")
        sasl.handshake(request.body.mechanism, raw_tokens=request.api_version == 0)
        code = ErrorCode.none
    except KafkaesqueError as exc:
        code = error_code(exc)
    return build(request.response_class, error_code=code, mechanisms=tuple(enabled))


async def sasl_authenticate(
    broker: Broker, request: Request[SaslAuthenticateRequest]
) -> SaslAuthenticateResponse:
    """One token of the exchange; the answer, and (v1+) the session lifetime after which
    the client must re-authenticate (KIP-368)."""
    sasl = request.connection.sasl
    answer, lifetime, message = b"", 0, None
    try:
        if sasl is None:
            raise IllegalSaslState("SaslAuthenticate on a listener without SASL")
        answer, lifetime = await sasl.authenticate(request.body.auth_bytes)
        code = ErrorCode.none
        if sasl.authenticated:
            request.connection.principal = f"User:{sasl.user}"
    except KafkaesqueError as exc:
        code, message = error_code(exc), str(exc)
    return build(
        request.response_class,
        error_code=code,
        error_message=message,
        auth_bytes=answer,
        session_lifetime=datetime.timedelta(milliseconds=lifetime),
    )
