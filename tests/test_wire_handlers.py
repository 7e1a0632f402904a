"""The broker's API handlers over a real socket, against a real redis-server."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from kafkaesque.hot.log_types import RestoredPartition, RestoredTopic
from kafkaesque.records.batch import Compression, decode_batch, read_header
from kafkaesque.records.build import build_batch
from tests.kafka_client import (
    AsyncConnection,
    create_topics_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    produce_request,
    request,
)
from tests.kafka_wire import run_with_broker
from wire.handlers import supported
from wire.net.server import Server


def metadata(*topics: str, auto_create: bool = True) -> Any:
    return metadata_request(list(topics), auto_create)


def produce(topic: str, batches: dict[int, bytes], acks: int = -1) -> Any:
    return produce_request(topic, batches, acks, timeout_ms=1000)


def fetch(
    topic: str,
    offsets: dict[int, int],
    max_bytes: int = 1 << 20,
    partition_max: int = 1 << 20,
    wait_ms: int = 0,
) -> Any:
    return fetch_request(
        topic,
        offsets,
        max_wait_ms=wait_ms,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max,
    )


def partitions_of(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def run(redis_url: str, scenario, **config) -> None:
    asyncio.run(run_with_broker(redis_url, scenario, **config))


def test_api_versions_advertises_every_handler(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        for version in (0, 3):
            response = await client.request(
                request(18, version, client_software_name="t", client_software_version="1")
            )
            assert response.error_code == ErrorCode.none
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert ranges == supported()
            assert ranges[0] == (0, 12)  # Produce from v0 keeps old librdkafka compressing
        await client.close()

    run(redis_url, scenario)


def test_metadata_auto_create_invalid_names_and_listing(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        response = await client.request(metadata("fresh", "bad name!"))
        fresh, bad = response.topics
        assert fresh.error_code == ErrorCode.none and len(fresh.partitions) == 3
        assert bad.error_code == ErrorCode.invalid_topic_exception
        assert response.cluster_id and response.controller_id == 0
        assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
            (0, "127.0.0.1", server.port)
        ]
        # A consumer's metadata (auto-creation off) creates nothing.
        [missing] = (await client.request(metadata("missing", auto_create=False))).topics
        assert missing.error_code == ErrorCode.unknown_topic_or_partition
        everything = await client.request(
            request(3, 4, topics=None, allow_auto_topic_creation=True)
        )
        assert [t.name for t in everything.topics] == ["fresh"]
        # The cluster id belongs to the Redis, so every broker on it agrees.
        again = await client.request(metadata("fresh"))
        assert again.cluster_id == response.cluster_id
        await client.close()

    run(redis_url, scenario, default_partitions=3)


def test_produce_and_fetch_keep_batches_as_they_are(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("t"))
        plain = build_batch(
            [b"a", None, b""],
            [None, b"", b"k"],
            timestamp=1234,
            headers=[[("h", None)], [], [("x", b"y")]],
        )
        zipped = build_batch([b"z" * 1000] * 5, timestamp=99, compression=Compression.ZSTD)
        response = await client.request(produce("t", {0: plain, 1: zipped}))
        results = {
            p.index: (p.error_code, p.base_offset)
            for p in response.responses[0].partition_responses
        }
        assert results == {0: (ErrorCode.none, 0), 1: (ErrorCode.none, 0)}
        assert (await client.request(produce("t", {0: plain}))).responses[0].partition_responses[
            0
        ].base_offset == 3
        fetched = partitions_of(await client.request(fetch("t", {0: 0, 1: 0})))
        assert fetched[0].high_watermark == 6 and fetched[1].high_watermark == 5
        records = decode_batch(fetched[0].records)
        assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
            (0, None, b"a", 1234, [("h", None)]),
            (1, b"", None, 1234, []),
            (2, b"k", b"", 1234, [("x", b"y")]),
        ]
        # The compressed batch comes back compressed, byte-identical but for the two fields
        # the broker sets: baseOffset and partitionLeaderEpoch.
        assert read_header(fetched[1].records).compression == Compression.ZSTD
        assert fetched[1].records[8:12] == zipped[8:12]
        assert fetched[1].records[16:] == zipped[16:]
        await client.close()

    run(redis_url, scenario, default_partitions=2)


def test_produce_errors_and_acks_zero(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("e"))
        good = build_batch([b"v"], timestamp=1)
        corrupt = bytearray(good)
        corrupt[-1] ^= 0xFF

        async def error_of(body) -> ErrorCode:
            return (await client.request(body)).responses[0].partition_responses[0].error_code

        assert await error_of(produce("e", {0: bytes(corrupt)})) == ErrorCode.corrupt_message
        assert await error_of(produce("e", {0: b"garbage"})) == ErrorCode.corrupt_message
        # Intact bytes, content Kafka refuses from a client: a control batch (attributes
        # bit 5; only the broker writes transaction markers). Not retriable.
        header = b"\x00\x20" + good[23:]
        control = good[:17] + crc32c(header).to_bytes(4, "big") + header
        assert await error_of(produce("e", {0: control})) == ErrorCode.invalid_record
        assert await error_of(produce("nope", {0: good})) == ErrorCode.unknown_topic_or_partition
        assert await error_of(produce("e", {7: good})) == ErrorCode.unknown_topic_or_partition
        assert await error_of(produce("e", {0: good}, acks=2)) == ErrorCode.invalid_required_acks
        big = build_batch([b"x" * (1 << 20)], timestamp=1)
        assert await error_of(produce("e", {0: big})) == ErrorCode.message_too_large
        assert partitions_of(await client.request(fetch("e", {0: 0})))[0].high_watermark == 0
        # acks=0: appended, and no response at all: the next frame answers the next request.
        await client.send_request(produce("e", {0: good}, acks=0))
        response = await client.request(request(18, 0))
        assert response.error_code == ErrorCode.none
        assert partitions_of(await client.request(fetch("e", {0: 0})))[0].high_watermark == 1
        # A failed acks=0 produce has no response to carry its error: the connection
        # closes, so the client notices; nothing was appended.
        await client.send_request(produce("e", {5: good}, acks=0))
        assert await client.closed_by_server()
        await client.close()
        client = await AsyncConnection.connect(server.port)
        assert partitions_of(await client.request(fetch("e", {0: 0})))[0].high_watermark == 1
        await client.close()

    run(redis_url, scenario)


def test_idle_and_half_sent_connections_close(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        idle = await AsyncConnection.connect(server.port)
        half = await AsyncConnection.connect(server.port)
        await half.send(b"\x00\x00\x00\x64abc")  # 100 bytes announced, 3 sent
        busy = await AsyncConnection.connect(server.port)
        # A connection in use stays open, past the limit's first expiry too (its timer
        # fires, finds recent reads and waits again).
        for _ in range(8):
            await asyncio.sleep(0.1)
            assert (await busy.request(request(18, 0))).error_code == ErrorCode.none
        for client in (idle, half):
            assert await client.closed_by_server()
            await client.close()
        await busy.close()

    run(redis_url, scenario, connections_max_idle_ms=500)


def test_fetch_limits_long_poll_and_out_of_range(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("f"))
        big = build_batch([b"b" * 5000], timestamp=1)
        await client.request(produce("f", {0: big, 1: big}))
        await client.request(produce("f", {0: big}))
        # KIP-74: the first batch comes even over max_bytes; the next partition gets only offsets.
        result = partitions_of(
            await client.request(fetch("f", {0: 0, 1: 0}, max_bytes=100, partition_max=100))
        )
        assert len(result[0].records) == len(big) and result[1].records == b""
        assert result[1].high_watermark == 1
        result = partitions_of(await client.request(fetch("f", {0: 0}, partition_max=2 * len(big))))
        assert len(result[0].records) == 2 * len(big)
        result = partitions_of(await client.request(fetch("f", {0: 5})))
        assert result[0].error_code == ErrorCode.offset_out_of_range
        # Long poll: nothing new, so the fetch waits max_wait...
        started = time.monotonic()
        result = partitions_of(await client.request(fetch("f", {1: 1}, wait_ms=300)))
        assert result[1].records == b"" and time.monotonic() - started >= 0.29
        # ...unless an append arrives, which answers it at once.
        producer = await AsyncConnection.connect(server.port)
        started = time.monotonic()
        waiting = asyncio.create_task(client.request(fetch("f", {1: 1}, wait_ms=10_000)))
        await asyncio.sleep(0.2)
        await producer.request(produce("f", {1: build_batch([b"new"], timestamp=1)}))
        result = partitions_of(await waiting)
        assert [r.value for r in decode_batch(result[1].records)] == [b"new"]
        assert time.monotonic() - started < 2
        await client.close()
        await producer.close()

    run(redis_url, scenario, default_partitions=2)


def test_list_offsets_earliest_latest_and_by_time(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("lo"))
        await client.request(
            produce("lo", {0: build_batch([b"a", b"b", b"c"], timestamps=[100, 200, 300])})
        )

        async def offset(ts: int, error: ErrorCode = ErrorCode.none) -> tuple[int, int]:
            p = (await client.request(list_offsets_request("lo", 0, ts))).topics[0].partitions[0]
            assert p.error_code == error
            return p.offset, p.timestamp

        assert (await offset(-2))[0] == 0 and (await offset(-1))[0] == 3
        assert await offset(150) == (1, 200)
        assert await offset(301) == (-1, -1)
        # Later versions' special lookups (-3 max timestamp, ...): an error, not offset 0.
        for special in (-3, -4, -5):
            assert await offset(special, ErrorCode.unsupported_version) == (-1, -1)
        await client.close()

    run(redis_url, scenario)


def test_idempotent_producer_over_the_wire(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("idem"))
        init = await client.request(request(22, 0, transactional_id=None, transaction_timeout=1000))
        assert init.error_code == ErrorCode.none and init.producer_id >= 0
        pid = init.producer_id

        def batch(seq: int) -> bytes:
            return build_batch(
                [b"r%d" % seq], timestamp=1, producer_id=pid, producer_epoch=0, base_sequence=seq
            )

        def outcome(response):
            p = response.responses[0].partition_responses[0]
            return p.error_code, p.base_offset

        assert outcome(await client.request(produce("idem", {0: batch(0)}))) == (ErrorCode.none, 0)
        assert outcome(await client.request(produce("idem", {0: batch(0)}))) == (
            ErrorCode.none,
            0,
        )  # a retry
        assert (
            outcome(await client.request(produce("idem", {0: batch(5)})))[0]
            == ErrorCode.not_enough_replicas  # ahead: retriable, the earlier batch first
        )
        assert outcome(await client.request(produce("idem", {0: batch(1)}))) == (ErrorCode.none, 1)
        assert partitions_of(await client.request(fetch("idem", {0: 0})))[0].high_watermark == 2
        await client.close()

    run(redis_url, scenario)


def test_admin_create_delete_partitions_and_configs(redis_url: str) -> None:
    def creatable(name: str, partitions: int = 2, rf: int = 1, **configs: str) -> dict:
        return {
            "name": name,
            "num_partitions": partitions,
            "replication_factor": rf,
            "configs": [{"name": k, "value": v} for k, v in configs.items()],
        }

    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        body = create_topics_request(
            creatable("c1", **{"retention.ms": "60000", "kafkaesque.page.size": "100"}),
            creatable("c2", rf=3),
            creatable("c3", **{"segment.bytes": "1"}),
            creatable("bad name"),
        )
        errors = [t.error_code for t in (await client.request(body)).topics]
        assert errors == [
            ErrorCode.none,
            ErrorCode.invalid_replication_factor,
            ErrorCode.invalid_config,
            ErrorCode.invalid_topic_exception,
        ]
        again = create_topics_request(creatable("c1"))
        assert (await client.request(again)).topics[0].error_code == ErrorCode.topic_already_exists
        dry = create_topics_request(creatable("dry"), validate_only=True)
        assert (await client.request(dry)).topics[0].error_code == ErrorCode.none
        # Kafka's topic configs pass, checked; unknown names and bad values do not.
        known = {"min.insync.replicas": "2", "compression.type": "zstd"}
        for configs, error in (
            (known, ErrorCode.none),
            ({"min.insync.replicas": "0"}, ErrorCode.invalid_config),
            ({"retention.bytes": "lots"}, ErrorCode.invalid_config),
            ({"no.such.config": "1"}, ErrorCode.invalid_config),
        ):
            answer = await client.request(
                create_topics_request(creatable("d", **configs), validate_only=True)
            )
            assert answer.topics[0].error_code == error
        assert await server.broker.log.list_topics() == ["c1"]
        config = await server.broker.log.topic("c1")
        assert (config.partitions, config.ttl, config.page_size) == (2, 60, 100)

        grow = request(
            37,
            1,
            timeout=1000,
            validate_only=False,
            topics=[
                {"name": "c1", "count": 4, "assignments": None},
                {"name": "nope", "count": 4, "assignments": None},
            ],
        )
        errors = [r.error_code for r in (await client.request(grow)).results]
        assert errors == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
        assert (await server.broker.log.topic("c1")).partitions == 4
        assert (await client.request(grow)).results[0].error_code == ErrorCode.invalid_partitions

        describe = request(
            32,
            1,
            include_synonyms=False,
            resources=[
                {"resource_type": 2, "resource_name": "c1", "configuration_keys": None},
                {
                    "resource_type": 4,
                    "resource_name": "0",
                    "configuration_keys": ["num.partitions"],
                },
                {"resource_type": 2, "resource_name": "c1", "configuration_keys": []},
            ],
        )
        topic_result, broker_result, empty_keys = (await client.request(describe)).results
        assert {c.name: c.value for c in topic_result.configs}["retention.ms"] == "60000"
        assert empty_keys.configs == topic_result.configs  # an empty key list means all
        assert [(c.name, c.value) for c in broker_result.configs] == [("num.partitions", "1")]

        groups = server.broker.groups
        await groups.admin.commit("g", -1, "", None, {("c1", 0): (1, "", -1)})
        delete = request(20, 1, timeout=1000, topic_names=["c1", "nope"])
        errors = [r.error_code for r in (await client.request(delete)).responses]
        assert errors == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
        assert await server.broker.log.list_topics() == []
        assert await groups.admin.committed("g") == {}  # a deleted topic's offsets go with it
        cluster = await client.request(request(60, 0, include_cluster_authorized_operations=False))
        assert cluster.error_code == ErrorCode.none and cluster.brokers[0].port == server.port
        await client.close()

    run(redis_url, scenario)


def test_fetch_of_no_partitions_is_answered_at_once(redis_url: str) -> None:
    """As Kafka: nothing could wake it, not even the shutdown, so it used to wait out its
    max_wait and, past the shutdown's grace, be cancelled with an asyncio error."""

    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        started = time.monotonic()
        # A topic without partitions: nothing to read, or to wait for.
        response = await client.request(fetch_request("unused", {}, max_wait_ms=30_000))
        assert response.error_code == ErrorCode.none
        assert [t.partitions for t in response.responses] == [()]
        assert time.monotonic() - started < 5
        await client.close()

    run(redis_url, scenario)


