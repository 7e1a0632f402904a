"""Client quotas over the wire, against an in-process broker and a real redis-server:
DescribeClientQuotas / AlterClientQuotas as Kafka answers them, and enforcement: a producer
or consumer over its byte rate gets throttle_time_ms > 0 and its connection is muted,
Kafka's precedence decides whose quota applies, and connections over an ip's
connection_creation_rate are held and closed. (Neither confluent-kafka 2.16's AdminClient
nor kafka-python 3.0's KafkaAdminClient has client quota calls: raw kio requests here.)
The rate a producer is held to is measured by scripts/bench/quota.py, not asserted here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from kafkaesque.cli import main
from kafkaesque.hot.keys import Keys
from kafkaesque.records.build import build_batch
from tests.kafka_client import (
    AsyncConnection,
    Connection,
    encode_request,
    fetch_request,
    metadata_request,
    produce_request,
    request,
)
from tests.kafka_wire import run_with_broker
from tests.servers import RedisServer
from tests.wire.conftest import Broker
from wire.net.server import Server

Scenario = Callable[[Server], Awaitable[None]]


@pytest.fixture(autouse=True)
def no_quotas(redis_url: str) -> Iterator[None]:
    """Quotas live in Redis, shared with every other test: none before, none left after."""
    client = redis.Redis.from_url(redis_url)
    keys = Keys()
    client.delete(keys.quotas, keys.quotas_version)
    yield
    client.delete(keys.quotas, keys.quotas_version)
    client.close()


def run(redis_url: str, scenario: Scenario) -> None:
    asyncio.run(run_with_broker(redis_url, scenario))


def entity(**names: str | None) -> list[dict[str, Any]]:
    """entity(user="u", client_id=None): the wire's entity list (None: the default)."""
    return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]


def alter(entries: list[tuple[list[dict], dict[str, float | None]]], version: int = 1, **kw) -> Any:
    """AlterClientQuotas: per entry its entity and key -> value (None: remove)."""
    return request(
        49,
        version,
        entries=[
            {
                "entity": e,
                "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()],
            }
            for e, ops in entries
        ],
        validate_only=kw.get("validate_only", False),
    )


