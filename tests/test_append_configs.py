"""The topic configs every append obeys (kafkaesque.partition.appends), through Partitions on
fakeredis: max.message.bytes, cleanup.policy=compact, message.timestamp.type,
message.timestamp.before/after.max.ms and compression.type; and the config cache."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import time
from collections.abc import Awaitable, Callable

import fakeredis
import pytest
from crc32c import crc32c

from kafkaesque.cli.line_consumer import format_json
from kafkaesque.cli.line_producer import LineProducer
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import (
    CorruptBatch,
    InvalidRecord,
    InvalidTimestamp,
    RecordTooLarge,
    UnknownTopic,
)
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import MAX_MESSAGE_BYTES, Partitions
from kafkaesque.records.batch import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES,
    CRC,
    Compression,
    check_batch,
    control_type,
    decode_batch,
    read_header,
)
from kafkaesque.records.build import COMMIT, build_batch
from kafkaesque.txn.transaction import TxnMarker

OLD = 1_600_000_000_000  # a CreateTime long past, ms
HOUR = 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


async def topic_log(*topics: tuple[str, dict[str, str]]) -> Log:
    """A log on a fresh fakeredis holding these (name, configs) topics, one partition each."""
    log = Log(fakeredis.FakeAsyncRedis())
    for name, configs in topics:
        await log.create_topic(TopicConfig(name, 1, configs=configs))
    return log


async def stored(log: Log, topic: str) -> list[bytes]:
    return (await log.read(topic, 0, 0)).batches


async def log_end(log: Log, topic: str) -> int:
    return (await log.state(topic, 0)).log_end


def with_attributes(batch: bytes, bits: int) -> bytes:
    """The batch with attribute ``bits`` set and its CRC made valid again."""
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, ATTRIBUTES.start)
    struct.pack_into(">h", out, ATTRIBUTES.start, attributes | bits)
    struct.pack_into(">I", out, CRC.start, crc32c(bytes(out[ATTRIBUTES.start :])))
    return bytes(out)


def since_crc(batch: bytes) -> bytes:
    """What a stored batch keeps of the sent one: everything from the CRC on (baseOffset and
    partitionLeaderEpoch are the log's)."""
    return batch[CRC.start :]


# -- the config cache --------------------------------------------------------------------


def test_configs_are_read_once_per_topic_and_again_when_forgotten(monkeypatch) -> None:
    async def scenario() -> None:
        log = await topic_log(("t", {}))
        reads: list[str] = []
        topic = log.topic

        async def counting(name: str):
            reads.append(name)
            return await topic(name)

        monkeypatch.setattr(log, "topic", counting)
        partitions = Partitions(log)
        batch = build_batch([b"x" * 300])
        # Concurrent appends of a cold cache share one read.
        outcomes = await partitions.append_many({("t", 0): batch, ("t", 1): batch})
        assert outcomes["t", 0].error is None
        assert isinstance(outcomes["t", 1].error, UnknownTopic)  # no partition 1: the script
        await partitions.append("t", 0, [batch])
        assert reads == ["t"]

        await log.configure_topic(
            "t", lambda c: c.replace(configs={**c.configs, "max.message.bytes": "100"})
        )
        await partitions.append("t", 0, [batch])  # within the second: the cached configs
        partitions.forget_config("t")
        with pytest.raises(RecordTooLarge, match=r"max\.message\.bytes of topic t"):
            await partitions.append("t", 0, [batch])
        assert reads == ["t", "t"]

        partitions.policies.ttl = 0.05
        partitions.forget_config("t")
        await log.configure_topic("t", lambda c: c.replace(configs={}))
        for _ in range(2):
            await asyncio.sleep(0.06)
            await partitions.append("t", 0, [batch])  # re-read once the entry is old
        assert reads == ["t", "t", "t", "t"]

    run(scenario)


def test_unknown_topics_fail_as_before_and_are_not_remembered() -> None:
    async def scenario() -> None:
        log = await topic_log()
        partitions = Partitions(log)
        outcome = await partitions.append_records("later", 0, build_batch([b"x"]))
        assert isinstance(outcome.error, UnknownTopic)
        await log.create_topic(TopicConfig("later", 1))
        outcome = await partitions.append_records("later", 0, build_batch([b"x"]))
        assert outcome.error is None and outcome.base_offset == 0

    run(scenario)


# -- max.message.bytes ---------------------------------------------------------------------


def test_max_message_bytes_of_the_topic_replaces_the_brokers() -> None:
    async def scenario() -> None:
        log = await topic_log(
            ("small", {"max.message.bytes": "200"}),
            ("large", {"max.message.bytes": "5000"}),
            ("plain", {}),
        )
        partitions = Partitions(log, max_message_bytes=1000)  # the broker's message.max.bytes
        tiny, medium = build_batch([b"t"]), build_batch([b"m" * 300])
        big, huge = build_batch([b"b" * 2000]), build_batch([b"h" * 6000])
        assert len(tiny) < 200 < len(medium) < 1000 < len(big) < 5000 < len(huge)

        for topic, batch in (("small", medium), ("plain", big), ("large", huge)):
            outcome = await partitions.append_records(topic, 0, tiny + batch)
            assert isinstance(outcome.error, RecordTooLarge), topic
        # Nothing of a refused append was written, not even its small batch.
        assert [await log_end(log, t) for t in ("small", "large", "plain")] == [0, 0, 0]
        for topic, batch in (("small", tiny), ("plain", medium), ("large", big)):
            assert (await partitions.append_records(topic, 0, batch)).error is None, topic

    run(scenario)


def test_broker_topic_defaults_set_max_message_bytes_too() -> None:
    async def scenario() -> None:
        log = await topic_log(("t", {}))
        await log.set_topic_defaults({"max.message.bytes": "100"})
        partitions = Partitions(log, max_message_bytes=MAX_MESSAGE_BYTES)
        with pytest.raises(RecordTooLarge):
            await partitions.append("t", 0, [build_batch([b"x" * 200])])

    run(scenario)


def test_recompression_that_grows_a_batch_past_the_limit_is_refused() -> None:
    async def scenario() -> None:
        configs = {"compression.type": "uncompressed", "max.message.bytes": "1000"}
        log = await topic_log(("t", configs))
        gzip = build_batch([b"z" * 5000], compression=Compression.GZIP)
        assert len(gzip) < 1000
        with pytest.raises(RecordTooLarge):
            await Partitions(log).append("t", 0, [gzip])
        assert await log_end(log, "t") == 0

    run(scenario)


# -- cleanup.policy=compact ------------------------------------------------------------


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_compacted_topics_refuse_records_without_a_key(policy: str) -> None:
    async def scenario() -> None:
        log = await topic_log(("c", {"cleanup.policy": policy}), ("d", {}))
        partitions = Partitions(log)
        keyed = build_batch([b"v1", b"v2"], [b"k1", b"k2"])
        one_keyless = build_batch([b"v1", b"v2"], [b"k1", None])
        lz4_keyless = build_batch([b"v"], [None], compression=Compression.LZ4)
        for records in (keyed + one_keyless, lz4_keyless):
            outcome = await partitions.append_records("c", 0, records)
            assert isinstance(outcome.error, InvalidRecord)
            assert not isinstance(outcome.error, CorruptBatch)  # INVALID_RECORD, not retried
            assert "cannot accept message without key" in str(outcome.error)
        assert await log_end(log, "c") == 0  # the keyed batch of the refused append neither
        assert (await partitions.append_records("c", 0, keyed)).error is None
        assert (await partitions.append_records("d", 0, one_keyless)).error is None
        assert await stored(log, "c") and since_crc((await stored(log, "c"))[0]) == since_crc(keyed)

    run(scenario)


# -- message.timestamp.type=LogAppendTime --------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_log_append_time_stamps_each_batch(codec: Compression) -> None:
    async def scenario() -> None:
        log = await topic_log(("t", {"message.timestamp.type": "LogAppendTime"}))
        partitions = Partitions(log)
        sent = build_batch([b"a", b"b"], [b"k", None], timestamp=OLD, compression=codec)
        before = now_ms()
        appended = await partitions.append("t", 0, [sent, sent])
        after = now_ms()
        assert before <= appended.log_append_time <= after
        for batch in await stored(log, "t"):
            header = check_batch(batch)  # the CRC covers the stamp
            assert header.attributes == int(codec) | ATTR_LOG_APPEND_TIME
            assert header.max_timestamp == appended.log_append_time
            assert header.base_timestamp == OLD  # as Kafka: only maxTimestamp is set
            records = decode_batch(batch)
            assert [r.timestamp for r in records] == [appended.log_append_time] * 2
            assert [(r.key, r.value) for r in records] == [(b"k", b"a"), (None, b"b")]
            # The CLI's consumer prints the broker's time.
            printed = [json.loads(line) for line in format_json(0, batch, 0)]
            assert [p["timestamp"] for p in printed] == [appended.log_append_time] * 2

    run(scenario)


def test_create_time_topics_store_batches_as_sent() -> None:
    async def scenario() -> None:
        log = await topic_log(("t", {}))
        sent = build_batch([b"a"], timestamp=OLD, compression=Compression.GZIP)
        appended = await Partitions(log).append("t", 0, [sent])
        assert appended.log_append_time == -1
        [batch] = await stored(log, "t")
        assert since_crc(batch) == since_crc(sent)

    run(scenario)


# -- message.timestamp.before/after.max.ms -------------------------------------------------


def test_create_time_timestamps_out_of_bounds_are_refused() -> None:
    async def scenario() -> None:
        bounds = {
            "message.timestamp.before.max.ms": str(HOUR),
            "message.timestamp.after.max.ms": "60000",
        }
        log = await topic_log(("t", bounds))
        partitions = Partitions(log)
        now = now_ms()
        fine = build_batch([b"ok"], timestamps=[now - HOUR // 2])
        for bad in (
            build_batch([b"past"], timestamp=now - 2 * HOUR),
            build_batch([b"future"], timestamp=now + 10 * 60_000),
            # The first timestamp within the bounds, the largest beyond.
            build_batch([b"a", b"b"], timestamps=[now, now + 10 * 60_000]),
            build_batch([b"gz"], timestamp=now - 2 * HOUR, compression=Compression.GZIP),
        ):
            outcome = await partitions.append_records("t", 0, fine + bad)
            assert isinstance(outcome.error, InvalidTimestamp), bad
            assert "out of range" in str(outcome.error)
        assert await log_end(log, "t") == 0
        assert (await partitions.append_records("t", 0, fine)).error is None
        # No timestamp (-1) is never out of bounds, as in Kafka.
        assert (
            await partitions.append_records("t", 0, build_batch([b"-"], timestamp=-1))
        ).error is None

    run(scenario)


def test_log_append_time_topics_do_not_bound_the_producers_timestamps() -> None:
    async def scenario() -> None:
        configs = {
            "message.timestamp.type": "LogAppendTime",
            "message.timestamp.before.max.ms": "1000",
        }
        log = await topic_log(("t", configs))
        appended = await Partitions(log).append("t", 0, [build_batch([b"x"], timestamp=OLD)])
        assert appended.log_append_time > OLD

    run(scenario)


# -- compression.type ------------------------------------------------------------------


def test_a_topic_codec_recompresses_other_codecs_and_keeps_the_header() -> None:
    async def scenario() -> None:
        log = await topic_log(("z", {"compression.type": "zstd"}))
        partitions = Partitions(log)
        values = [b"value %d " % i * 20 for i in range(50)]
        keys = [b"k%d" % i for i in range(50)]
        plain = build_batch(
            values, keys, timestamp=OLD, producer_id=5, producer_epoch=1, base_sequence=0
        )
        gzip = build_batch(
            values,
            keys,
            timestamp=OLD + 1,
            compression=Compression.GZIP,
            producer_id=5,
            producer_epoch=1,
            base_sequence=50,
        )
        zstd = build_batch(values, compression=Compression.ZSTD)
        for batch in (plain, gzip, zstd):
            await partitions.append("z", 0, [batch])
        # An idempotent retry of the recompressed batch is recognised, not written again.
        retry = await partitions.append("z", 0, [plain])
        assert retry.base_offset == 0
        batches = await stored(log, "z")
        assert len(batches) == 3 and await log_end(log, "z") == 150
        for sent, kept in zip((plain, gzip, zstd), batches, strict=True):
            header, original = check_batch(kept), read_header(sent)
            assert header.compression is Compression.ZSTD
            for name in (
                "producer_id",
                "producer_epoch",
                "base_sequence",
                "base_timestamp",
                "max_timestamp",
                "record_count",
                "last_offset_delta",
            ):
                assert getattr(header, name) == getattr(original, name), name
            assert [(r.key, r.value, r.timestamp) for r in decode_batch(kept)] == [
                (r.key, r.value, r.timestamp) for r in decode_batch(sent)
            ]
        assert since_crc(batches[2]) == since_crc(zstd)  # already the topic's codec: as sent
        assert len(batches[0]) < len(plain) / 3

    run(scenario)


def test_uncompressed_topics_store_compressed_batches_decompressed() -> None:
    async def scenario() -> None:
        log = await topic_log(("u", {"compression.type": "uncompressed"}))
        sent = build_batch([b"abc" * 100], [b"k"], compression=Compression.SNAPPY)
        await Partitions(log).append("u", 0, [sent])
        [batch] = await stored(log, "u")
        assert check_batch(batch).compression is Compression.NONE
        assert decode_batch(batch)[0].value == b"abc" * 100

    run(scenario)


def test_compression_levels_are_honoured() -> None:
    async def scenario() -> None:
        log = await topic_log(
            ("fast", {"compression.type": "gzip", "compression.gzip.level": "1"}),
            ("small", {"compression.type": "gzip", "compression.gzip.level": "9"}),
            ("default", {"compression.type": "gzip"}),
        )
        partitions = Partitions(log)
        sent = build_batch([b"record %d of a log of words: %d" % (i, i % 7) for i in range(2000)])
        sizes = {}
        for topic in ("fast", "small", "default"):
            await partitions.append(topic, 0, [sent])
            [batch] = await stored(log, topic)
            assert check_batch(batch).compression is Compression.GZIP
            sizes[topic] = len(batch)
        assert sizes["fast"] > sizes["small"]
        assert sizes["default"] == sizes["small"]  # -1: zlib's default, 6, same as 9 here

    run(scenario)


def test_control_batches_are_left_as_sent_and_transactional_ones_keep_their_bit() -> None:
    async def scenario() -> None:
        configs = {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime"}
        log = await topic_log(("t", configs))
        partitions = Partitions(log)
        # A commit marker as Kafka's coordinator writes it (the sequence is not checked).
        marker = with_attributes(
            build_batch([b"\x00\x00\x00\x00\x00\x00"], [b"\x00\x00\x00\x01"]),
            ATTR_TRANSACTIONAL | ATTR_CONTROL,
        )
        data = with_attributes(
            build_batch([b"d"], producer_id=3, producer_epoch=0, base_sequence=0),
            ATTR_TRANSACTIONAL,
        )
        # Markers are the broker's own: only Partitions.write_markers writes them.
        with pytest.raises(InvalidRecord, match="broker only"):
            await partitions.append("t", 0, [data, marker])
        await partitions.append("t", 0, [data])
        assert await partitions.write_markers([("t", 0)], TxnMarker(3, 0, commit=True)) == {
            ("t", 0): None
        }
        kept_data, kept_marker = await stored(log, "t")
        assert check_batch(kept_marker).attributes == ATTR_TRANSACTIONAL | ATTR_CONTROL
        assert control_type(kept_marker) == COMMIT
        assert check_batch(kept_data).attributes == (
            ATTR_TRANSACTIONAL | ATTR_LOG_APPEND_TIME | Compression.ZSTD
        )

    run(scenario)


# -- the CLI's producer gets the same ----------------------------------------------------


def test_the_cli_producer_obeys_the_topic_configs() -> None:
    async def scenario() -> None:
        log = await topic_log(
            ("stamped", {"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"}),
            ("compacted", {"cleanup.policy": "compact"}),
        )
        before = now_ms()
        producer = LineProducer(log, await log.topic("stamped"))
        await producer.produce(io.BytesIO(b"a\nb\n"))
        [batch] = await stored(log, "stamped")
        assert check_batch(batch).compression is Compression.LZ4
        assert all(r.timestamp >= before for r in decode_batch(batch))
        assert check_batch(batch).attributes & ATTR_LOG_APPEND_TIME

        producer = LineProducer(log, await log.topic("compacted"), key_separator=b":")
        with pytest.raises(InvalidRecord, match="without key"):
            await producer.send([b"k:v", b"no key"])
        await producer.send([b"k:v"])
        assert await log_end(log, "compacted") == 1

    run(scenario)
