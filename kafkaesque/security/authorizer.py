"""The authorizer: Kafka's StandardAuthorizer over a broker's copy of the ACL bindings
(kafkaesque.security.acls). Super users pass everything; a matching DENY wins over any ALLOW;
DESCRIBE is implied by READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS,
everything by ALL; a resource no binding names is allowed only with
``allow.everyone.if.no.acl.found``. The copy is re-read when the bindings' version moves
(``Authorizer.run`` polls it), so a check never asks Redis."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from kafkaesque.hot.acl_store import AclStore
from kafkaesque.hot.outage import background_step
from kafkaesque.security.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

log = logging.getLogger(__name__)

REFRESH_SECONDS = 0.5  # how stale a broker's copy of the bindings may be
_CACHE_LIMIT = 65536  # remembered decisions; forgotten all at once beyond
# A request to authorize: (principal, host, operation, resource type, resource name).
_Request = tuple[str, str, Operation, ResourceType, str]
# Kafka's implied operations: an ALLOW of any of these allows the key.
_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


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
        self._decisions: dict[_Request, bool] = {}

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
            with background_step("reading the ACLs", log):
                await self.refresh()
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
            decision = self._decide(key)
            if len(self._decisions) >= _CACHE_LIMIT:
                self._decisions = {}
            self._decisions[key] = decision
        return decision

    def _decide(self, request: _Request) -> bool:
        principal, host, operation, resource_type, name = request
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
