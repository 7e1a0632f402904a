"""The client quotas in Redis (``Keys.quotas``, ``Keys.quotas_version``): one hash field
per (entity, key), as JSON (kafkaesque/security/quotas.py has the quotas' rules)."""

from __future__ import annotations

import json
from collections.abc import Iterable

import redis.asyncio
from redis.typing import EncodableT, FieldT

from kafkaesque.hot.keys import Keys
from kafkaesque.security.quotas import Alteration, Entity, Quotas


def _field(entity: Entity, key: str) -> str:
    # JSON keeps null (the default entity) apart from any name, and escapes every
    # character a name may hold.
    return json.dumps([key, [list(pair) for pair in entity]])


def _parse_field(field: bytes | str) -> tuple[Entity, str]:
    key, pairs = json.loads(field)
    return tuple((t, n) for t, n in pairs), key


class QuotaStore:
    """The client quotas in Redis: ``Keys.quotas`` maps one field per (entity, key) to the
    value, so a change is a few HSET/HDEL without reading first; ``Keys.quotas_version``
    grows with every change, so brokers re-read the hash only when it changed."""

    def __init__(self, redis: redis.asyncio.Redis, namespace: str = "ks") -> None:
        self.redis = redis
        self.keys = Keys.of(redis, namespace)

    async def version(self) -> int:
        value = await self.redis.get(self.keys.quotas_version)
        return int(value or 0)

    async def read(self) -> Quotas:
        quotas: Quotas = {}
        for field, value in (await self.redis.hgetall(self.keys.quotas)).items():
            entity, key = _parse_field(field)
            quotas.setdefault(entity, {})[key] = float(value)
        return quotas

    async def alter(self, alterations: Iterable[Alteration]) -> None:
        """Apply checked alterations in one transaction."""
        sets: dict[FieldT, EncodableT] = {}
        removes: list[str] = []
        for alteration in alterations:
            for key, value in alteration.changes.items():
                field = _field(alteration.entity, key)
                if value is None:
                    removes.append(field)
                else:
                    sets[field] = repr(float(value))
        if not sets and not removes:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            if sets:
                pipe.hset(self.keys.quotas, mapping=sets)
            if removes:
                pipe.hdel(self.keys.quotas, *removes)
            pipe.incr(self.keys.quotas_version)
            await pipe.execute()