def test_shutdown_answers_in_flight_fetches_and_metrics_count(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("s"))
        started = time.monotonic()
        waiting = asyncio.create_task(client.request(fetch("s", {0: 0}, wait_ms=30_000)))
        await asyncio.sleep(0.2)
        await server.shutdown()
        response = await waiting  # answered, not dropped
        assert partitions_of(response)[0].error_code == ErrorCode.none
        assert time.monotonic() - started < 5
        value = server.metrics.registry.get_sample_value
        assert value("kafkaesque_requests_total", {"api": "metadata"}) == 1
        assert value("kafkaesque_requests_total", {"api": "fetch"}) == 1
        assert value("kafkaesque_received_bytes_total") > 0
        with pytest.raises((ConnectionError, OSError)):
            await AsyncConnection.connect(server.port)

    run(redis_url, scenario)


def metadata_v12(*topics: dict[str, Any]) -> Any:
    """Metadata v12 of topics asked for by name, by id or both."""
    return request(
        3,
        12,
        topics=topics,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_leader_epochs_after_a_restore(redis_url: str) -> None:
    """After Redis lost data and the archive restored a partition, its leader epoch is
    higher: metadata shows it, fetches with the old epoch are fenced, and
    OffsetForLeaderEpoch tells where the old epoch ended (KIP-320)."""

    async def scenario(server: Server) -> None:
        log = server.broker.log
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("ep"))
        await client.request(produce("ep", {0: build_batch([b"a", b"b", b"c"], timestamp=1)}))
        config = await log.topic("ep")
        await log.restore([RestoredTopic(config, [RestoredPartition(10, 0)])], 0, 0)
        response = await client.request(metadata_request(["ep"], version=7))
        assert response.topics[0].partitions[0].leader_epoch == 1
        # v12 (flexible): topic ids, and a topic asked for by id alone; an unknown id is
        # UNKNOWN_TOPIC_ID, an unknown name is not created when auto-creation is off.
        by_name = await client.request(metadata_v12({"topic_id": None, "name": "ep"}))
        (topic,) = by_name.topics
        assert topic.topic_id == uuid.UUID(bytes=config.topic_id)
        assert [(p.partition_index, p.leader_epoch) for p in topic.partitions] == [(0, 1)]
        assert by_name.cluster_id == server.broker.cluster_id
        by_id = await client.request(metadata_v12({"topic_id": topic.topic_id, "name": None}))
        assert (by_id.topics[0].name, by_id.topics[0].topic_id) == ("ep", topic.topic_id)
        assert by_id.topics[0].partitions[0].leader_epoch == 1
        unknown = await client.request(
            metadata_v12(
                {"topic_id": uuid.uuid4(), "name": None},
                {"topic_id": None, "name": "nope-v12"},
            )
        )
        assert [(t.error_code, t.name, t.partitions) for t in unknown.topics] == [
            (ErrorCode.unknown_topic_id, None, ()),
            (ErrorCode.unknown_topic_or_partition, "nope-v12", ()),
        ]
        assert "nope-v12" not in await log.list_topics()
        # v10 and v11 have the topic id field too, but no null name in the answer.
        for version in (10, 11):
            by_id = request(
                3,
                version,
                topics=[
                    {"topic_id": topic.topic_id, "name": None},
                    {"topic_id": None, "name": "ep"},
                ],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            refused, named = (await client.request(by_id)).topics
            assert (refused.error_code, refused.name) == (ErrorCode.invalid_request, "")
            assert (named.error_code, named.name) == (ErrorCode.none, "ep")

        # ListOffsets v4+ carries the partition's epoch and checks the client's.
        async def list_offsets(current: int, timestamp: int = -1) -> tuple[ErrorCode, int, int]:
            body = list_offsets_request("ep", 0, timestamp, current_leader_epoch=current, version=6)
            p = (await client.request(body)).topics[0].partitions[0]
            return p.error_code, p.offset, p.leader_epoch

        assert await list_offsets(1) == (ErrorCode.none, 10, 1)
        assert await list_offsets(-1, -2) == (ErrorCode.none, 10, 1)
        assert await list_offsets(0) == (ErrorCode.fenced_leader_epoch, -1, -1)
        assert await list_offsets(2) == (ErrorCode.unknown_leader_epoch, -1, -1)

        def epoch_request(current: int, asked: int, topic: str = "ep", partition: int = 0) -> Any:
            wanted = {
                "partition": partition,
                "current_leader_epoch": current,
                "leader_epoch": asked,
            }
            return request(23, 2, topics=[{"topic": topic, "partitions": [wanted]}])

        answer = (await client.request(epoch_request(1, 0))).topics[0].partitions[0]
        assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
            ErrorCode.none,
            0,
            10,
        )
        answer = (await client.request(epoch_request(1, 1))).topics[0].partitions[0]
        assert (answer.leader_epoch, answer.end_offset) == (1, 10)
        answer = (await client.request(epoch_request(0, 0))).topics[0].partitions[0]
        assert answer.error_code == ErrorCode.fenced_leader_epoch
        # An undefined epoch has no end offset; unknown partitions and topics are errors.
        answer = (await client.request(epoch_request(-1, -1))).topics[0].partitions[0]
        assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
            ErrorCode.none,
            -1,
            -1,
        )
        for topic, partition in (("ep", -1), ("ep", 1), ("nope", 0)):
            answer = (await client.request(epoch_request(-1, 0, topic, partition))).topics[0]
            assert answer.partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        stale = fetch_request("ep", {0: 10}, current_leader_epoch=0)
        assert (
            partitions_of(await client.request(stale))[0].error_code
            == ErrorCode.fenced_leader_epoch
        )
        # Produced batches carry the new epoch.
        await client.request(produce("ep", {0: build_batch([b"d"], timestamp=1)}))
        fetched = partitions_of(await client.request(fetch("ep", {0: 10})))[0]
        assert read_header(fetched.records).partition_leader_epoch == 1
        assert [r.offset for r in decode_batch(fetched.records)] == [10]
        await client.close()

    run(redis_url, scenario)


