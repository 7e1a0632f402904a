"""The client libraries the wire tests run against the server, each behind one adapter with
the same operations, so a scenario is written once and parametrized over the libraries.

``client`` (tests/wire/conftest.py) is the adapter of the library a test is parametrized
with: ``@pytest.mark.parametrize("client", params("confluent", "kafkajs"), indirect=True)``.
An adapter's module imports its library, so only the libraries a test runs with are
imported, and a test whose library is missing is skipped (``needs``).

Operations (each adapter has those its library can do):

* topics and records: ``create_topic``, ``produce``, ``consume``, ``offset_lookups``;
* admin: ``list_topics``, ``partitions``, ``create_again``, ``create_partitions``,
  ``delete_topics``, ``topic_configs``, ``cluster``, ``init_transactions``;
* consumer groups: ``group_consume_and_commit``, ``group_consume_rest``, ``list_groups``,
  ``describe_group``, ``group_offsets``, ``delete_group``.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest

from tests.wire.common import Rec, sample

JS = Path(__file__).resolve().parents[1] / "js"

# adapter name -> (its module here, the package it needs)
LIBRARIES = {
    "kafka-python": ("kafka_python", "kafka"),
    "aiokafka": ("aiokafka", "aiokafka"),
    "confluent": ("confluent", "confluent_kafka"),
    "kafkajs": ("kafkajs", None),
    "kcat": ("kcat", None),
}


def needs(name: str) -> list[pytest.MarkDecorator]:
    """Marks that skip a test of library ``name`` when it is not installed (none when it is)."""
    if name == "kafkajs":
        if shutil.which("node") is None:
            return [pytest.mark.skip(reason="Node.js is not installed")]
        if not (JS / "node_modules" / "kafkajs").is_dir():
            return [pytest.mark.skip(reason="no kafkajs: npm ci --prefix tests/wire/js")]
    elif name == "kcat":
        if kcat_path() is None:
            return [pytest.mark.skip(reason="kcat is not installed (scripts/setup.sh)")]
    elif importlib.util.find_spec(LIBRARIES[name][1]) is None:
        return [pytest.mark.skip(reason=f"{LIBRARIES[name][1]} is not installed")]
    return []


F = TypeVar("F", bound=Callable[..., Any])


def requires(name: str) -> Callable[[F], F]:
    """``needs`` as a decorator of one test."""

    def mark(test: F) -> F:
        for decorator in needs(name):
            test = decorator(test)
        return test

    return mark


def kcat_path() -> str | None:
    return shutil.which("kcat") or shutil.which("kafkacat")


def params(*names: str) -> list[Any]:
    """pytest params of the libraries ``names`` (for the ``client`` fixture)."""
    return [pytest.param(name, marks=needs(name)) for name in names]


def params_with(values: dict[str, list[Any]]) -> list[Any]:
    """pytest params of library and value, for every value listed for a library; a tuple
    value is several arguments: ``params_with({"confluent": [("gzip", 4)]})``."""
    return [
        pytest.param(name, *(v if isinstance(v, tuple) else (v,)), marks=needs(name))
        for name, vs in values.items()
        for v in vs
    ]


def make(name: str, broker: Any) -> Client:
    """The adapter of library ``name`` for a server (tests.wire.conftest.Broker)."""
    module = importlib.import_module(f"{__name__}.{LIBRARIES[name][0]}")
    return module.ADAPTER(broker)


@dataclass(frozen=True)
class GroupView:
    """A consumer group as a library's admin client describes it."""

    state: str  # as Kafka names it: "Stable", "Empty", ...
    protocol_type: str
    assignor: str
    members: list[tuple[str, list[int]]]  # (client id, its partitions of the topic)


class Client:
    """An adapter: one library's way of doing the operations the scenarios need."""

    name: ClassVar[str]
    null_header_values: ClassVar[bool] = True  # whether it sends headers with null values
    idempotent: ClassVar[dict[str, Any]] = {}  # producer options that turn idempotence on

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.bootstrap: str = broker.bootstrap

    def sample(self) -> list[Rec]:
        """The records of tests.wire.common.sample that this library can send."""
        return sample(null_header_values=self.null_header_values)

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create the topic (with the library's admin client where it has one)."""
        self.broker.cli("create", topic, "--partitions", str(partitions))
