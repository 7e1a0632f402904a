"""kafka-python behind the adapter of tests.wire.clients."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import kafka.errors
import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka import codec as kafka_codec
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from tests.wire.clients import Client, GroupView
from tests.wire.common import TIMEOUT, Collector, Rec, Record, by_position, positions_after
from tests.wire.group_member import kafka_python_options, records_of

CLIENT_ID = "wire-tests-kafka-python"
# codecs that need a package kafka-python does not depend on
CODEC_PACKAGES = {
    "snappy": (kafka_codec.has_snappy, "python-snappy"),
    "lz4": (kafka_codec.has_lz4, "lz4"),
    "zstd": (kafka_codec.has_zstd, "zstandard"),
}


class KafkaPython(Client):
    name = "kafka-python"
    null_header_values = False  # kafka-python refuses them
    idempotent = {}  # idempotence is on by default for brokers >= 0.11

    def common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": CLIENT_ID,
            "request_timeout_ms": int(TIMEOUT * 1000),
        }

    @contextlib.contextmanager
    def admin(self) -> Iterator[KafkaAdminClient]:
        client = KafkaAdminClient(**self.common())
        try:
            yield client
        finally:
            client.close()

    # -- topics and records

    def create_topic(self, topic: str, partitions: int) -> None:
        with self.admin() as client:
            client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])

    def produce(self, topic: str, records: list[Rec], codec: str = "none", **config: Any) -> None:
        """Send in order; every record gets the partition and offset it expects."""
        if codec in CODEC_PACKAGES:
            available, package = CODEC_PACKAGES[codec]
            if not available():
                pytest.skip(f"kafka-python needs the {package} package for {codec}")
        producer = KafkaProducer(
            **self.common(),
            compression_type=None if codec == "none" else codec,
            linger_ms=20,
            max_block_ms=int(TIMEOUT * 1000),
            **config,
        )
        try:
            futures = [
                producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers),
                )
                for r in records
            ]
            producer.flush(timeout=TIMEOUT)
            metadata = [f.get(timeout=TIMEOUT) for f in futures]
        finally:
            producer.close(timeout=10)
        sent = [(m.partition, m.offset) for m in metadata]
        assert sent == [(r.partition, r.offset) for r in records]

    def consume(
        self, topic: str, partitions: int, count: int, start: int | None = None
    ) -> list[Rec]:
        """Assign every partition from ``start`` (None: the beginning), poll until ``count``
        records came; no more may come."""
        consumer = KafkaConsumer(
            **self.common(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        try:
            assignment = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(assignment)
            for tp in assignment:
                if start is None:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, start)
            out: list[Rec] = []
            deadline = time.monotonic() + TIMEOUT
            while len(out) < count and time.monotonic() < deadline:
                for messages in consumer.poll(timeout_ms=500).values():
                    for m in messages:
                        assert m.timestamp_type == 0, m  # CreateTime
                        out.append(
                            Rec(
                                m.partition, m.offset, m.timestamp, m.key, m.value, tuple(m.headers)
                            )
                        )
            assert len(out) == count, f"got {len(out)} of {count} records"
            assert not any(consumer.poll(timeout_ms=300).values())
            return by_position(out)
        finally:
            consumer.close()

    def offset_lookups(
        self, topic: str, partitions: int, times: dict[int, int]
    ) -> tuple[dict[int, int], dict[int, int], dict[int, tuple[int, int]]]:
        """Per partition: the first offset, the end offset, and (offset, timestamp) of the
        first record at or after ``times[partition]``."""
        consumer = KafkaConsumer(**self.common(), group_id=None, enable_auto_commit=False)
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            starts = consumer.beginning_offsets(tps)
            ends = consumer.end_offsets(tps)
            found = consumer.offsets_for_times({tp: times[tp.partition] for tp in tps})
        finally:
            consumer.close()
        return (
            {tp.partition: o for tp, o in starts.items()},
            {tp.partition: o for tp, o in ends.items()},
            {tp.partition: (f.offset, f.timestamp) for tp, f in found.items()},
        )

    # -- admin

    def list_topics(self) -> set[str]:
        with self.admin() as client:
            return set(client.list_topics())

    def partitions(self, topic: str) -> list[int]:
        with self.admin() as client:
            (described,) = client.describe_topics([topic])
        assert described["error_code"] == ErrorCode.none, described
        return sorted(p["partition_index"] for p in described["partitions"])

    def create_again(self, topic: str) -> ErrorCode:
        with self.admin() as client, pytest.raises(kafka.errors.TopicAlreadyExistsError) as exc:
            client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        return ErrorCode(exc.value.errno)

    def create_partitions(self, topic: str, total: int) -> None:
        with self.admin() as client:
            client.create_partitions({topic: NewPartitions(total_count=total)})

    def delete_topics(self, topics: list[str]) -> None:
        with self.admin() as client:
            client.delete_topics(topics)

    def topic_configs(self, topic: str) -> dict[str, Any]:
        with self.admin() as client:
            resource = ConfigResource(ConfigResourceType.TOPIC, topic)
            configs = client.describe_configs([resource], config_filter="all")
        return configs["topic"][topic]

    def cluster(self) -> tuple[list[int], int]:
        with self.admin() as client:
            cluster = client.describe_cluster()
        return [b["broker_id"] for b in cluster["brokers"]], cluster["controller_id"]

    def init_transactions(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id="tx")
        try:
            producer.init_transactions()
        finally:
            producer.close(timeout=5)

    # -- consumer groups

    def group_consumer(self, group: str) -> KafkaConsumer:
        return KafkaConsumer(**kafka_python_options(self.bootstrap, group, CLIENT_ID))

    @contextlib.contextmanager
    def subscribed(self, group: str, topic: str) -> Iterator[KafkaConsumer]:
        """A consumer of the group subscribed to the topic, closed on leaving."""
        c = self.group_consumer(group)
        try:
            c.subscribe([topic])
            yield c
        finally:
            c.close()

    @staticmethod
    def poll(c: KafkaConsumer, count: int) -> list[Record]:
        got = Collector(count)
        while wanted := got.wanted():
            got.records += records_of(c.poll(timeout_ms=200, max_records=wanted))
        return got.result()

    def group_consume_and_commit(
        self, group: str, topic: str, count: int
    ) -> tuple[list[Record], dict[int, int]]:
        with self.subscribed(group, topic) as first:
            half = self.poll(first, count)
            positions = positions_after(half)
            first.commit(
                {
                    TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in positions.items()
                }
            )
            return half, {p: first.committed(TopicPartition(topic, p)) for p in positions}

    def group_consume_rest(self, group: str, topic: str, count: int) -> list[Record]:
        with self.subscribed(group, topic) as second:
            rest = self.poll(second, count)
            assert not second.poll(timeout_ms=500), "more records than produced"
            return rest

    def list_groups(self) -> dict[str, str]:
        with self.admin() as client:
            return {g["group_id"]: g["protocol_type"] for g in client.list_groups()}

    def describe_group(self, group: str, topic: str) -> GroupView:
        with self.admin() as client:
            described = client.describe_groups([group])[group]
        assert described["error"] is None, described
        members = described["members"]
        assert all(m["member_metadata"]["topics"][0] == topic for m in members), members
        return GroupView(
            state=described["group_state"],
            protocol_type=described["protocol_type"],
            assignor=described["protocol_data"],
            members=[
                (
                    m["client_id"],
                    sorted(
                        p
                        for t in m["member_assignment"]["assigned_partitions"]
                        if t["topic"] == topic
                        for p in t["partitions"]
                    ),
                )
                for m in members
            ],
        )

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        with self.admin() as client:
            offsets = client.list_group_offsets({group: None})[group]
        return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}

    def delete_group(self, group: str) -> ErrorCode:
        with self.admin() as client:
            result = client.delete_groups([group])
        assert list(result) == [group], result
        name = result[group]
        return ErrorCode.none if name == "OK" else ErrorCode(getattr(kafka.errors, name).errno)


ADAPTER = KafkaPython