def test_epochless_fetch_past_a_restore_is_out_of_range_once(redis_url: str) -> None:
    """A client that sends no leader epoch (current_leader_epoch -1) and fetched a partition
    before Redis lost data is told once, by OFFSET_OUT_OF_RANGE, when it fetches past where
    the archive restored the partition: its position came from lost records."""

    async def scenario(server: Server) -> None:
        log = server.broker.log
        lagging, reader, fresh = [await AsyncConnection.connect(server.port) for _ in range(3)]
        await lagging.request(metadata("el"))
        await lagging.request(
            produce("el", {0: build_batch(words := [b"a", b"b", b"c", b"d", b"e"], timestamp=1)})
        )
        for client in (lagging, reader):
            fetched = partitions_of(await client.request(fetch("el", {0: 0})))[0]
            assert [r.value for r in decode_batch(fetched.records)] == words
        # Redis loses everything; the archive held offsets 0-2; new records take 3 on.
        config = await log.topic("el")
        await log.redis.flushall()
        await log.restore([RestoredTopic(config, [RestoredPartition(3, 0)])], 0, 0)
        await lagging.request(
            produce("el", {0: build_batch([b"x", b"y", b"z", b"w"], timestamp=1)})
        )

        def error(response: Any) -> ErrorCode:
            return partitions_of(response)[0].error_code

        # At 5 (after reading 0-4), past the restore point 3: told once, then served.
        assert error(await lagging.request(fetch("el", {0: 5}))) == ErrorCode.offset_out_of_range
        again = partitions_of(await lagging.request(fetch("el", {0: 5})))[0]
        assert again.error_code == ErrorCode.none and again.high_watermark == 7
        # A position at or below the restore point lost nothing; a new connection is not
        # known to have read anything.
        assert error(await reader.request(fetch("el", {0: 3}))) == ErrorCode.none
        assert error(await fresh.request(fetch("el", {0: 5}))) == ErrorCode.none
        for client in (lagging, reader, fresh):
            await client.close()

    run(redis_url, scenario)


