"""SCRAM users in Redis: one hash of every user's credentials per mechanism (Kafka keeps
them in its metadata log). Only salts, iteration counts and derived keys are stored."""

from __future__ import annotations

from typing import Any

from kafkaesque.errors import (
    CredentialNotFound,
    DuplicateResource,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)
from kafkaesque.hot.keys import Keys
from kafkaesque.security.scram import (
    BY_KAFKA_ID,
    MECHANISMS,
    Credential,
    Mechanism,
    check_iterations,
)


def mechanism_named(name: str) -> Mechanism:
    try:
        return MECHANISMS[name.upper()]
    except KeyError:
        raise UnsupportedSaslMechanism(f"unknown SCRAM mechanism {name!r}") from None


def mechanism_of(kafka_id: int) -> Mechanism:
    try:
        return BY_KAFKA_ID[kafka_id]
    except KeyError:
        raise UnsupportedSaslMechanism(f"Unknown SCRAM mechanism type {kafka_id}") from None


def check_user(user: str) -> None:
    if not user:
        raise UnacceptableCredential("Username must not be empty")


def check_distinct(users: list[str]) -> set[str]:
    """The users named more than once in one request (Kafka refuses each of them)."""
    seen: set[str] = set()
    twice: set[str] = set()
    for user in users:
        (twice if user in seen else seen).add(user)
    return twice


def duplicate(user: str) -> DuplicateResource:
    return DuplicateResource(f"Cannot describe or alter user {user!r} twice in one request")


class CredentialStore:
    """Reads and writes the credentials; every broker and command on the Redis shares them."""

    def __init__(self, redis: Any, namespace: str = "ks") -> None:
        self.redis = redis
        self.key = Keys.of(redis, namespace).scram_credentials

    async def get(self, user: str, mechanism: Mechanism) -> Credential | None:
        text = await self.redis.hget(self.key, f"{mechanism.name}:{user}")
        if text is None:
            return None
        return Credential.unpack(mechanism, text.decode() if isinstance(text, bytes) else text)

    async def users(self) -> dict[str, list[Credential]]:
        """Every user with its credentials, by user name."""
        found: dict[str, list[Credential]] = {}
        for field, text in (await self.redis.hgetall(self.key)).items():
            field = field.decode() if isinstance(field, bytes) else field
            text = text.decode() if isinstance(text, bytes) else text
            name, _, user = field.partition(":")
            mechanism = MECHANISMS.get(name)
            if mechanism is not None:
                found.setdefault(user, []).append(Credential.unpack(mechanism, text))
        for credentials in found.values():
            credentials.sort(key=lambda c: c.mechanism.kafka_id)
        return dict(sorted(found.items()))

    async def describe(self, user: str) -> list[Credential]:
        """The user's credentials; CredentialNotFound for a user without any."""
        check_user(user)
        fields = [f"{m.name}:{user}" for m in MECHANISMS.values()]
        values = await self.redis.hmget(self.key, fields)
        found = [
            Credential.unpack(m, v.decode() if isinstance(v, bytes) else v)
            for m, v in zip(MECHANISMS.values(), values, strict=True)
            if v is not None
        ]
        if not found:
            raise CredentialNotFound(
                f"Attempt to describe a user credential that does not exist: {user}"
            )
        return found

    async def put(self, user: str, credential: Credential) -> None:
        check_user(user)
        check_iterations(credential.iterations)
        await self.redis.hset(self.key, f"{credential.mechanism.name}:{user}", credential.pack())

    async def delete(self, user: str, mechanism: Mechanism) -> None:
        """Delete one credential; CredentialNotFound when it does not exist."""
        check_user(user)
        if not await self.redis.hdel(self.key, f"{mechanism.name}:{user}"):
            raise CredentialNotFound(
                f"Attempt to delete a user credential that does not exist: {user} "
                f"({mechanism.name})"
            )
