"""ACLs as Kafka has them: bindings, filters, their store in Redis, and the authorizer.

A binding allows or denies one principal, from one host, one operation on the resources
its pattern matches: a LITERAL name (``*`` being every resource of the type) or a PREFIXED
one. The authorizer follows Kafka's StandardAuthorizer: super users pass everything; a
matching DENY wins over any ALLOW; DESCRIBE is implied by READ, WRITE, DELETE and ALTER,
DESCRIBE_CONFIGS by ALTER_CONFIGS, everything by ALL; a resource no binding names is
allowed only with ``allow.everyone.if.no.acl.found``.

Bindings live in Redis (``Keys.acls``, ``Keys.acls_version`` bumped on every change), so
every broker on the Redis sees the same ones; each broker keeps them in memory and re-reads
them when the version moved (``Authorizer.run`` polls it), so a check never asks Redis.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio

from kafkaesque.errors import InvalidRequest
from kafkaesque.keys import Keys
from kafkaesque.outage import REDIS, REDIS_CONNECTION_ERRORS

log = logging.getLogger(__name__)

WILDCARD = "*"  # a literal resource name or a host matching every one
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
REFRESH_SECONDS = 0.5  # how stale a broker's copy of the bindings may be
_CACHE_LIMIT = 65536  # remembered decisions; forgotten all at once beyond


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes (DELEGATION_TOKEN and USER: not used here)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters: any pattern type, the name as given
    MATCH = 2  # filters: every binding that would match the name
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# The resource types bindings may name here (Kafka's DELEGATION_TOKEN and USER guard
# features kafkaesque does not have).
BINDABLE_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
# Kafka's implied operations: an ALLOW of any of these allows the key.
_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not do what on which resources."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Does the pattern cover this resource (the authorizer's matching)?"""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)

    def describe(self) -> str:
        """Kafka's kafka-acls.sh wording, for people."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name}) on {self.resource_type.name}:"
            f"{self.pattern_type.name}:{self.name}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter: None and the ANY values match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        """Kafka's AclBindingFilter.matches."""
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.name is not None:
            if pattern in (PatternType.ANY, binding.pattern_type):
                if self.name != binding.name:
                    return False
            elif binding.pattern_type == PatternType.LITERAL:  # MATCH
                if binding.name not in (self.name, WILDCARD):
                    return False
            elif not self.name.startswith(binding.name):  # MATCH on a PREFIXED binding
                return False
        return (
            self.principal in (None, binding.principal)
            and self.host in (None, binding.host)
            and self.operation in (Operation.ANY, binding.operation)
            and self.permission in (Permission.ANY, binding.permission)
        )


def _member(enum_class: type[enum.IntEnum], code: int) -> enum.IntEnum:
    try:
        return enum_class(code)
    except ValueError:
        return enum_class(0)  # UNKNOWN, as Kafka reads a code it does not know


