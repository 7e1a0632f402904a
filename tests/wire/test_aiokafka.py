"""aiokafka against the server: produce with every codec, consume with manual assignment,
admin, idempotence, and cross-checks with the CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.wire.common import (
    CODECS,
    PARTITIONS,
    Rec,
    by_position,
    check_codec,
    cli_lines_input,
    cli_records,
    stored_batches,
)

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic  # noqa: E402

TIMEOUT = 30.0


def run(coro: Coroutine[Any, Any, Any], timeout: float = 2 * TIMEOUT) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def common(broker) -> dict:
    return {
        "bootstrap_servers": broker.bootstrap,
        "client_id": "wire-tests-aiokafka",
        "request_timeout_ms": int(TIMEOUT * 1000),
    }


async def produce(broker, topic: str, records: list[Rec], compression: str, **config) -> None:
    producer = AIOKafkaProducer(
        **common(broker),
        compression_type=None if compression == "none" else compression,
        linger_ms=20,
        **config,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert [(m.partition, m.offset) for m in metadata] == [(r.partition, r.offset) for r in records]


async def consume(
    broker, topic: str, partitions: int, count: int, start: int | None = None
) -> list[Rec]:
    consumer = AIOKafkaConsumer(
        **common(broker),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        assignment = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assignment)
        for tp in assignment:
            if start is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, start)
        out: list[Rec] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while len(out) < count and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for messages in batches.values():
                for m in messages:
                    assert m.timestamp_type == 0, m  # CreateTime
                    out.append(
                        Rec(
                            partition=m.partition,
                            offset=m.offset,
                            timestamp=m.timestamp,
                            key=m.key,
                            value=m.value,
                            headers=tuple(m.headers),
                        )
                    )
        assert len(out) == count, f"got {len(out)} of {count} records"
        assert not any((await consumer.getmany(timeout_ms=300)).values())
        return by_position(out)
    finally:
        await consumer.stop()


async def create_topic(broker, topic: str, partitions: int = PARTITIONS) -> None:
    client = AIOKafkaAdminClient(**common(broker))
    await client.start()
    try:
        await client.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        )
    finally:
        await client.close()


@pytest.mark.parametrize("compression", CODECS)
def test_produce_and_consume(broker, topic_name, sample_records, compression):
    topic = topic_name(compression)

    async def scenario() -> list[Rec]:
        await create_topic(broker, topic)
        await produce(broker, topic, sample_records, compression)
        return await consume(broker, topic, PARTITIONS, len(sample_records))

    assert run(scenario()) == by_position(sample_records)
    check_codec(broker.bootstrap, topic, compression)
    assert cli_records(broker, topic) == by_position(sample_records)


def test_idempotent_producer(broker, topic_name, sample_records):
    from kafkaesque.records import read_header

    topic = topic_name()

    async def scenario() -> list[Rec]:
        await create_topic(broker, topic)
        await produce(broker, topic, sample_records, "zstd", enable_idempotence=True)
        return await consume(broker, topic, PARTITIONS, len(sample_records))

    assert run(scenario()) == by_position(sample_records)
    for p in range(PARTITIONS):
        headers = [read_header(b) for b in stored_batches(broker.bootstrap, topic, p)]
        assert headers[0].producer_id >= 0, "the producer was not idempotent"
        assert headers[0].base_sequence == 0


def test_consume_from_an_offset(broker, topic_name, sample_records):
    topic = topic_name()
    wanted = [r for r in by_position(sample_records) if r.offset >= 5]

    async def scenario() -> list[Rec]:
        await create_topic(broker, topic)
        await produce(broker, topic, sample_records, "snappy")
        return await consume(broker, topic, PARTITIONS, len(wanted), start=5)

    assert run(scenario()) == wanted


def test_offsets_lookups(broker, topic_name, sample_records):
    topic = topic_name()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    per_partition = len(sample_records) // PARTITIONS
    wanted = {r.partition: r for r in sample_records if r.offset == 4}

    async def scenario() -> None:
        await create_topic(broker, topic)
        await produce(broker, topic, sample_records, "none")
        consumer = AIOKafkaConsumer(**common(broker), group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            assert await consumer.end_offsets(tps) == {tp: per_partition for tp in tps}
            assert await consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
            times = {tp: wanted[tp.partition].timestamp for tp in tps}
            found = await consumer.offsets_for_times(times)
            for tp in tps:
                assert found[tp].offset == 4, found
                assert found[tp].timestamp == wanted[tp.partition].timestamp
        finally:
            await consumer.stop()

    run(scenario())


def test_follow_new_records(broker, topic_name):
    """A consumer waiting at the end gets records produced later (long-polling fetch)."""
    topic = topic_name()

    async def scenario() -> list[bytes]:
        await create_topic(broker, topic, 1)
        consumer = AIOKafkaConsumer(
            **common(broker), group_id=None, enable_auto_commit=False, fetch_max_wait_ms=5000
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            assert not await consumer.getmany(timeout_ms=200)
            waiting = asyncio.ensure_future(consumer.getone())
            await asyncio.sleep(0.3)
            await produce(broker, topic, [Rec(0, 0, 1_700_000_000_000, None, b"late")], "none")
            first = await asyncio.wait_for(waiting, TIMEOUT)
            return [first.value]
        finally:
            await consumer.stop()

    assert run(scenario()) == [b"late"]


def test_cli_produce_client_consume(broker, topic_name):
    topic = topic_name()
    broker.cli("create", topic, "--partitions", str(PARTITIONS))
    lines = cli_lines_input()
    broker.cli("produce", topic, "--key-separator", ":", input=lines)
    expected = cli_records(broker, topic)
    assert len(expected) == lines.count(b"\n")
    assert run(consume(broker, topic, PARTITIONS, len(expected))) == expected


def test_admin_create_list_delete(broker, topic_name):
    topic = topic_name()

    async def scenario() -> None:
        client = AIOKafkaAdminClient(**common(broker))
        await client.start()
        try:
            await client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
            assert topic in await client.list_topics()
            (described,) = await client.describe_topics([topic])
            assert described["error_code"] == ErrorCode.none, described
            assert sorted(p["partition"] for p in described["partitions"]) == [0, 1]

            await client.create_partitions({topic: NewPartitions(total_count=5)})
            (described,) = await client.describe_topics([topic])
            assert sorted(p["partition"] for p in described["partitions"]) == list(range(5))

            await client.delete_topics([topic])
            assert topic not in await client.list_topics()
        finally:
            await client.close()

    run(scenario())
    assert topic not in broker.cli("topics").stdout.decode().split()


def test_admin_describe_configs(broker, topic_name):
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = topic_name()

    async def scenario() -> Any:
        await create_topic(broker, topic, 1)
        client = AIOKafkaAdminClient(**common(broker))
        await client.start()
        try:
            return await client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        finally:
            await client.close()

    (response,) = run(scenario())
    (resource,) = response.resources
    assert resource[0] == ErrorCode.none, resource  # error code
    assert resource[3] == topic