def fetch_v(version: int, offset: int, topic_id: uuid.UUID | None = None, **partition: int) -> Any:
    """A Fetch of "ep" partition 0 at ``version``: by name, from v13 by ``topic_id``."""
    wanted = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    topic = {"topic": "ep"} if version < 13 else {"topic_id": topic_id}
    return request(
        1,
        version,
        max_wait=0,
        min_bytes=0,
        topics=[{**topic, "partitions": [{**wanted, **partition}]}],
        forgotten_topics_data=(),
    )


def test_fetch_tells_a_diverged_or_fenced_client_where_it_stands(redis_url: str) -> None:
    """After a restore began epoch 1 at offset 10: a client whose last fetched epoch 0 ran
    past 10 gets diverging_epoch (0, 10) and no records (v12+); a fenced one learns the
    current leader and its endpoint (v16+, KIP-951)."""

    async def scenario(server: Server) -> None:
        log = server.broker.log
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("ep"))
        await client.request(produce("ep", {0: build_batch([b"a", b"b", b"c"], timestamp=1)}))
        config = await log.topic("ep")
        await log.restore([RestoredTopic(config, [RestoredPartition(10, 0)])], 0, 0)
        await client.request(produce("ep", {0: build_batch([b"d", b"e"], timestamp=1)}))

        async def partition(version: int, offset: int, **fields: int) -> Any:
            return partitions_of(await client.request(fetch_v(version, offset, **fields)))[0]

        diverged = await partition(12, 11, last_fetched_epoch=0)
        assert diverged.error_code == ErrorCode.none and diverged.records == b""
        assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (0, 10)
        # Epoch 0 ending at 10 is where the client is: no divergence, records come.
        at_end = await partition(12, 10, last_fetched_epoch=0)
        assert at_end.diverging_epoch.epoch == -1
        assert [r.value for r in decode_batch(at_end.records)] == [b"d", b"e"]
        current = await partition(12, 11, last_fetched_epoch=1)
        assert current.diverging_epoch.epoch == -1 and current.records
        never = await partition(12, 11, last_fetched_epoch=5)  # an epoch never had
        assert never.error_code == ErrorCode.offset_out_of_range

        topic_id = uuid.UUID(bytes=config.topic_id)
        for version in (15, 16, 17):
            response = await client.request(fetch_v(version, 10, topic_id, current_leader_epoch=0))
            fenced = partitions_of(response)[0]
            assert fenced.error_code == ErrorCode.fenced_leader_epoch
            if version < 16:
                assert fenced.current_leader.leader_id == -1  # v15 has no node_endpoints
                continue
            leader = fenced.current_leader
            assert (leader.leader_id, leader.leader_epoch) == (0, 1)
            assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [
                (0, "127.0.0.1", server.port)
            ]
        await client.close()

    run(redis_url, scenario)