def parse_principal(principal: str) -> str:
    """``TYPE:NAME``, as Kafka's SecurityUtils.parseKafkaPrincipal wants it."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidRequest(f"Invalid principal {principal!r}: expected TYPE:NAME (User:alice)")
    return principal


def check_binding(
    resource_type: int,
    name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding to create, checked as Kafka's controller does; InvalidRequest if bad."""
    rtype = _member(ResourceType, resource_type)
    pattern = _member(PatternType, pattern_type)
    op = _member(Operation, operation)
    perm = _member(Permission, permission)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequest(f"Invalid patternType {pattern.name}")
    if op in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidRequest(f"Invalid operation {op.name}")
    if perm in (Permission.UNKNOWN, Permission.ANY):
        raise InvalidRequest(f"Invalid permissionType {perm.name}")
    if rtype not in BINDABLE_TYPES:
        raise InvalidRequest(f"Invalid resourceType {rtype.name}")
    if not name:
        raise InvalidRequest("Resource name should not be empty")
    if rtype == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidRequest(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not host:
        raise InvalidRequest("Invalid host: empty (use * for any host)")
    return AclBinding(rtype, name, pattern, parse_principal(principal), host, op, perm)  # type: ignore[arg-type]


def check_filter(
    resource_type: int,
    name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclFilter:
    """A filter, checked as Kafka's Describe/DeleteAclsRequest do: UNKNOWN elements are an
    invalid request."""
    rtype = _member(ResourceType, resource_type)
    pattern = _member(PatternType, pattern_type)
    op = _member(Operation, operation)
    perm = _member(Permission, permission)
    unknown = [e.__class__.__name__ for e in (rtype, pattern, op, perm) if e.name == "UNKNOWN"]
    if unknown:
        raise InvalidRequest(f"The filter contains UNKNOWN elements: {', '.join(unknown)}")
    if principal is not None:
        parse_principal(principal)
    return AclFilter(rtype, name, pattern, principal, host, op, perm)  # type: ignore[arg-type]


# -- the store -----------------------------------------------------------------------------


def _field(binding: AclBinding) -> str:
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


def _parse_field(field: bytes | str) -> AclBinding:
    rtype, name, pattern, principal, host, op, perm = json.loads(field)
    return AclBinding(
        ResourceType[rtype],
        name,
        PatternType[pattern],
        principal,
        host,
        Operation[op],
        Permission[perm],
    )


class AclStore:
    """The bindings in Redis: one hash field per binding, so adding or removing one is an
    HSET/HDEL; ``Keys.acls_version`` grows with every change."""

    def __init__(self, redis: redis.asyncio.Redis, namespace: str = "ks") -> None:
        self.redis = redis
        self.keys = Keys.of(redis, namespace)

    async def version(self) -> int:
        return int(await self.redis.get(self.keys.acls_version) or 0)

    async def read(self) -> list[AclBinding]:
        """Every binding, sorted."""
        return sorted(_parse_field(f) for f in await self.redis.hkeys(self.keys.acls))

    async def describe(self, wanted: AclFilter) -> list[AclBinding]:
        return [b for b in await self.read() if wanted.matches(b)]

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        """Add checked bindings in one transaction (adding one twice changes nothing)."""
        fields = {_field(b): "1" for b in bindings}
        if not fields:
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.acls, mapping=fields)
            pipe.incr(self.keys.acls_version)
            await pipe.execute()

    async def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
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


# -- the authorizer ------------------------------------------------------------------------


class AclTable:
    """The bindings, indexed by resource type for the authorizer's look-ups."""

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self.literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self.prefixed: dict[ResourceType, list[AclBinding]] = {}
        self.count = 0
        for b in bindings:
            self.count += 1
            if b.pattern_type == PatternType.LITERAL:
                self.literal.setdefault((b.resource_type, b.name), []).append(b)
            else:
                self.prefixed.setdefault(b.resource_type, []).append(b)

    def on(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern covers the resource, whoever it names."""
        found = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self.literal.get((resource_type, WILDCARD), ())
        found += (b for b in self.prefixed.get(resource_type, ()) if name.startswith(b.name))
        return found

    def of_type(self, resource_type: ResourceType) -> list[AclBinding]:
        found = [b for (t, _), bs in self.literal.items() if t == resource_type for b in bs]
        return found + self.prefixed.get(resource_type, [])


def _applies(binding: AclBinding, principal: str, host: str, operation: Operation) -> bool:
    """Does the binding name this principal and host, and (as ALLOW) the operation?"""
    if binding.principal not in (principal, WILDCARD_PRINCIPAL):
        return False
    if binding.host not in (host, WILDCARD):
        return False
    if binding.operation == Operation.ALL:
        return True
    if binding.permission == Permission.DENY:
        return binding.operation == operation
    return binding.operation in _IMPLIED.get(operation, (operation,))


class Authorizer:
    """Kafka's StandardAuthorizer over this broker's copy of the bindings."""

    def __init__(
        self,
        store: AclStore,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.refresh_seconds = refresh_seconds
        self.table = AclTable(())
        self._version: int | None = None
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    async def refresh(self) -> None:
        """Re-read the bindings if their version moved since the last read."""
        version = await self.store.version()
        if version == self._version:
            return
        self.load(await self.store.read())
        self._version = version

    def load(self, bindings: Iterable[AclBinding]) -> None:
        self.table = AclTable(bindings)
        self._decisions = {}

    async def run(self) -> None:
        """Refresh every ``refresh_seconds`` until cancelled; a Redis outage keeps the last
        bindings read."""
        while True:
            try:
                await self.refresh()
            except REDIS_CONNECTION_ERRORS as exc:
                REDIS.failed(exc)
            except Exception:
                log.exception("reading the ACLs failed")
            await asyncio.sleep(self.refresh_seconds)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """May ``principal`` from ``host`` do ``operation`` on the resource?"""
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= _CACHE_LIMIT:
                self._decisions = {}
            self._decisions[key] = decision
        return decision

    def _decide(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        bindings = self.table.on(resource_type, name)
        if not bindings:
            return self.allow_if_no_acl
        applying = [b for b in bindings if _applies(b, principal, host, operation)]
        if any(b.permission == Permission.DENY for b in applying):
            return False
        return any(b.permission == Permission.ALLOW for b in applying)

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Kafka's authorizeByResourceType: is some resource of the type allowed (an ALLOW
        binding for the operation that no DENY covers)? Kafka 2.8+ lets an idempotent
        producer in with WRITE on any topic."""
        if principal in self.super_users:
            return True
        bindings = [
            b
            for b in self.table.of_type(resource_type)
            if b.principal in (principal, WILDCARD_PRINCIPAL)
            and b.host in (host, WILDCARD)
            and b.operation in (operation, Operation.ALL)
        ]
        denies = [b for b in bindings if b.permission == Permission.DENY]
        if any(b.pattern_type == PatternType.LITERAL and b.name == WILDCARD for b in denies):
            return False
        deny_literal = {b.name for b in denies if b.pattern_type == PatternType.LITERAL}
        deny_prefixes = [b.name for b in denies if b.pattern_type == PatternType.PREFIXED]
        for b in bindings:
            if b.permission != Permission.ALLOW:
                continue
            if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                return True
            if b.pattern_type == PatternType.LITERAL and b.name in deny_literal:
                continue
            if not any(b.name.startswith(p) for p in deny_prefixes):
                return True
        return False