def describe(*components: tuple[str, int, str | None], strict: bool = False, version: int = 1):
    return request(
        48,
        version,
        components=[{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        strict=strict,
    )


def described(response: Any) -> dict[tuple, dict[str, float]]:
    assert response.error_code == ErrorCode.none, response
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


async def set_quotas(server: Server, conn: AsyncConnection, entries: list) -> None:
    response = await conn.request(alter(entries))
    assert [e.error_code for e in response.entries] == [ErrorCode.none] * len(entries)
    await server.quotas.refresh()  # the broker also does it within a moment; now, to test


async def connect(server: Server, client_id: str) -> AsyncConnection:
    conn = await AsyncConnection.connect(server.port)
    conn.client_id = client_id
    return conn


def produce(topic: str, size: int, acks: int = 1) -> Any:
    return produce_request(topic, {0: build_batch([b"x" * size], timestamp=1)}, acks=acks)


def request_size(req: Any) -> int:
    return len(encode_request(req, 1)) - 4


def test_alter_and_describe_as_kafka_answers(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        conn = await connect(server, "admin")
        for version in (0, 1):
            ok = [
                (entity(user="u", client_id="c"), {"producer_byte_rate": 1024.0}),
                (entity(client_id=None), {"consumer_byte_rate": 2048.0}),
                (entity(ip="10.0.0.1"), {"connection_creation_rate": 5.0}),
                (entity(user=None), {"request_percentage": 12.5}),
            ]
            bad = [
                (entity(ip="10.0.0.1", user="u"), {"connection_creation_rate": 1.0}),
                (entity(client_id="c"), {"connection_creation_rate": 1.0}),
                (entity(client_id="d"), {"producer_byte_rate": -1.0}),
                (entity(group="g"), {"producer_byte_rate": 1.0}),
            ]
            response = await conn.request(alter(ok + bad, version, validate_only=True))
            assert [(e.error_code, e.error_message) for e in response.entries] == [
                (ErrorCode.none, None)
            ] * 4 + [
                (
                    ErrorCode.invalid_request,
                    "Invalid quota entity combination, IP entity should not be combined with "
                    "User or ClientId",
                ),
                (ErrorCode.invalid_request, "Invalid configuration key connection_creation_rate"),
                (ErrorCode.invalid_request, "Quota producer_byte_rate must be greater than 0"),
                (ErrorCode.invalid_request, "Unhandled client quota entity type: group"),
            ]
            assert described(await conn.request(describe(version=version))) == {}  # validate only
            response = await conn.request(alter(ok + bad, version))
            assert [e.error_code for e in response.entries].count(ErrorCode.none) == 4
            everything = described(await conn.request(describe(version=version)))
            assert everything == {
                (("client-id", "c"), ("user", "u")): {"producer_byte_rate": 1024.0},
                (("client-id", None),): {"consumer_byte_rate": 2048.0},
                (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
                (("user", None),): {"request_percentage": 12.5},
            }
            # exact / default / any specified name, strict or not
            assert set(described(await conn.request(describe(("user", 0, "u"))))) == {
                (("client-id", "c"), ("user", "u"))
            }
            assert set(described(await conn.request(describe(("user", 1, None))))) == {
                (("user", None),)
            }
            assert len(described(await conn.request(describe(("client-id", 2, None))))) == 2
            strict = await conn.request(describe(("client-id", 2, None), strict=True))
            assert set(described(strict)) == {(("client-id", None),)}
            # Removing every key removes the entity.
            removes = [(e, dict.fromkeys(values)) for e, values in ok]
            await conn.request(alter(removes, version))
            assert described(await conn.request(describe(version=version))) == {}
        errors = [
            (describe(("user", 0, None)), ErrorCode.invalid_request, "MATCH_TYPE_EXACT"),
            (describe(("group", 2, None)), ErrorCode.unsupported_version, "group"),
            (describe(("ip", 2, None), ("user", 2, None)), ErrorCode.invalid_request, "IP"),
        ]
        for req, code, fragment in errors:
            response = await conn.request(req)
            assert response.error_code == code and fragment in response.error_message
            assert response.entries is None
        await conn.close()

    run(redis_url, scenario)


def test_producer_over_its_quota_is_throttled_and_muted(redis_url: str) -> None:
    """producer_byte_rate 10,000 B/s for client-id "slow": a new rate is measured over at
    least 10 s, so 100,000 bytes pass; 5,000 more are 0.5 s over. The next request on the
    connection is read only after that; another client id is not throttled at all."""
    quota = 10_000

    async def scenario(server: Server) -> None:
        # The rates' clock stands still, so the windows are exactly Kafka's 10 s however
        # slowly the requests go (a loaded machine stretched them and the throttle shrank).
        frozen = time.monotonic()
        server.quotas.clock = lambda: frozen
        admin = await connect(server, "admin")
        await admin.request(metadata_request(["q"], auto_create=True))
        await set_quotas(server, admin, [(entity(client_id="slow"), {"producer_byte_rate": quota})])
        slow = await connect(server, "slow")
        first = produce("q", 90_000)
        response = await slow.request(first)
        assert response.throttle_time.total_seconds() == 0
        overhead = request_size(produce("q", 1000)) - 1000
        second = produce("q", 10 * quota + quota // 2 - request_size(first) - overhead)
        response = await slow.request(second)
        throttle_ms = response.throttle_time.total_seconds() * 1000
        total = request_size(first) + request_size(second)
        assert throttle_ms == pytest.approx((total / 10 - quota) / quota * 10_000, abs=20)
        assert throttle_ms > 400
        started = time.monotonic()
        await slow.request(metadata_request(["q"]))  # muted: answered only after the throttle
        assert time.monotonic() - started >= throttle_ms / 1000 - 0.02
        # acks=0 is throttled too: no response, but the connection is muted.
        # 15,000 more bytes, at a clock that stood still: 2 s over.
        await slow.request(produce("q", 15_000, acks=0))
        started = time.monotonic()
        await slow.request(metadata_request(["q"]))
        assert time.monotonic() - started > 1.0
        fast = await connect(server, "fast")
        for _ in range(3):
            response = await fast.request(produce("q", 200_000))
            assert response.throttle_time.total_seconds() == 0
        for conn in (admin, slow, fast):
            await conn.close()

    run(redis_url, scenario)


def test_consumer_over_its_quota_gets_an_empty_throttled_fetch(redis_url: str) -> None:
    """consumer_byte_rate 5,000 B/s: a fetch asks for no more than 50,000 bytes (the quota
    over the 10 s window), so one 26,000-byte batch of two comes back; the second fetch is
    over the quota: it is answered empty, with the throttle time, and not counted."""

    async def scenario(server: Server) -> None:
        admin = await connect(server, "admin")
        await admin.request(metadata_request(["f"], auto_create=True))
        for _ in range(3):
            await admin.request(produce("f", 26_000))
        await set_quotas(
            server, admin, [(entity(client_id="reader"), {"consumer_byte_rate": 5000})]
        )
        reader = await connect(server, "reader")
        response = await reader.request(fetch_request("f", {0: 0}, max_bytes=10_000_000))
        assert response.throttle_time.total_seconds() == 0
        (partition,) = response.responses[0].partitions
        assert 26_000 < len(partition.records) < 27_000  # capped: one batch, not three
        response = await reader.request(fetch_request("f", {0: 1}, max_bytes=10_000_000))
        assert response.throttle_time.total_seconds() > 0 and response.responses == ()
        # Another client id reads everything at once.
        other = await connect(server, "other")
        response = await other.request(fetch_request("f", {0: 0}, max_bytes=10_000_000))
        assert response.throttle_time.total_seconds() == 0
        assert len(response.responses[0].partitions[0].records) > 78_000
        for conn in (admin, reader, other):
            await conn.close()

    run(redis_url, scenario)


def test_precedence_user_before_client_id_and_defaults(redis_url: str) -> None:
    """Every client is the user ANONYMOUS: a quota on that user beats one on the client id
    alone, and one on user and client id together beats both."""

    async def throttled(server: Server, client_id: str) -> bool:
        conn = await connect(server, client_id)
        response = await conn.request(produce("p", 20_000))
        await conn.close()
        return response.throttle_time.total_seconds() > 0

    async def scenario(server: Server) -> None:
        admin = await connect(server, "admin")
        await admin.request(metadata_request(["p"], auto_create=True))
        generous = {"producer_byte_rate": 1e9}
        await set_quotas(
            server,
            admin,
            [
                (entity(client_id="x"), generous),
                (entity(client_id=None), {"producer_byte_rate": 1000}),
            ],
        )
        assert not await throttled(server, "x")  # its own client-id quota
        assert await throttled(server, "y")  # the default client id's
        await set_quotas(server, admin, [(entity(user="ANONYMOUS"), {"producer_byte_rate": 1000})])
        assert await throttled(server, "x")  # the user's quota comes first
        await set_quotas(server, admin, [(entity(user="ANONYMOUS", client_id="x"), generous)])
        assert not await throttled(server, "x")  # user and client id together: first of all
        await admin.close()

    run(redis_url, scenario)


def test_connections_over_the_ip_rate_are_held_then_closed(redis_url: str) -> None:
    """connection_creation_rate 1/s on 127.0.0.1 (over the default ip's 1000): ten
    connections at once are within it (a 10 s window), the eleventh is held about a second,
    unanswered, then closed; without the quota connections are accepted again."""

    async def scenario(server: Server) -> None:
        admin = await connect(server, "admin")
        await set_quotas(
            server,
            admin,
            [
                (entity(ip=None), {"connection_creation_rate": 1000}),
                (entity(ip="127.0.0.1"), {"connection_creation_rate": 1}),
            ],
        )
        accepted = [await connect(server, "c") for _ in range(10)]
        for conn in accepted:
            assert (await conn.request(metadata_request([]))).brokers
        refused = await connect(server, "c")
        await refused.send_request(metadata_request([]))
        started = time.monotonic()
        assert await refused.closed_by_server(timeout=5)
        assert time.monotonic() - started > 0.5
        await set_quotas(
            server, admin, [(entity(ip="127.0.0.1"), {"connection_creation_rate": None})]
        )
        await set_quotas(server, admin, [(entity(ip=None), {"connection_creation_rate": None})])
        again = await connect(server, "c")
        assert (await again.request(metadata_request([]))).brokers
        for conn in [admin, again, *accepted]:
            await conn.close()

    run(redis_url, scenario)


def test_a_quota_set_by_the_cli_reaches_a_running_broker(redis_url: str) -> None:
    """`kafkaesque quotas set` writes Redis; the broker reads it within about a second."""

    async def scenario(server: Server) -> None:
        admin = await connect(server, "admin")
        await admin.request(metadata_request(["cli"], auto_create=True))
        args = ["--redis-url", redis_url, "quotas", "set", "--client-id", "cli-set"]
        result = await asyncio.to_thread(
            CliRunner().invoke, main, [*args, "--producer-byte-rate", "1000"]
        )
        assert result.exit_code == 0, result.output
        conn = await connect(server, "cli-set")
        deadline = time.monotonic() + 3
        while True:
            response = await conn.request(produce("cli", 20_000))
            if response.throttle_time.total_seconds() > 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert response.throttle_time.total_seconds() > 0
        for c in (admin, conn):
            await c.close()

    run(redis_url, scenario)


def test_alterations_while_redis_is_away_change_nothing_and_are_retried(tmp_path: Path) -> None:
    """Redis away: each valid entry answers KAFKA_STORAGE_ERROR (retried) on the same
    connection, an invalid one its own code, and none was applied; validate_only needs no
    Redis."""
    redis_server = RedisServer(tmp_path / "redis", appendonly=True)
    broker = Broker(redis_server.url, tmp_path / "broker")
    kept = (entity(client_id="kept"), {"producer_byte_rate": 1024.0})
    entries = [
        (entity(client_id="new"), {"producer_byte_rate": 2048.0}),
        (entity(client_id="d"), {"producer_byte_rate": -1.0}),
        (entity(client_id="kept"), {"producer_byte_rate": None}),
    ]
    try:
        with Connection(broker.bootstrap) as conn:
            answer = conn.request(alter([kept]))
            assert [e.error_code for e in answer.entries] == [ErrorCode.none]
            mark = broker.stderr_size()
            redis_server.stop()
            answer = conn.request(alter(entries))
            assert [e.error_code for e in answer.entries] == [
                ErrorCode.kafka_storage_error,
                ErrorCode.invalid_request,
                ErrorCode.kafka_storage_error,
            ]
            assert all("Redis" in e.error_message for e in answer.entries[::2]), answer
            answer = conn.request(alter(entries, validate_only=True))
            assert [e.error_code for e in answer.entries] == [
                ErrorCode.none,
                ErrorCode.invalid_request,
                ErrorCode.none,
            ]
            redis_server.start()
            deadline = time.monotonic() + 120  # a safety net: the broker reconnects at once
            while (found := conn.request(describe())).error_code != ErrorCode.none:
                assert time.monotonic() < deadline, found
                time.sleep(0.2)
            assert described(found) == {(("client-id", "kept"),): {"producer_byte_rate": 1024.0}}
        logged = broker.stderr(mark)
        assert "Traceback" not in logged, logged
    finally:
        broker.stop()
        redis_server.stop()
