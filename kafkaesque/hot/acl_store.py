"""The ACL bindings in Redis (``Keys.acls``, ``Keys.acls_version``): one hash field per
binding, its fields as JSON (kafkaesque/security/acls.py has the bindings themselves)."""

from __future__ import annotations

import json
from collections.abc import Iterable

import redis.asyncio
from redis.typing import EncodableT, FieldT

from kafkaesque.hot.keys import Keys
from kafkaesque.security import acls


def _field(binding: acls.AclBinding) -> str:
    return json.dumps(
        [
            binding.resource_type.name,
            binding.name,
            binding.pattern_type.name,
            binding.principal,
            binding.host,
            binding.operation.name,
            binding.permission.name,
        ]
    )


def _parse_field(field: bytes | str) -> acls.AclBinding:
    rtype, name, pattern, principal, host, op, perm = json.loads(field)
    return acls.AclBinding(
        acls.ResourceType[rtype],
        name,
        acls.PatternType[pattern],
        principal,
        host,
        acls.Operation[op],
        acls.Permission[perm],
    )


class AclStore:
    """The bindings in Redis: one hash field per binding, so adding or removing one is an
    HSET/HDEL; ``Keys.acls_version`` grows with every change."""

    def __init__(self, redis: redis.asyncio.Redis, namespace: str = "ks") -> None:
        self.redis = redis
        self.keys = Keys.of(redis, namespace)

    async def version(self) -> int:
        return int(await self.redis.get(self.keys.acls_version) or 0)

    async def read(self) -> list[acls.AclBinding]:
        """Every binding, sorted."""
        return sorted(_parse_field(f) for f in await self.redis.hkeys(self.keys.acls))

    async def describe(self, wanted: acls.AclFilter) -> list[acls.AclBinding]:
        return [b for b in await self.read() if wanted.matches(b)]

    async def add(self, bindings: Iterable[acls.AclBinding]) -> None:
        """Add checked bindings in one transaction (adding one twice changes nothing)."""
        fields: dict[FieldT, EncodableT] = {_field(b): "1" for b in bindings}
        if not fields:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.acls, mapping=fields)
            pipe.incr(self.keys.acls_version)
            await pipe.execute()

    async def remove(self, filters: Iterable[acls.AclFilter]) -> list[list[acls.AclBinding]]:
        """Remove the bindings each filter matches; per filter, those it removed."""
        existing = await self.read()
        matched = [[b for b in existing if f.matches(b)] for f in filters]
        gone = {_field(b) for found in matched for b in found}
        if gone:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self.keys.acls, *gone)
                pipe.incr(self.keys.acls_version)
                await pipe.execute()
        return matched
