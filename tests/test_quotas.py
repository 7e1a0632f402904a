"""Client quotas without a broker: Kafka's checks and messages, filters, precedence, the
sampled rate and its throttle time, and the store on a real redis-server."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio
from click.testing import CliRunner, Result

from kafkaesque.cli import main
from kafkaesque.hot.quota_store import QuotaStore
from kafkaesque.security.quota_rates import QuotaManager, QuotaTable, Rate
from kafkaesque.security.quotas import (
    CLIENT_ID,
    IP,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    USER,
    InvalidQuota,
    UnsupportedEntityType,
    check_alteration,
    check_filter,
    describe,
)

RATE = "producer_byte_rate"


def alteration_error(pairs, ops) -> str:
    with pytest.raises(InvalidQuota) as info:
        check_alteration(pairs, ops)
    return str(info.value)


def test_entities_keys_and_values_are_checked_as_kafka_does() -> None:
    ok = check_alteration([(USER, "u"), (CLIENT_ID, None)], [(RATE, 1024.0, False)])
    assert ok.entity == ((CLIENT_ID, None), (USER, "u")) and ok.changes == {RATE: 1024.0}
    cases = {
        "Invalid empty client quota entity": ([], [(RATE, 1.0, False)]),
        "Unhandled client quota entity type: group": ([("group", "g")], []),
        "Empty user not supported": ([(USER, "")], []),
        "Invalid client quota entity, duplicate entity entry user": (
            [(USER, "a"), (USER, "b")],
            [],
        ),
        "Invalid quota entity combination, IP entity should not be combined with User or "
        "ClientId": ([(IP, "10.0.0.1"), (USER, "u")], []),
        "nonsense is not a valid IP or resolvable host.": ([(IP, "nonsense")], []),
        "Invalid configuration key connection_creation_rate": (
            [(USER, "u")],
            [("connection_creation_rate", 5.0, False)],
        ),
        "Invalid configuration key producer_byte_rate": ([(IP, None)], [(RATE, 5.0, False)]),
        "Invalid configuration key bogus": ([(CLIENT_ID, "c")], [("bogus", 5.0, False)]),
        "Quota producer_byte_rate must be greater than 0": ([(USER, "u")], [(RATE, 0.0, False)]),
        "producer_byte_rate cannot be a fractional value.": (
            [(USER, "u")],
            [(RATE, 1.5, False)],
        ),
        "Proposed value for connection_creation_rate is too large for an INT.": (
            [(IP, "::1")],
            [("connection_creation_rate", 2.0**31, False)],
        ),
        "Invalid value nan for quota request_percentage": (
            [(USER, "u")],
            [("request_percentage", float("nan"), False)],
        ),
    }
    for message, (pairs, ops) in cases.items():
        assert alteration_error(pairs, ops) == message
    assert alteration_error([(USER, "u")], [(RATE, 1.0, False), (RATE, 2.0, False)]).startswith(
        "Duplicate quota key producer_byte_rate"
    )
    # A double may be fractional; removing a key is not checked (nothing to remove).
    check_alteration([(USER, None)], [("request_percentage", 12.5, False)])
    assert check_alteration([(USER, "u")], [("bogus", 0.0, True)]).changes == {"bogus": None}


def test_describe_filters_match_exact_default_and_any() -> None:
    quotas = {
        ((CLIENT_ID, "c"),): {RATE: 1.0},
        ((CLIENT_ID, None),): {RATE: 2.0},
        ((CLIENT_ID, "c"), (USER, "u")): {RATE: 3.0},
        ((USER, None),): {RATE: 4.0},
        ((IP, "10.0.0.1"),): {"connection_creation_rate": 5.0},
    }

    def found(components, strict=False) -> list[float]:
        found = describe(quotas, check_filter(components, strict))
        return [v[RATE] for v in found.values() if RATE in v]

    assert sorted(found([])) == [1.0, 2.0, 3.0, 4.0]  # and the ip entity, without RATE
    assert len(describe(quotas, check_filter([], False))) == 5
    assert found([], strict=True) == []
    assert sorted(found([(CLIENT_ID, MATCH_EXACT, "c")])) == [1.0, 3.0]
    assert found([(CLIENT_ID, MATCH_EXACT, "c")], strict=True) == [1.0]
    assert found([(CLIENT_ID, MATCH_DEFAULT, None)]) == [2.0]
    assert sorted(found([(CLIENT_ID, MATCH_SPECIFIED, None)])) == [1.0, 2.0, 3.0]
    assert found([(USER, MATCH_SPECIFIED, None), (CLIENT_ID, MATCH_EXACT, "c")]) == [3.0]
    assert found([(USER, MATCH_DEFAULT, None)], strict=True) == [4.0]
    errors = {
        "Invalid empty entity type.": [("", MATCH_EXACT, "x")],
        "Entity type user cannot appear more than once in the filter.": [
            (USER, MATCH_EXACT, "a"),
            (USER, MATCH_DEFAULT, None),
        ],
        "Request specified MATCH_TYPE_EXACT, but set match string to null.": [
            (USER, MATCH_EXACT, None)
        ],
        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.": [
            (USER, MATCH_DEFAULT, "a")
        ],
        "Unknown match type 7": [(USER, 7, None)],
        "Invalid entity filter component combination. IP filter component should not be used "
        "with user or clientId filter component.": [
            (IP, MATCH_SPECIFIED, None),
            (USER, MATCH_SPECIFIED, None),
        ],
    }
    for message, components in errors.items():
        with pytest.raises(InvalidQuota, match="^" + message.replace(".", r"\.") + "$"):
            check_filter(components, False)
    with pytest.raises(UnsupportedEntityType, match="Unsupported entity type group"):
        check_filter([("group", MATCH_SPECIFIED, None)], False)


def test_precedence_and_who_shares_a_rate() -> None:
    """Kafka's order: user+client, user+default client, user, default user+client, default
    user+default client, default user, client, default client. The tags say whose rate."""
    levels = [
        (((CLIENT_ID, "c"), (USER, "u")), ("u", "c")),
        (((CLIENT_ID, None), (USER, "u")), ("u", "c")),
        (((USER, "u"),), ("u", "")),
        (((CLIENT_ID, "c"), (USER, None)), ("u", "c")),
        (((CLIENT_ID, None), (USER, None)), ("u", "c")),
        (((USER, None),), ("u", "")),
        (((CLIENT_ID, "c"),), ("", "c")),
        (((CLIENT_ID, None),), ("", "c")),
    ]
    quotas = {entity: {RATE: float(i + 1)} for i, (entity, _) in enumerate(levels)}
    for i, (entity, tags) in enumerate(levels):
        limit = QuotaTable(quotas).limit(RATE, "u", "c")
        assert limit is not None and (limit.bound, limit.tags) == (float(i + 1), tags), entity
        del quotas[entity]  # the next level applies once this one is gone
    assert QuotaTable(quotas).limit(RATE, "u", "c") is None
    # Keys are looked up on their own: a higher level without the key does not hide it.
    table = QuotaTable(
        {((CLIENT_ID, "c"),): {"consumer_byte_rate": 9.0}, ((CLIENT_ID, None),): {RATE: 7.0}}
    )
    assert table.limit(RATE, "ANONYMOUS", "c").bound == 7.0
    assert table.limit(RATE, "ANONYMOUS", "other").tags == ("", "other")
    ips = QuotaTable(
        {
            ((IP, None),): {"connection_creation_rate": 2.0},
            ((IP, "::1"),): {"connection_creation_rate": 5.0},
        }
    )
    assert ips.connection_rate("::1") == 5.0 and ips.connection_rate("10.1.1.1") == 2.0


def test_rate_and_throttle_time_follow_kafkas_formula() -> None:
    rate = Rate()
    # A new rate counts over at least 10 windows of 1 s: 1000 bytes at once is 100 B/s.
    rate.record(1000.0, 0.0)
    assert rate.measure(0.0) == (100.0, 10_000.0)
    assert rate.throttle_ms(100.0, 0.0) == 0
    # 1500 bytes over 10 s is 150 B/s against 100: (150 - 100) / 100 * 10 s = 5 s.
    rate.record(500.0, 0.0)
    assert rate.throttle_ms(100.0, 0.0) == 5000
    # Past 10 s the window is the real span; 11 s on, the first sample has expired.
    rate.record(0.0, 10_500.0)
    assert rate.measure(10_500.0) == pytest.approx((1500 / 10.5, 10_500.0))
    assert rate.measure(11_000.0)[0] == pytest.approx(0.0)


def test_store_and_manager_on_redis(redis_url: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        store = QuotaStore(client, "quota-test")
        await client.delete(store.keys.quotas, store.keys.quotas_version)
        now = [0.0]
        manager = QuotaManager(store, clock=lambda: now[0])
        await manager.refresh()
        assert not manager.active and manager.record(RATE, "ANONYMOUS", "c", 1e9) == 0
        await store.alter([check_alteration([(CLIENT_ID, "c")], [(RATE, 100.0, False)])])
        await manager.refresh()
        assert manager.active and await store.read() == {((CLIENT_ID, "c"),): {RATE: 100.0}}
        assert manager.record(RATE, "ANONYMOUS", "c", 1000.0) == 0
        assert manager.record(RATE, "ANONYMOUS", "c", 500.0) == 5000
        assert manager.record(RATE, "ANONYMOUS", "other", 1e9) == 0  # no quota for it
        assert manager.max_in_window(RATE, "ANONYMOUS", "c") == 1000.0
        await store.alter([check_alteration([(CLIENT_ID, "c")], [(RATE, 0.0, True)])])
        await manager.refresh()
        assert not manager.active and await store.read() == {}
        # connection_creation_rate 1/s: a second connection at once is held 1 s (the most
        # Kafka holds one), and not counted, so it is refused again.
        await store.alter(
            [check_alteration([(IP, None)], [("connection_creation_rate", 1.0, False)])]
        )
        await manager.refresh()
        assert [manager.connection_delay_ms("::1") for _ in range(12)] == [0] * 10 + [1000] * 2
        now[0] = 11.0  # the first samples expired
        assert manager.connection_delay_ms("::1") == 0
        await client.aclose()

    asyncio.run(scenario())


def test_cli_sets_lists_deletes_and_refuses_bad_input_in_one_line(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete("ks:quotas", "ks:quotas:version")
    runner = CliRunner()

    def cli(*args: str) -> Result:
        return runner.invoke(main, ["--redis-url", redis_url, "quotas", *args])

    result = cli("set", "--client-id", "app", "--producer-byte-rate", "1048576")
    assert (result.exit_code, result.output) == (0, "client-id=app: producer_byte_rate=1048576\n")
    assert cli("set", "--default-user", "--request-percentage", "12.5").exit_code == 0
    listed = cli("list").output.splitlines()
    assert listed[0].split() == ["ENTITY", "QUOTA", "VALUE"]
    assert [line.split() for line in listed[1:]] == [
        ["client-id=app", "producer_byte_rate", "1048576"],
        ["user=<default>", "request_percentage", "12.5"],
    ]
    assert len(cli("list", "--default-user", "--strict").output.splitlines()) == 2
    bad = {
        ("set", "--client-id", "app", "--producer-byte-rate", "1.5"): (
            2,
            "producer_byte_rate cannot be a fractional value.",
        ),
        ("set", "--ip", "nope", "--connection-creation-rate", "1"): (
            2,
            "nope is not a valid IP or resolvable host.",
        ),
        ("set", "--user", "u", "--connection-creation-rate", "1"): (
            2,
            "Invalid configuration key connection_creation_rate",
        ),
        ("set", "--user", "u", "--ip", "::1", "--producer-byte-rate", "1"): (2, "IP entity"),
        ("set", "--producer-byte-rate", "1"): (2, "Invalid empty client quota entity"),
        ("set", "--user", "u", "--default-user", "--producer-byte-rate", "1"): (
            2,
            "--user and --default-user exclude each other",
        ),
        ("set", "--user", "u"): (2, "give at least one quota"),
        ("set", "--user", "u", "--producer-byte-rate", "lots"): (2, "'lots' is not a valid float"),
        ("delete", "--client-id", "nobody"): (1, "client-id=nobody has no such quota"),
        ("list", "--ip", "::1", "--user", "u"): (2, "IP filter component"),
    }
    for args, (code, fragment) in bad.items():
        result = cli(*args)
        assert result.exit_code == code, (args, result.output)
        assert fragment in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
        assert "Traceback" not in result.output
    assert (
        cli("delete", "--client-id", "app").output == "client-id=app: removed producer_byte_rate\n"
    )
    assert cli("delete", "--default-user", "--key", "request_percentage").exit_code == 0
    empty = cli("list")
    assert (empty.exit_code, empty.stdout, empty.stderr) == (0, "", "no quotas\n")
    client.close()
