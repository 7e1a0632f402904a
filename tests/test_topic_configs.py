"""Topic configs: Kafka's checks and canonical values, describe and alter, broker
defaults, and the settings the log enforces (retention.bytes, segment.bytes, segment.ms,
cleanup.policy), on fakeredis and a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgpack
import pytest

from kafkaesque.config.topic_config import AlterOp, TopicConfig, altered, describe, replaced
from kafkaesque.config.topic_keys import TOPIC_CONFIGS, broker_defaults, parse
from kafkaesque.errors import InvalidConfig, InvalidPartitions
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch


def batch(count: int, size: int = 10, timestamp: int = 1_700_000_000_000) -> bytes:
    return build_batch([b"x" * size] * count, timestamp=timestamp)


@pytest.mark.parametrize(
    ("name", "value", "canonical"),
    [
        ("retention.ms", " 60000 ", "60000"),
        ("cleanup.policy", "compact, delete", "compact,delete"),
        ("unclean.leader.election.enable", "TRUE", "true"),
        ("min.cleanable.dirty.ratio", "0.25", "0.25"),
        ("compression.type", "zstd", "zstd"),
        ("retention.bytes", "-1", "-1"),
    ],
)
def test_values_are_checked_and_canonical(name: str, value: str, canonical: str) -> None:
    assert parse(name, value) == canonical


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("no.such", "1", "Unknown topic config name: no.such"),
        ("retention.ms", "soon", "Not a number of type LONG"),
        ("retention.ms", "-2", "at least -1"),
        ("max.message.bytes", str(2**31), "Not a number of type INT"),
        ("cleanup.policy", "delete,forever", "must be one of"),
        ("min.cleanable.dirty.ratio", "2", "range [0, 1]"),
        ("preallocate", "yes", "true or false"),
        ("segment.bytes", "1000", "at least 1048576"),
        ("retention.ms", None, "null"),
    ],
)
def test_bad_values_name_the_config(name: str, value: str | None, words: str) -> None:
    with pytest.raises(InvalidConfig) as refused:
        parse(name, value)
    assert name in str(refused.value) and words in str(refused.value)


def test_every_config_default_passes_its_own_check() -> None:
    for key in TOPIC_CONFIGS.values():
        assert parse(key.name, key.default) == key.default, key.name


def test_broker_defaults_use_kafka_broker_names_and_units() -> None:
    defaults = broker_defaults(
        {"log.retention.hours": "2", "log.cleanup.policy": "compact", "message.max.bytes": "999"}
    )
    assert defaults == {
        "retention.ms": "7200000",
        "cleanup.policy": "compact",
        "max.message.bytes": "999",
    }
    # The most specific unit wins, as in Kafka.
    assert broker_defaults({"log.retention.ms": "5", "log.retention.hours": "1"}) == {
        "retention.ms": "5"
    }
    with pytest.raises(InvalidConfig, match=r"log\.segment\.bytes"):
        broker_defaults({"log.segment.bytes": "tiny"})


def test_value_source_and_synonyms() -> None:
    config = TopicConfig(
        "t",
        1,
        configs={"retention.ms": "1000"},
        defaults={"retention.ms": "5", "cleanup.policy": "compact"},
    )
    config.validate()
    entries = {e.name: e for e in describe(config)}
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("1000", "topic")
    assert entries["retention.ms"].synonyms == [
        ("retention.ms", "1000", "topic"),
        ("log.retention.ms", "5", "broker"),
        ("log.retention.ms", "-1", "default"),
    ]
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == (
        "compact",
        "broker",
    )
    assert entries["segment.ms"].source == "default"
    assert set(entries) == set(TOPIC_CONFIGS)


def test_incremental_and_whole_alterations() -> None:
    config = TopicConfig("t", 1, configs={"cleanup.policy": "compact", "retention.ms": "10"})
    after = altered(
        config,
        [
            (AlterOp.APPEND, "cleanup.policy", "delete,compact"),
            (AlterOp.DELETE, "retention.ms", None),
            (AlterOp.SET, "segment.ms", "1000"),
        ],
    )
    assert after.configs == {"cleanup.policy": "compact,delete", "segment.ms": "1000"}
    after = altered(after, [(AlterOp.SUBTRACT, "cleanup.policy", "compact")])
    assert after.value("cleanup.policy") == "delete"
    for bad in (
        [(AlterOp.APPEND, "retention.ms", "1")],  # not a list
        [(AlterOp.SET, "nope", "1")],
        [(AlterOp.SET, "retention.ms", "1"), (AlterOp.DELETE, "retention.ms", None)],
    ):
        with pytest.raises(InvalidConfig):
            altered(config, bad)
    assert config.configs == {"cleanup.policy": "compact", "retention.ms": "10"}  # untouched
    assert replaced(config, {"segment.ms": "5"}).configs == {"segment.ms": "5"}
    with pytest.raises(InvalidPartitions):
        config.grown(1)


def test_topics_stored_before_configs_keep_their_settings() -> None:
    old = msgpack.packb(
        {"partitions": 2, "page_size": 7, "ttl": 30, "max_pages": 3, "created": 1, "id": b"x" * 16}
    )
    config = TopicConfig.unpack("old", old)
    assert (config.page_size, config.ttl, config.max_pages) == (7, 30, 3)
    assert config.value("retention.ms") == "30000"
    unset = TopicConfig.unpack(
        "old",
        msgpack.packb(
            {
                "partitions": 1,
                "page_size": 4096,
                "ttl": 0,
                "max_pages": 0,
                "created": 1,
                "id": b"x" * 16,
            }
        ),
    )
    assert unset.ttl == 0 and unset.source("retention.ms") == "default"


def test_lua_settings_drop_retention_without_the_delete_policy() -> None:
    deleting = TopicConfig("t", 1, configs={"retention.ms": "2000", "retention.bytes": "100"})
    assert "ttl 2 " in deleting.lua_settings() and "retention_bytes 100 " in deleting.lua_settings()
    compacted = TopicConfig("t", 1, configs={**deleting.configs, "cleanup.policy": "compact"})
    assert "ttl 0 " in compacted.lua_settings()
    assert "retention_bytes -1 " in compacted.lua_settings()
    assert "delete 1" in deleting.lua_settings() and "delete 0" in compacted.lua_settings()


def test_compaction_lags_must_be_in_order() -> None:
    lags = {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}
    with pytest.raises(InvalidConfig, match=r"min\.compaction\.lag\.ms \(5000\) >"):
        TopicConfig("t", 1, configs=lags).validate()
    TopicConfig("t", 1, configs={**lags, "min.compaction.lag.ms": "1000"}).validate()


# -- what the log enforces ---------------------------------------------------------------------
def run(scenario: Callable[[], object]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def test_retention_bytes_drops_the_oldest_closed_pages(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("rb", 1, page_size=4))
        size = len(batch(4))
        await log.configure_topic(
            "rb", lambda c: altered(c, [(AlterOp.SET, "retention.bytes", str(3 * size))])
        )
        for _ in range(6):
            await log.append("rb", 0, [batch(4)])
        # Six closed pages of one batch each; with the open page empty, 3 fit the budget.
        state = await log.state("rb", 0)
        assert (state.log_start, state.log_end, state.pages) == (12, 24, 3)
        assert state.bytes == 3 * size
        # Without the delete policy, retention.bytes no longer drops anything.
        await log.configure_topic(
            "rb", lambda c: altered(c, [(AlterOp.SET, "cleanup.policy", "compact")])
        )
        for _ in range(3):
            await log.append("rb", 0, [batch(4)])
        assert (await log.state("rb", 0)).pages == 6

    run(scenario)


def test_segment_bytes_closes_a_page(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        config = TopicConfig("sb", 1, configs={"segment.bytes": str(1024 * 1024)})
        await log.create_topic(config)
        big = batch(1, size=600 * 1024)
        await log.append("sb", 0, [big])
        assert await log.redis.hget("ks:{sb:0}:meta", "page") == b"0"
        await log.append("sb", 0, [big])  # past 1 MiB: the page closes
        meta = await log.redis.hmget("ks:{sb:0}:meta", "page", "closed_bytes")
        assert meta == [b"1", str(2 * len(big)).encode()]

    run(scenario)


def test_segment_ms_closes_an_old_page_before_appending(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("sm", 1, configs={"segment.ms": "60000"}))
        await log.append("sm", 0, [batch(2)])
        await log.append("sm", 0, [batch(2)])
        assert await log.redis.hget("ks:{sm:0}:meta", "page") == b"0"
        # The open page's first append is now two minutes old.
        await log.redis.hincrby("ks:{sm:0}:meta", "page_opened", -120_000)
        await log.append("sm", 0, [batch(2)])
        assert await log.redis.zrange("ks:{sm:0}:index", 0, -1, withscores=True) == [
            (b"0", 0.0),
            (b"1", 4.0),
        ]

    run(scenario)


def test_broker_defaults_apply_to_topics_without_their_own(make_log: Callable[[], Log]) -> None:
    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("plain", 1))
        await log.create_topic(TopicConfig("own", 1, configs={"retention.ms": "1000"}))
        changed = await log.set_topic_defaults({"retention.ms": "60000"})
        assert changed == ["plain"]
        assert await log.set_topic_defaults({"retention.ms": "60000"}) == []  # no change
        plain = await log.topic("plain")
        assert (plain.ttl, plain.source("retention.ms")) == (60, "broker")
        assert await log.redis.hget("ks:{plain:0}:meta", "ttl") == b"60"
        assert await log.redis.hget("ks:{own:0}:meta", "ttl") == b"1"
        await log.create_topic(TopicConfig("later", 1))  # created with the defaults
        assert await log.redis.hget("ks:{later:0}:meta", "ttl") == b"60"
        await log.set_topic_defaults({})
        assert await log.redis.hget("ks:{plain:0}:meta", "ttl") == b"0"

    run(scenario)
