"""A topic's settings: validated, and stored with the topic as msgpack."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field

import msgpack

from kafkaesque.errors import InvalidConfig, InvalidPartitions, InvalidTopic

DEFAULT_PAGE_SIZE = 4096
MAX_TOPIC_NAME = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name or name in (".", ".."):
        raise InvalidTopic(f"invalid topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopic(f"topic name longer than {MAX_TOPIC_NAME} characters")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"invalid topic name {name!r}: use only letters, digits, '.', '_' and '-'"
        )


MAX_PARTITIONS = 10_000
# Page size, TTL (seconds, about 68 years) and max pages fit a 32-bit integer: the archive
# stores them as such, and Redis' EXPIRE takes any of them.
MAX_SETTING = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    partitions: int
    page_size: int = DEFAULT_PAGE_SIZE
    ttl: int = 0  # seconds a closed page is kept; 0 = no expiry
    max_pages: int = 0  # closed pages kept per partition; 0 = no limit
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    topic_id: bytes = field(default_factory=lambda: uuid.uuid4().bytes)

    def validate(self) -> None:
        check_topic_name(self.name)
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(
                f"partitions must be in 1..{MAX_PARTITIONS}, got {self.partitions}"
            )
        for name, value, low, high in (
            ("page size", self.page_size, 1, MAX_SETTING),
            ("ttl", self.ttl, 0, MAX_SETTING),
            ("max pages", self.max_pages, 0, MAX_SETTING),
        ):
            if not low <= value <= high:
                raise InvalidConfig(f"{name} must be in {low}..{high}, got {value}")

    def pack(self) -> bytes:
        return msgpack.packb(
            {
                "partitions": self.partitions,
                "page_size": self.page_size,
                "ttl": self.ttl,
                "max_pages": self.max_pages,
                "created": self.created_ms,
                "id": self.topic_id,
            }
        )

    @classmethod
    def unpack(cls, name: str, data: bytes) -> TopicConfig:
        m = msgpack.unpackb(data)
        return cls(
            name=name,
            partitions=m["partitions"],
            page_size=m["page_size"],
            ttl=m["ttl"],
            max_pages=m["max_pages"],
            created_ms=m["created"],
            topic_id=m["id"],
        )