def test_list_offsets_v10_times_out_a_slow_lookup(redis_url: str) -> None:
    """v10's timeout bounds the lookups (REQUEST_TIMED_OUT); 0, what clients that leave
    it unset send, waits as before v10."""

    async def scenario(server: Server) -> None:
        client = await AsyncConnection.connect(server.port)
        await client.request(metadata("slow"))
        await client.request(produce("slow", {0: build_batch([b"x"], timestamp=5)}))
        partitions = server.broker.partitions
        lookup = partitions.list_offset

        async def slow(*args: Any) -> Any:
            await asyncio.sleep(0.3)
            return await lookup(*args)

        partitions.list_offset = slow  # type: ignore[method-assign]

        async def answer(timeout_ms: int) -> Any:
            # By time: a search the log's ends do not answer in their one round trip.
            body = list_offsets_request("slow", 0, 1, version=10, timeout_ms=timeout_ms)
            return (await client.request(body)).topics[0].partitions[0]

        late = await answer(50)
        assert (late.error_code, late.offset) == (ErrorCode.request_timed_out, -1)
        for timeout_ms in (0, 5_000):
            ok = await answer(timeout_ms)
            assert (ok.error_code, ok.offset) == (ErrorCode.none, 0)
        await client.close()

    run(redis_url, scenario)
