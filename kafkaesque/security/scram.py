"""SCRAM (RFC 5802, RFC 7677) and PLAIN as the server side computes them, without I/O.

A credential is what Kafka stores per user and mechanism: salt, iterations, StoredKey and
ServerKey; the password itself is never kept. ``ScramExchange`` is one server exchange:
client-first -> server-first, client-final -> server-final, each step refusing with
``AuthenticationFailed``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from kafkaesque.errors import AuthenticationFailed, UnacceptableCredential

DEFAULT_ITERATIONS = 4096  # Kafka's default, and its minimum
MAX_ITERATIONS = 16384  # Kafka refuses more (ScramMechanism.maxIterations)
SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class Mechanism:
    name: str  # the SASL name, e.g. SCRAM-SHA-512
    hash_name: str  # hashlib's name
    kafka_id: int  # Kafka's ScramMechanism type, as the credential APIs carry it

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = Mechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = Mechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_KAFKA_ID = {m.kafka_id: m for m in MECHANISMS.values()}
PLAIN = "PLAIN"
SASL_MECHANISMS = (PLAIN, SCRAM_SHA_256.name, SCRAM_SHA_512.name)


@dataclass(frozen=True, slots=True)
class Credential:
    """One user's credential for one SCRAM mechanism."""

    mechanism: Mechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def pack(self) -> str:
        """As stored: "iterations salt stored_key server_key" (base64)."""
        parts = (self.salt, self.stored_key, self.server_key)
        return " ".join([str(self.iterations), *(base64.b64encode(p).decode() for p in parts)])

    @classmethod
    def unpack(cls, mechanism: Mechanism, text: str) -> Credential:
        iterations, salt, stored, server = text.split(" ")
        b64 = base64.b64decode
        return cls(mechanism, b64(salt), int(iterations), b64(stored), b64(server))

    def verify_password(self, password: str) -> bool:
        """Whether ``password`` is this credential's (PLAIN checks it this way)."""
        salted = salted_password(self.mechanism, password.encode(), self.salt, self.iterations)
        client_key = self.mechanism.hmac(salted, b"Client Key")
        return hmac.compare_digest(self.mechanism.hash(client_key), self.stored_key)


def check_iterations(iterations: int) -> None:
    if iterations < DEFAULT_ITERATIONS:
        raise UnacceptableCredential(f"Too few iterations: {iterations} < {DEFAULT_ITERATIONS}")
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredential(f"Too many iterations: {iterations} > {MAX_ITERATIONS}")


def salted_password(mechanism: Mechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def from_salted(mechanism: Mechanism, salted: bytes, salt: bytes, iterations: int) -> Credential:
    """The credential of a salted password (AlterUserScramCredentials sends that)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    server_key = mechanism.hmac(salted, b"Server Key")
    return Credential(mechanism, salt, iterations, mechanism.hash(client_key), server_key)


def new_credential(
    mechanism: Mechanism,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> Credential:
    check_iterations(iterations)
    if not password:
        raise UnacceptableCredential("the password must not be empty")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return from_salted(
        mechanism, salted_password(mechanism, password.encode(), salt, iterations), salt, iterations
    )


def parse_plain(token: bytes) -> tuple[str, str]:
    """(user, password) of a PLAIN token "authzid NUL user NUL password" (RFC 4616); an
    authorization id other than the user is refused, as Kafka does."""
    try:
        authzid, user, password = token.decode().split("\0")
    except (UnicodeDecodeError, ValueError):
        raise AuthenticationFailed("invalid PLAIN token") from None
    if not user or not password:
        raise AuthenticationFailed("PLAIN: empty user name or password")
    if authzid and authzid != user:
        raise AuthenticationFailed("PLAIN: authorization id differs from the user name")
    return user, password


def _attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if not sep or len(name) != 1:
            raise AuthenticationFailed(f"invalid SCRAM message attribute {part[:40]!r}")
        pairs.append((name, value))
    return pairs


def _saslname(value: str) -> str:
    """RFC 5802's user name encoding: =2C is ",", =3D is "="; a lone "=" is invalid."""
    out = value.replace("=2C", ",").replace("=3D", "=")
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("invalid SCRAM user name encoding")
    return out


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," (no channel binding), re-sent base64 in c= of client-final
    bare: str  # client-first-message-bare, part of the AuthMessage
    user: str
    nonce: str


def parse_client_first(token: bytes) -> ClientFirst:
    try:
        text = token.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("SCRAM client-first message is not UTF-8") from None
    cbind, sep1, rest = text.partition(",")
    authzid, sep2, bare = rest.partition(",")
    if not (sep1 and sep2) or cbind not in ("n", "y"):
        raise AuthenticationFailed("invalid SCRAM client-first message (channel binding)")
    attributes = _attributes(bare)
    if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
        raise AuthenticationFailed("invalid SCRAM client-first message")
    user, nonce = _saslname(attributes[0][1]), attributes[1][1]
    if authzid and _saslname(authzid.removeprefix("a=")) != user:
        raise AuthenticationFailed("SCRAM: authorization id differs from the user name")
    if not user or not nonce:
        raise AuthenticationFailed("SCRAM: empty user name or nonce")
    return ClientFirst(f"{cbind},{authzid},", bare, user, nonce)


class ScramExchange:
    """The server side of one SCRAM authentication, after the client-first message."""

    def __init__(
        self, first: ClientFirst, credential: Credential, server_nonce: str | None = None
    ) -> None:
        self.first = first
        self.credential = credential
        self.nonce = first.nonce + (server_nonce or secrets.token_urlsafe(24))
        self.server_first = (
            f"r={self.nonce},s={base64.b64encode(credential.salt).decode()},"
            f"i={credential.iterations}"
        )

    def server_first_message(self) -> bytes:
        return self.server_first.encode()

    def final(self, token: bytes) -> bytes:
        """Check the client-final message (channel binding, nonce, proof); the
        server-final message proving the server knows the credential."""
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM client-final message is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",")
        attributes = _attributes(text)
        if not sep or len(attributes) < 3 or [a[0] for a in attributes[:2]] != ["c", "r"]:
            raise AuthenticationFailed("invalid SCRAM client-final message")
        if attributes[-1][0] != "p" or not proof_part.startswith("p="):
            raise AuthenticationFailed("SCRAM client-final message without a proof")
        channel = base64.b64encode(self.first.gs2_header.encode()).decode()
        if attributes[0][1] != channel:
            raise AuthenticationFailed("SCRAM: channel binding does not match")
        # Kafka's check (ScramSaslServer): the nonce ends with the one sent. librdkafka
        # 2.0 sends the client nonce twice ("r=" + client nonce + combined nonce).
        if not attributes[1][1].endswith(self.nonce):
            raise AuthenticationFailed("SCRAM: nonce does not match")
        try:
            proof = base64.b64decode(attributes[-1][1], validate=True)
        except ValueError:
            raise AuthenticationFailed("SCRAM: invalid proof encoding") from None
        mechanism, credential = self.credential.mechanism, self.credential
        auth_message = f"{self.first.bare},{self.server_first},{without_proof}".encode()
        signature = mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("SCRAM: invalid proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(mechanism.hash(client_key), credential.stored_key):
            raise AuthenticationFailed("invalid credentials")
        server_signature = mechanism.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
