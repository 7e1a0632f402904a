"""confluent-kafka (librdkafka) behind the adapter of tests.wire.clients."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType
from kio.schema.errors import ErrorCode

from tests.wire.clients import Client, GroupView
from tests.wire.common import TIMEOUT, Collector, Rec, Record, by_position, positions_after
from tests.wire.group_member import HEARTBEAT_MS, SESSION_MS


class Logs:
    """librdkafka's log lines and errors, to show in failures; a logging.Logger look-alike
    for its ``logger`` setting."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def error_cb(self, err: KafkaError) -> None:
        self.lines.append(f"error_cb: {err}")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args if args else fmt)

    def __str__(self) -> str:
        return "\n".join(self.lines[-60:])


def base_config(bootstrap: str, logs: Logs) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "wire-tests-confluent",
        "broker.address.family": "v4",
        "socket.timeout.ms": 10000,
        "error_cb": logs.error_cb,
        "logger": logs,
    }


def group_consumer(bootstrap: str, group: str, logs: Logs, **config: Any) -> Consumer:
    """A consumer of the group: from the earliest offset, no auto commit; ``config`` adds
    to that or replaces it."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "wire-tests-confluent",
            "broker.address.family": "v4",
            "error_cb": logs.error_cb,
            "logger": logs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "fetch.wait.max.ms": 100,
            **config,
        }
    )


def poll(c: Consumer, count: int, logs: Logs) -> list[Record]:
    """Poll until ``count`` records came; returns them (fails on an error)."""
    got = Collector(count)
    while wanted := got.wanted():
        for msg in c.consume(wanted, 0.2):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                pytest.fail(f"consume error {msg.error()}; librdkafka log:\n{logs}")
            got.records.append((msg.partition(), msg.offset(), msg.value().decode()))
    return got.result(f"; log:\n{logs}")


def nothing_more(c: Consumer, seconds: float = 0.5) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for msg in c.consume(100, 0.1):
            assert msg.error() is not None, f"unexpected record {msg.value()!r}"


def consume_and_commit(
    c: Consumer, topic: str, count: int, logs: Logs
) -> tuple[list[Record], dict[int, int]]:
    """Subscribe, consume ``count`` records and commit (synchronously) the positions after
    them; returns the records and those positions."""
    c.subscribe([topic])
    got = poll(c, count, logs)
    positions = positions_after(got)
    c.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False
    )
    return got, positions


class Confluent(Client):
    name = "confluent"
    idempotent = {"enable.idempotence": True}

    def admin(self) -> tuple[AdminClient, Logs]:
        logs = Logs()
        return AdminClient(base_config(self.bootstrap, logs)), logs

    # -- topics and records

    def create_topic(self, topic: str, partitions: int) -> None:
        client, _ = self.admin()
        futures = client.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
            operation_timeout=10,
            request_timeout=TIMEOUT,
        )
        futures[topic].result(timeout=TIMEOUT)

    def produce(self, topic: str, records: list[Rec], codec: str = "none", **config: Any) -> None:
        """Produce in order; check each delivery report's partition and offset."""
        logs = Logs()
        producer = Producer(
            {
                **base_config(self.bootstrap, logs),
                "compression.type": codec,
                "linger.ms": 50,
                "message.timeout.ms": int(TIMEOUT * 1000),
                **config,
            }
        )
        reports: list = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            reports.append((err, msg))

        for r in records:
            producer.produce(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp=r.timestamp,
                headers=list(r.headers) or None,
                on_delivery=on_delivery,
            )
        remaining = producer.flush(TIMEOUT)
        assert remaining == 0, f"{remaining} messages not delivered; librdkafka log:\n{logs}"
        errors = [err for err, _ in reports if err is not None]
        assert not errors, f"delivery errors {errors}; librdkafka log:\n{logs}"
        delivered = {(m.partition(), m.offset()) for _, m in reports}
        assert delivered == {(r.partition, r.offset) for r in records}, f"log:\n{logs}"

    def consume(
        self, topic: str, partitions: int, count: int, start: int | None = None
    ) -> list[Rec]:
        """Assign every partition from ``start`` (None: the beginning), poll until ``count``
        records came; no more may come."""
        logs = Logs()
        consumer = Consumer(
            {
                **base_config(self.bootstrap, logs),
                "group.id": "wire-tests-unused",  # required by the binding; no group is joined
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 100,
            }
        )
        offset = OFFSET_BEGINNING if start is None else start
        try:
            consumer.assign([TopicPartition(topic, p, offset) for p in range(partitions)])
            out: list[Rec] = []
            deadline = time.monotonic() + TIMEOUT
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    pytest.fail(f"consume error {msg.error()}; librdkafka log:\n{logs}")
                ts_type, ts = msg.timestamp()
                assert ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME
                headers = tuple(msg.headers() or ())
                out.append(Rec(msg.partition(), msg.offset(), ts, msg.key(), msg.value(), headers))
            assert len(out) == count, f"got {len(out)} of {count} records; log:\n{logs}"
            extra = consumer.poll(0.3)
            assert extra is None or extra.error() is not None, extra
            return by_position(out)
        finally:
            consumer.close()

    # -- admin

    def list_topics(self) -> set[str]:
        client, _ = self.admin()
        return set(client.list_topics(timeout=TIMEOUT).topics)

    def partitions(self, topic: str) -> list[int]:
        client, logs = self.admin()
        meta = client.list_topics(topic, timeout=TIMEOUT)
        assert topic in meta.topics, f"log:\n{logs}"
        return sorted(meta.topics[topic].partitions)

    def create_again(self, topic: str) -> ErrorCode:
        client, _ = self.admin()
        again = client.create_topics([NewTopic(topic, 1, 1)], request_timeout=TIMEOUT)
        with pytest.raises(KafkaException) as exc:
            again[topic].result(timeout=TIMEOUT)
        return ErrorCode(exc.value.args[0].code())

    def create_partitions(self, topic: str, total: int) -> None:
        client, _ = self.admin()
        more = client.create_partitions([NewPartitions(topic, total)], request_timeout=TIMEOUT)
        more[topic].result(timeout=TIMEOUT)

    def delete_topics(self, topics: list[str]) -> None:
        client, _ = self.admin()
        deleted = client.delete_topics(topics, request_timeout=TIMEOUT)
        for topic in topics:
            deleted[topic].result(timeout=TIMEOUT)

    def topic_configs(self, topic: str) -> dict[str, Any]:
        client, logs = self.admin()
        resource = ConfigResource(ResourceType.TOPIC, topic)
        configs = client.describe_configs([resource], request_timeout=TIMEOUT)[resource]
        out = {name: entry.value for name, entry in configs.result(timeout=TIMEOUT).items()}
        assert out, f"no configs; log:\n{logs}"
        return out

    def cluster(self) -> tuple[list[int], int]:
        client, _ = self.admin()
        cluster = client.describe_cluster(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
        return [n.id for n in cluster.nodes], cluster.controller.id

    def init_transactions(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "tx"})
        producer.init_transactions(TIMEOUT)

    # -- consumer groups

    def group_consume_and_commit(
        self, group: str, topic: str, count: int
    ) -> tuple[list[Record], dict[int, int]]:
        logs = Logs()
        c = group_consumer(self.bootstrap, group, logs)
        try:
            half, positions = consume_and_commit(c, topic, count, logs)
            stored = c.committed([TopicPartition(topic, p) for p in positions], timeout=TIMEOUT)
            return half, {tp.partition: tp.offset for tp in stored}
        finally:
            c.close()

    def group_consume_rest(self, group: str, topic: str, count: int) -> list[Record]:
        logs = Logs()
        c = group_consumer(self.bootstrap, group, logs)
        try:
            c.subscribe([topic])
            rest = poll(c, count, logs)
            nothing_more(c)
            return rest
        finally:
            c.close()

    def list_groups(self) -> dict[str, str]:
        """Group id -> "consumer" (librdkafka lists no protocol type; a group of the
        consumer protocol is not a "simple" one)."""
        client, logs = self.admin()
        listed = client.list_consumer_groups(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
        assert not listed.errors, listed.errors
        ids = [g.group_id for g in listed.valid]
        assert len(ids) == len(set(ids)), f"{listed.valid}\n{logs}"
        return {g.group_id: "" if g.is_simple_consumer_group else "consumer" for g in listed.valid}

    def describe_group(self, group: str, topic: str) -> GroupView:
        client, _ = self.admin()
        desc = client.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(
            timeout=TIMEOUT
        )
        assert desc.coordinator.id == 0, desc
        members = [
            (
                m.client_id,
                sorted(tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic),
            )
            for m in desc.members
        ]
        return GroupView(
            state=desc.state.name.title(),  # ConsumerGroupState.STABLE -> "Stable"
            protocol_type="" if desc.is_simple_consumer_group else "consumer",
            assignor=desc.partition_assignor,
            members=members,
        )

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        client, _ = self.admin()
        offsets = client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT
        )[group].result(timeout=TIMEOUT)
        return {tp.partition: tp.offset for tp in offsets.topic_partitions if tp.topic == topic}

    def delete_group(self, group: str) -> ErrorCode:
        client, _ = self.admin()
        deleted = client.delete_consumer_groups([group], request_timeout=TIMEOUT)[group]
        try:
            deleted.result(timeout=TIMEOUT)
        except KafkaException as exc:
            return ErrorCode(exc.args[0].code())
        return ErrorCode.none


ADAPTER = Confluent
