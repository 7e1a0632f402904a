"""The principal and listener each connection carries into the handlers (what the
authorizer reads): ANONYMOUS on PLAINTEXT, the certificate subject under mutual TLS,
User:NAME after SASL."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import redis.asyncio
from kio.schema.errors import ErrorCode

from kafkaesque.hot.credentials import CredentialStore
from kafkaesque.hot.log import Log
from kafkaesque.security.scram import SCRAM_SHA_256, new_credential
from tests.kafka_client import AsyncConnection, request
from tests.sasl_client import ScramClient
from tests.wire.certificates import CLIENT_PRINCIPAL, make_certificates
from wire import handlers
from wire.broker import Broker, BrokerConfig
from wire.net.security import Listener, tls_context
from wire.net.server import Server


def test_principals(redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    certs = make_certificates(tmp_path / "certs")
    seen: list[tuple[str, str]] = []
    api_versions = handlers.HANDLERS[18]

    async def recording(broker, req):  # ApiVersions, noting who asked
        seen.append((req.connection.listener, req.connection.principal))
        return await api_versions.handler(broker, req)

    monkeypatch.setitem(handlers.HANDLERS, 18, handlers.Api(0, 4, recording))

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        await CredentialStore(client).put("bob", new_credential(SCRAM_SHA_256, "bob-pw"))
        listeners = [Listener(name, "127.0.0.1", 0) for name in ("PLAINTEXT", "SSL", "SASL_SSL")]
        tls = tls_context(certs.server_cert, certs.server_key, certs.ca)
        server = Server(Broker(Log(client), BrokerConfig()), "", 0, listeners=listeners, tls=tls)
        await server.start()
        context = ssl.create_default_context(cafile=certs.ca)
        context.load_cert_chain(certs.client_cert, certs.client_key)
        try:
            plain = AsyncConnection(
                *await asyncio.open_connection("127.0.0.1", server.ports["PLAINTEXT"])
            )
            await plain.request(
                request(18, 3, client_software_name="t", client_software_version="1")
            )
            tls_conn = AsyncConnection(
                *await asyncio.open_connection(
                    "127.0.0.1", server.ports["SSL"], ssl=context, server_hostname="127.0.0.1"
                )
            )
            await tls_conn.request(
                request(18, 3, client_software_name="t", client_software_version="1")
            )
            sasl = AsyncConnection(
                *await asyncio.open_connection(
                    "127.0.0.1", server.ports["SASL_SSL"], ssl=context, server_hostname="127.0.0.1"
                )
            )
            await sasl.request(
                request(18, 3, client_software_name="t", client_software_version="1")
            )
            assert (await sasl.request(request(17, 1, mechanism="SCRAM-SHA-256"))).error_code == 0
            scram = ScramClient("SCRAM-SHA-256", "bob", "bob-pw")
            first = await sasl.request(request(36, 2, auth_bytes=scram.first()))
            last = await sasl.request(request(36, 2, auth_bytes=scram.final(first.auth_bytes)))
            assert last.error_code == ErrorCode.none and scram.verify(last.auth_bytes)
            await sasl.request(
                request(18, 3, client_software_name="t", client_software_version="1")
            )
            for conn in (plain, tls_conn, sasl):
                await conn.close()
        finally:
            await server.shutdown()
            await client.aclose()

    asyncio.run(scenario())
    assert seen == [
        ("PLAINTEXT", "User:ANONYMOUS"),
        ("SSL", CLIENT_PRINCIPAL),
        ("SASL_SSL", "User:ANONYMOUS"),  # before authentication
        ("SASL_SSL", "User:bob"),  # SASL's principal, not the certificate's
    ]
