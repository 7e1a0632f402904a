"""The client side of SASL for raw-socket tests: SCRAM (RFC 5802) computed independently
of kafkaesque/security/scram.py, and SaslHandshake + SaslAuthenticate over a tests.kafka_client
Connection."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramClient:
    """One client exchange: ``first()``, then ``final(server_first)``, then ``verify``."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None):
        self.hash = HASHES[mechanism]
        self.user, self.password = user, password
        self.nonce = nonce or secrets.token_urlsafe(18)
        self.bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash).digest()

    def final(self, server_first: bytes, nonce: str | None = None, tamper: bool = False) -> bytes:
        """client-final; ``nonce`` replaces the combined nonce, ``tamper`` spoils the proof."""
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce or attrs['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, self._hmac(stored_key, auth), strict=True))
        if tamper:
            proof = bytes([proof[0] ^ 1]) + proof[1:]
        server_key = self._hmac(salted, b"Server Key")
        self.server_signature = self._hmac(server_key, auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self.server_signature)


def handshake(conn: Connection, mechanism: str, version: int = 1) -> Any:
    return conn.request(request(17, version, mechanism=mechanism))


def authenticate(conn: Connection, token: bytes, version: int = 2) -> Any:
    return conn.request(request(36, version, auth_bytes=token))


def login(conn: Connection, mechanism: str, user: str, password: str) -> Any:
    """Authenticate ``conn`` (v1 handshake + SaslAuthenticate v2); the last answer."""
    assert handshake(conn, mechanism).error_code == ErrorCode.none
    if mechanism == "PLAIN":
        return authenticate(conn, f"\0{user}\0{password}".encode())
    scram = ScramClient(mechanism, user, password)
    first = authenticate(conn, scram.first())
    if first.error_code != ErrorCode.none:
        return first
    last = authenticate(conn, scram.final(first.auth_bytes))
    if last.error_code == ErrorCode.none:
        assert scram.verify(last.auth_bytes), "the server's signature does not verify"
    return last
