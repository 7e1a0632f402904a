"""Client quotas as Kafka has them: entities, keys, validation, filters (their store in
Redis: kafkaesque/hot/quota_store.py).

A quota entity is a set of (entity type, name) pairs: ``user``, ``client-id`` (each alone or
together) or ``ip`` (alone); a name of None is the type's default entity. Each entity holds
quota values by key. The checks and their messages follow Kafka's controller
(ClientQuotaControlManager) and its DescribeClientQuotas matching (ClientQuotasImage).

Quotas live in Redis (``Keys.quotas``: one hash for all of them, and ``Keys.quotas_version``
bumped on every change), so every broker on the Redis sees the same quotas; each broker
enforces them on its own connections, as each Kafka broker does (security/quota_rates.py).
"""

from __future__ import annotations

import enum
import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
# The principal of every connection: without authentication Kafka's PLAINTEXT listener
# names every client so, and user quotas apply to it (or to the default user).
ANONYMOUS = "ANONYMOUS"

# An entity: its (type, name) pairs sorted by type; name None is the default entity.
Entity = tuple[tuple[str, str | None], ...]
Quotas = dict[Entity, dict[str, float]]


class Kind(enum.Enum):
    LONG = "long"
    INT = "int"
    DOUBLE = "double"


PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
# Kafka's QuotaConfig: the keys of user and client-id entities, and of ip entities.
CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: Kind.LONG,
    CONSUMER_BYTE_RATE: Kind.LONG,
    REQUEST_PERCENTAGE: Kind.DOUBLE,
    CONTROLLER_MUTATION_RATE: Kind.DOUBLE,
}
IP_KEYS = {CONNECTION_CREATION_RATE: Kind.INT}
_LIMITS = {Kind.LONG: (2**63 - 1, "a LONG"), Kind.INT: (2**31 - 1, "an INT")}


class InvalidQuota(ValueError):
    """A bad entity, key, value or filter: Kafka's INVALID_REQUEST with this message."""


class UnsupportedEntityType(InvalidQuota):
    """A filter on an entity type Kafka does not know: its UNSUPPORTED_VERSION."""


def describe_entity(entity: Entity) -> str:
    """``user=alice, client-id=<default>``: an entity for people."""
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def check_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of ``pairs``, checked as Kafka's controller does; InvalidQuota if bad."""
    names: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in names:
            raise InvalidQuota(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in ENTITY_TYPES:
            raise InvalidQuota(f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise InvalidQuota(f"Empty {entity_type} not supported")
        names[entity_type] = name
    if not names:
        raise InvalidQuota("Invalid empty client quota entity")
    if IP in names:
        if len(names) > 1:
            raise InvalidQuota(
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId"
            )
        ip = names[IP]
        if ip is not None and canonical_ip(ip) is None:
            # Kafka also takes a host name it can resolve; here only IP literals.
            raise InvalidQuota(f"{ip} is not a valid IP or resolvable host.")
    return tuple(sorted(names.items()))


def canonical_ip(text: str) -> str | None:
    """The address as the server sees peers (``::1``, ``10.0.0.1``); None if not an IP."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def keys_of(entity: Entity) -> dict[str, Kind]:
    """The quota keys an entity (checked) may hold."""
    return IP_KEYS if entity[0][0] == IP else CLIENT_KEYS


def check_value(entity: Entity, key: str, value: float) -> None:
    """InvalidQuota unless ``key`` belongs to the entity and ``value`` fits its type."""
    kind = keys_of(entity).get(key)
    if kind is None:
        raise InvalidQuota(f"Invalid configuration key {key}")
    if not math.isfinite(value):  # Kafka lets NaN through its checks; nothing enforces it
        raise InvalidQuota(f"Invalid value {value} for quota {key}")
    if value <= 0:
        raise InvalidQuota(f"Quota {key} must be greater than 0")
    if kind in _LIMITS:
        limit, name = _LIMITS[kind]
        if value > limit:
            raise InvalidQuota(f"Proposed value for {key} is too large for {name}.")
        if abs(math.fmod(value, 1.0)) > 1e-6:
            raise InvalidQuota(f"{key} cannot be a fractional value.")


@dataclass(frozen=True, slots=True)
class Alteration:
    """One entity's changes: key -> new value, or None to remove it."""

    entity: Entity
    changes: dict[str, float | None]


def check_alteration(
    pairs: Iterable[tuple[str, str | None]], ops: Iterable[tuple[str, float, bool]]
) -> Alteration:
    """An AlterClientQuotas entry (entity pairs; ops of key, value, remove), checked in
    Kafka's order: duplicate keys, the entity, then each value set (a removed key is not
    checked: removing what is not there changes nothing)."""
    changes: dict[str, float | None] = {}
    entity_pairs = list(pairs)
    for key, value, remove in ops:
        if key in changes:
            raise InvalidQuota(
                f"Duplicate quota key {key} not updating quota for this entity "
                f"{describe_entity(tuple(entity_pairs))}"
            )
        changes[key] = None if remove else value
    entity = check_entity(entity_pairs)
    for key, new in changes.items():
        if new is not None:
            check_value(entity, key, new)
    return Alteration(entity, changes)


# -- DescribeClientQuotas filters ----------------------------------------------------------

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Filter:
    """A checked DescribeClientQuotas filter: names each type must have (None: the
    default), the types that must be present with any name, and strictness."""

    exact: dict[str, str | None]
    present: frozenset[str]
    strict: bool

    def matches(self, entity: Entity) -> bool:
        names = dict(entity)
        if self.strict and len(names) != len(self.exact) + len(self.present):
            return False
        return all(t in names and names[t] == n for t, n in self.exact.items()) and all(
            t in names for t in self.present
        )


def check_filter(components: Iterable[tuple[str, int, str | None]], strict: bool) -> Filter:
    """A filter from (entity type, match type, match) components, checked as Kafka does."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise InvalidQuota("Invalid empty entity type.")
        if entity_type in exact or entity_type in present:
            raise InvalidQuota(
                f"Entity type {entity_type} cannot appear more than once in the filter."
            )
        if entity_type not in ENTITY_TYPES:
            raise UnsupportedEntityType(f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidQuota(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[entity_type] = match
        elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if match is not None:
                name = (
                    "MATCH_TYPE_DEFAULT" if match_type == MATCH_DEFAULT else "MATCH_TYPE_SPECIFIED"
                )
                raise InvalidQuota(f"Request specified {name}, but also specified a match string.")
            if match_type == MATCH_DEFAULT:
                exact[entity_type] = None
            else:
                present.add(entity_type)
        else:
            raise InvalidQuota(f"Unknown match type {match_type}")
    types = exact.keys() | present
    if IP in types and types & {USER, CLIENT_ID}:
        raise InvalidQuota(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return Filter(exact, frozenset(present), strict)


# -- the store -----------------------------------------------------------------------------


def describe(quotas: Mapping[Entity, Mapping[str, float]], wanted: Filter) -> Quotas:
    """The entities ``wanted`` matches, with their values (sorted, for stable output)."""
    return {
        entity: dict(sorted(values.items()))
        for entity, values in sorted(quotas.items(), key=lambda item: _sort_key(item[0]))
        if values and wanted.matches(entity)
    }


def _sort_key(entity: Entity) -> tuple[tuple[str, bool, str], ...]:
    return tuple((t, n is not None, n or "") for t, n in entity)
