"""Every API the broker advertises, while Redis is away: each request is answered on the
same connection, with codes a client retries (per entry where the response has them,
top-level where it has one), and the broker logs no traceback. Once Redis is back the
same connection is served again."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, request, subscription
from tests.servers import RedisServer
from tests.wire.conftest import Broker

TOPIC, GROUP, TXN_ID = "away", "away-group", "away-txn"
SHARE_GROUP = "away-share"
SOCKET_TIMEOUT = 60.0  # seconds for one answer: the machine may be busy
RECOVERY_SECONDS = 120.0  # a safety net, not a measure: the broker reconnects at once
# Codes a request gets whether Redis is there or not, for reasons of its own: SASL on a
# listener without SASL.
NOT_ABOUT_REDIS: dict[int, set[ErrorCode]] = {
    17: {ErrorCode.illegal_sasl_state},
    36: {ErrorCode.illegal_sasl_state},
}


@dataclasses.dataclass
class State:
    """What exists before Redis goes away: a topic, an open transaction, a group."""

    topic_id: uuid.UUID
    producer_id: int
    producer_epoch: int


NO_STATE = State(uuid.UUID(int=0), -1, -1)  # for requests that need none
# A request's fields (or several variants of them) for a version.
Fields = Callable[[State, int], dict[str, Any] | list[dict[str, Any]]]


# api key -> the fields of a well-formed request of any version (request() keeps the ones
# a version has), naming the topic, group and transaction that exist.
REQUESTS: dict[int, Fields] = {
    0: lambda s, v: {
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([b"x"])}]}
        ],
    },
    1: lambda s, v: {
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": TOPIC,
                "topic_id": s.topic_id,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
        "forgotten_topics_data": [],
    },
    2: lambda s, v: {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        "timeout": 10_000,
    },
    3: lambda s, v: [
        {
            "topics": topics,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False,
        }
        for topics in ([{"name": TOPIC, "topic_id": None}], None if v else [])  # all: None
    ],
    8: lambda s, v: {
        "group_id": GROUP,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time": -1,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    },
    9: lambda s, v: {
        "group_id": GROUP,
        "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
        "groups": [{"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]}],
        "require_stable": True,
    },
    10: lambda s, v: {
        "key": GROUP,
        "key_type": 0,
        "coordinator_keys": [GROUP],
    },
    11: lambda s, v: {
        "group_id": GROUP,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription([TOPIC])}],
    },
    12: lambda s, v: {"group_id": GROUP, "generation_id": 1, "member_id": "m"},
    13: lambda s, v: {"group_id": GROUP, "member_id": "m", "members": [{"member_id": "m"}]},
    14: lambda s, v: {
        "group_id": GROUP,
        "generation_id": 1,
        "member_id": "m",
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [],
    },
    15: lambda s, v: {"groups": [GROUP], "include_authorized_operations": False},
    16: lambda s, v: {"states_filter": [], "types_filter": []},
    17: lambda s, v: {"mechanism": "PLAIN"},
    18: lambda s, v: {"client_software_name": "tests", "client_software_version": "0.1"},
    19: lambda s, v: {
        "topics": [
            {
                "name": "away-new",
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 10_000,
        "validate_only": False,
    },
    20: lambda s, v: {
        "topic_names": ["away-gone"],
        "topics": [{"name": "away-gone", "topic_id": uuid.UUID(int=0)}],
        "timeout": 10_000,
    },
    21: lambda s, v: {
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 1, "offset": 0}]}],
        "timeout": 10_000,
    },
    22: lambda s, v: {"transactional_id": None, "transaction_timeout": 60_000},
    23: lambda s, v: {
        "replica_id": -1,
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "leader_epoch": 0}]}],
    },
    24: lambda s, v: {
        "v3_and_below_transactional_id": TXN_ID,
        "v3_and_below_producer_id": s.producer_id,
        "v3_and_below_producer_epoch": s.producer_epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [1]}],
        "transactions": [
            {
                "transactional_id": TXN_ID,
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "verify_only": True,
                "topics": [{"name": TOPIC, "partitions": [0]}],
            }
        ],
    },
    25: lambda s, v: {
        "transactional_id": TXN_ID,
        "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch,
        "group_id": GROUP,
    },
    26: lambda s, v: {
        "transactional_id": "away-other-txn",  # ending the open one would change the state
        "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch,
        "committed": False,
    },
    28: lambda s, v: {
        "transactional_id": TXN_ID,
        "group_id": GROUP,
        "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    },
    29: lambda s, v: {
        "resource_type_filter": 1,  # any
        "resource_name_filter": None,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,  # any
        "permission_type": 1,  # any
    },
    30: lambda s, v: {
        "creations": [
            {
                "resource_type": 2,  # topic
                "resource_name": TOPIC,
                "principal": "User:reader",
                "host": "*",
                "operation": 3,  # read
                "permission_type": 3,  # allow
            }
        ]
    },
    31: lambda s, v: {
        "filters": [
            {
                "resource_type_filter": 2,
                "resource_name_filter": TOPIC,
                "principal_filter": "User:nobody",
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            }
        ]
    },
    32: lambda s, v: {
        "resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}],
        "include_synonyms": False,
    },
    33: lambda s, v: {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": TOPIC,
                "configs": [{"name": "retention.ms", "value": "3600000"}],
            }
        ],
        "validate_only": False,
    },
    34: lambda s, v: {
        "dirs": [{"path": "redis", "topics": [{"name": TOPIC, "partitions": [0, 1]}]}]
    },
    35: lambda s, v: [{"topics": [{"topic": TOPIC, "partitions": [0, 1]}]}, {"topics": None}],
    36: lambda s, v: {"auth_bytes": b"\0user\0password"},
    37: lambda s, v: {
        "topics": [{"name": TOPIC, "count": 3, "assignments": None}],
        "timeout": 10_000,
        "validate_only": True,
    },
    42: lambda s, v: {"groups_names": ["away-empty-group"]},
    43: lambda s, v: [
        {
            "election_type": election,
            "topic_partitions": partitions,
            "timeout": 10_000,
        }
        for election in (0, 1)  # preferred, unclean
        for partitions in ([{"topic": TOPIC, "partitions": [0, 1]}], None)
    ],
    44: lambda s, v: {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": TOPIC,
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "3600000"}],
            }
        ],
        "validate_only": False,
    },
    45: lambda s, v: {
        "timeout": 10_000,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [0]}]}],
    },
    46: lambda s, v: {
        "timeout": 10_000,
        "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}],
    },
    47: lambda s, v: {
        "group_id": GROUP,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}],
    },
    48: lambda s, v: {
        "components": [{"entity_type": "client-id", "match_type": 2, "match": None}],
        "strict": False,
    },
    49: lambda s, v: {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "away-client"}],
                "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
            }
        ],
        "validate_only": False,
    },
    50: lambda s, v: {"users": None},
    51: lambda s, v: {
        "deletions": [],
        "upsertions": [
            {
                "name": "away-user",
                "mechanism": 1,  # SCRAM-SHA-256
                "iterations": 4096,
                "salt": b"s" * 16,
                "salted_password": b"p" * 32,
            }
        ],
    },
    55: lambda s, v: {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    },
    60: lambda s, v: {
        "include_cluster_authorized_operations": False,
        "include_fenced_brokers": False,
    },
    61: lambda s, v: {"topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]},
    65: lambda s, v: {"transactional_ids": [TXN_ID]},
    66: lambda s, v: {"state_filters": [], "producer_id_filters": []},
    68: lambda s, v: {
        "group_id": "away-new-group",
        "member_id": "" if v == 0 else str(uuid.uuid4()),
        "member_epoch": 0,
        "rebalance_timeout": 10_000,
        "subscribed_topic_names": [TOPIC],
        "server_assignor": None,
        "topic_partitions": [],
    },
    69: lambda s, v: {"group_ids": [GROUP], "include_authorized_operations": False},
    75: lambda s, v: [
        {"topics": topics, "response_partition_limit": 2000} for topics in ([{"name": TOPIC}], [])
    ],
    76: lambda s, v: {
        "group_id": SHARE_GROUP,
        "member_id": str(uuid.uuid4()),
        "member_epoch": 0,
        "rack_id": None,
        "subscribed_topic_names": [TOPIC],
    },
    77: lambda s, v: {"group_ids": [SHARE_GROUP], "include_authorized_operations": False},
    78: lambda s, v: {
        "group_id": SHARE_GROUP,
        "member_id": str(uuid.uuid4()),
        "share_session_epoch": 0,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "max_records": 10,
        "batch_size": 10,
        "share_acquire_mode": 0,
        "is_renew_ack": False,
        "topics": [
            {
                "topic_id": s.topic_id,
                "partitions": [{"partition_index": 0, "acknowledgement_batches": []}],
            },
        ],
        "forgotten_topics_data": [],
    },
    79: lambda s, v: {
        "group_id": SHARE_GROUP,
        "member_id": str(uuid.uuid4()),
        "share_session_epoch": 1,
        "is_renew_ack": False,
        "topics": [
            {
                "topic_id": s.topic_id,
                "partitions": [
                    {
                        "partition_index": 0,
                        "acknowledgement_batches": [
                            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}
                        ],
                    }
                ],
            }
        ],
    },
    90: lambda s, v: {"groups": [{"group_id": SHARE_GROUP, "topics": None}]},
    91: lambda s, v: {
        "group_id": SHARE_GROUP,
        "topics": [
            {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 0}]}
        ],
    },
    92: lambda s, v: {"group_id": SHARE_GROUP, "topics": [{"topic_name": TOPIC}]},
}


def error_codes(entity: Any, path: str = "") -> Iterator[tuple[str, int]]:
    """Every error code of a response, with where it is (``topics[0].partitions[1]``...)."""
    if isinstance(entity, tuple | list):
        for i, item in enumerate(entity):
            yield from error_codes(item, f"{path}[{i}]")
    elif dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            where = f"{path}.{f.name}" if path else f.name
            if f.name.endswith("error_code"):
                yield where, value
            else:
                yield from error_codes(value, where)


def oldest_and_newest(api_key: int, low: int, high: int) -> list[int]:
    """The oldest version advertised that kio can write (Produce v0-2 it cannot), and the
    newest."""
    known = schema_name_map[api_key_map[api_key]]
    return sorted({min(v for v in known if v >= low), high})


def problems_of(api_key: int, version: int, answer: Any) -> list[str]:
    """What is wrong with an answer given while Redis is away: codes a client would not
    retry."""
    out = []
    for where, code in error_codes(answer):
        code = ErrorCode(code)
        if code == ErrorCode.none or code.retriable or code in NOT_ABOUT_REDIS.get(api_key, ()):
            continue
        out.append(f"{api_key_map[api_key]} v{version}: {where} = {code.name}")
    return out


def described(c: Connection, listing: bool = False) -> Any:
    """The topic, as Metadata v12 answers for it (by name, or listing all)."""
    [topic] = c.request(
        request(
            3,
            12,
            topics=None if listing else [{"name": TOPIC, "topic_id": None}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    ).topics
    return topic


def prepare(broker: Broker) -> State:
    """The topic (with a record, and listed by a Metadata for all topics), a group with a
    committed offset, and an open transaction that has added a partition."""
    with Connection(broker.bootstrap) as c:
        assert c.create_topic(TOPIC, partitions=2).error_code == ErrorCode.none
        assert c.produce(TOPIC, 0, build_batch([b"kept"])).error_code == ErrorCode.none
        topic = described(c)
        assert described(c, listing=True) == topic  # listed: so listed while Redis is away
        committed = c.request(request(8, 9, **REQUESTS[8](NO_STATE, 9)))
        assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
        init = c.request(request(22, 4, transactional_id=TXN_ID, transaction_timeout=60_000))
        assert init.error_code == ErrorCode.none, init
        added = c.request(
            request(
                24,
                3,
                v3_and_below_transactional_id=TXN_ID,
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=init.producer_epoch,
                v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}],
            )
        )
        codes = [
            p.partition_error_code
            for t in added.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ]
        assert codes == [0], added
        return State(topic.topic_id, init.producer_id, init.producer_epoch)


@dataclasses.dataclass
class Outage:
    """What one pass over every API while Redis was away found."""

    advertised: dict[int, tuple[int, int]]  # api key -> the versions ApiVersions offered
    problems: dict[int, list[str]]  # api key -> what was wrong with its answers
    logged: str  # the broker's stderr from Redis' stop until it served again
    topic_before: Any  # the topic in Metadata before Redis went away
    topic_after: Any  # and once it is back, on the connection that asked during the outage


def ask_everything(c: Connection, broker: Broker, state: State, outage: Outage) -> Connection:
    """Send every request variant of every advertised API at its oldest and newest
    version; a connection the broker closes is a problem, and the next request goes on a
    new one (returned)."""
    for api_key, (low, high) in sorted(outage.advertised.items()):
        problems = outage.problems.setdefault(api_key, [])
        for version in oldest_and_newest(api_key, low, high):
            variants = REQUESTS[api_key](state, version)
            for fields in variants if isinstance(variants, list) else [variants]:
                req = request(api_key, version, **fields)
                try:
                    answer = c.request(req)
                except (ConnectionError, TimeoutError) as exc:
                    problems.append(f"v{version} {fields}: no answer: {exc!r}"[:300])
                    c.close()
                    c = Connection(broker.bootstrap, timeout=SOCKET_TIMEOUT)
                    continue
                problems += problems_of(api_key, version, answer)
    return c


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    directory = tmp_path_factory.mktemp("outage")
    redis_server = RedisServer(directory / "redis", appendonly=True)  # kept across the stop
    # An authorizer, so the ACL APIs do their work; the tests' anonymous client may do all.
    authorizer = ("--authorizer", "acl", "--super-user", "User:ANONYMOUS")
    broker = Broker(redis_server.url, directory / "broker", authorizer)
    c = Connection(broker.bootstrap, timeout=SOCKET_TIMEOUT)
    try:
        state = prepare(broker)
        advertised = {k.api_key: (k.min_version, k.max_version) for k in c.api_versions(3).api_keys}
        found = Outage(advertised, {}, "", described(c), None)
        mark = broker.stderr_size()
        redis_server.stop()
        c = ask_everything(c, broker, state, found)
        assert broker.alive()
        redis_server.start()
        deadline = time.monotonic() + RECOVERY_SECONDS
        while True:  # the broker reconnects on the next command
            found.topic_after = described(c)
            if found.topic_after.error_code != ErrorCode.leader_not_available:
                break
            assert time.monotonic() < deadline, "Redis is back, the topic is not"
            time.sleep(0.2)
        found.logged = broker.stderr(mark)
        yield found
    finally:
        c.close()
        broker.stop()
        redis_server.stop()


@pytest.mark.parametrize("api_key", sorted(REQUESTS), ids=lambda key: api_key_map[key])
def test_each_api_answers_retriable_codes_while_redis_is_away(outage: Outage, api_key: int) -> None:
    assert outage.problems.get(api_key) == [], "\n".join(outage.problems.get(api_key, []))


def test_every_advertised_api_was_asked(outage: Outage) -> None:
    assert set(outage.advertised) == set(REQUESTS)


def test_the_outage_logs_no_traceback(outage: Outage) -> None:
    assert "Traceback" not in outage.logged, outage.logged
    assert "cannot reach Redis" in outage.logged, outage.logged


def test_the_connection_is_served_again_once_redis_is_back(outage: Outage) -> None:
    assert outage.topic_after.error_code == ErrorCode.none, outage.topic_after
    assert outage.topic_after.topic_id == outage.topic_before.topic_id
