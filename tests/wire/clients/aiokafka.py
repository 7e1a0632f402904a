"""aiokafka behind the adapter of tests.wire.clients: each operation runs its own event
loop; the coroutines are there for tests that need several at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from kio.schema.errors import ErrorCode

from tests.kafka_client import decode_assignment
from tests.wire.clients import Client, GroupView
from tests.wire.common import TIMEOUT, Collector, Rec, Record, by_position, positions_after
from tests.wire.group_member import kafka_python_options, records_of

CLIENT_ID = "wire-tests-aiokafka"


def run(coro: Coroutine[Any, Any, Any], timeout: float = 2 * TIMEOUT) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class AioKafka(Client):
    name = "aiokafka"
    idempotent = {"enable_idempotence": True}

    def common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": CLIENT_ID,
            "request_timeout_ms": int(TIMEOUT * 1000),
        }

    @contextlib.asynccontextmanager
    async def admin(self) -> AsyncIterator[AIOKafkaAdminClient]:
        client = AIOKafkaAdminClient(**self.common())
        await client.start()
        try:
            yield client
        finally:
            await client.close()

    async def admin_call(self, method: str, *args: Any) -> Any:
        async with self.admin() as client:
            return await getattr(client, method)(*args)

    # -- topics and records

    def create_topic(self, topic: str, partitions: int) -> None:
        new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
        run(self.admin_call("create_topics", [new]))

    def produce(self, topic: str, records: list[Rec], codec: str = "none", **config: Any) -> None:
        run(self.produce_async(topic, records, codec, **config))

    async def produce_async(
        self, topic: str, records: list[Rec], codec: str = "none", **config: Any
    ) -> None:
        """Send in order; every record gets the partition and offset it expects."""
        producer = AIOKafkaProducer(
            **self.common(),
            compression_type=None if codec == "none" else codec,
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
        sent = [(m.partition, m.offset) for m in metadata]
        assert sent == [(r.partition, r.offset) for r in records]

    def consume(
        self, topic: str, partitions: int, count: int, start: int | None = None
    ) -> list[Rec]:
        return run(self.consume_async(topic, partitions, count, start))

    async def consume_async(
        self, topic: str, partitions: int, count: int, start: int | None = None
    ) -> list[Rec]:
        """Assign every partition from ``start`` (None: the beginning), poll until ``count``
        records came; no more may come."""
        consumer = AIOKafkaConsumer(
            **self.common(),
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
                                m.partition, m.offset, m.timestamp, m.key, m.value, tuple(m.headers)
                            )
                        )
            assert len(out) == count, f"got {len(out)} of {count} records"
            assert not any((await consumer.getmany(timeout_ms=300)).values())
            return by_position(out)
        finally:
            await consumer.stop()

    def offset_lookups(
        self, topic: str, partitions: int, times: dict[int, int]
    ) -> tuple[dict[int, int], dict[int, int], dict[int, tuple[int, int]]]:
        """Per partition: the first offset, the end offset, and (offset, timestamp) of the
        first record at or after ``times[partition]``."""

        async def lookups() -> tuple[Any, Any, Any]:
            consumer = AIOKafkaConsumer(**self.common(), group_id=None, enable_auto_commit=False)
            await consumer.start()
            try:
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                return (
                    await consumer.beginning_offsets(tps),
                    await consumer.end_offsets(tps),
                    await consumer.offsets_for_times({tp: times[tp.partition] for tp in tps}),
                )
            finally:
                await consumer.stop()

        starts, ends, found = run(lookups())
        return (
            {tp.partition: o for tp, o in starts.items()},
            {tp.partition: o for tp, o in ends.items()},
            {tp.partition: (f.offset, f.timestamp) for tp, f in found.items()},
        )

    # -- admin

    def list_topics(self) -> set[str]:
        return set(run(self.admin_call("list_topics")))

    def partitions(self, topic: str) -> list[int]:
        (described,) = run(self.admin_call("describe_topics", [topic]))
        assert described["error_code"] == ErrorCode.none, described
        return sorted(p["partition"] for p in described["partitions"])

    def create_again(self, topic: str) -> ErrorCode:
        new = NewTopic(topic, num_partitions=2, replication_factor=1)
        response = run(self.admin_call("create_topics", [new]))  # errors are not raised
        ((name, error, _),) = response.topic_errors
        assert name == topic, response
        return ErrorCode(error)

    def create_partitions(self, topic: str, total: int) -> None:
        run(self.admin_call("create_partitions", {topic: NewPartitions(total_count=total)}))

    def delete_topics(self, topics: list[str]) -> None:
        run(self.admin_call("delete_topics", topics))

    def topic_configs(self, topic: str) -> dict[str, Any]:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        (response,) = run(self.admin_call("describe_configs", [resource]))
        (resource,) = response.resources
        error, _, _, name, entries = resource[:5]
        assert error == ErrorCode.none, resource
        assert name == topic, resource
        return {entry[0]: entry[1] for entry in entries}

    # -- consumer groups

    @contextlib.asynccontextmanager
    async def subscribed(self, group: str, topic: str) -> AsyncIterator[AIOKafkaConsumer]:
        """A started consumer of the group subscribed to the topic, stopped on leaving."""
        c = AIOKafkaConsumer(**kafka_python_options(self.bootstrap, group, CLIENT_ID))
        c.subscribe([topic])
        await c.start()
        try:
            yield c
        finally:
            await c.stop()

    @staticmethod
    async def poll(c: AIOKafkaConsumer, count: int) -> list[Record]:
        got = Collector(count)
        while wanted := got.wanted():
            got.records += records_of(await c.getmany(timeout_ms=200, max_records=wanted))
        return got.result()

    def group_consume_and_commit(
        self, group: str, topic: str, count: int
    ) -> tuple[list[Record], dict[int, int]]:
        async def first_consumer() -> tuple[list[Record], dict[int, int]]:
            async with self.subscribed(group, topic) as first:
                half = await self.poll(first, count)
                positions = positions_after(half)
                await first.commit({TopicPartition(topic, p): o for p, o in positions.items()})
                return half, {p: await first.committed(TopicPartition(topic, p)) for p in positions}

        return run(first_consumer())

    def group_consume_rest(self, group: str, topic: str, count: int) -> list[Record]:
        async def second_consumer() -> list[Record]:
            async with self.subscribed(group, topic) as second:
                rest = await self.poll(second, count)
                extra = await second.getmany(timeout_ms=500)
                assert not any(extra.values()), "more records than produced"
                return rest

        return run(second_consumer())

    def list_groups(self) -> dict[str, str]:
        listed = run(self.admin_call("list_consumer_groups"))
        return {g[0]: g[1] for g in (tuple(g) for g in listed)}

    def describe_group(self, group: str, topic: str) -> GroupView:
        (response,) = run(self.admin_call("describe_consumer_groups", [group]))
        ((error, group_id, state, protocol_type, protocol, members),) = response.groups
        assert (error, group_id) == (ErrorCode.none, group), response
        return GroupView(
            state=state,
            protocol_type=protocol_type,
            assignor=protocol,
            members=[
                (client_id, sorted(decode_assignment(assignment)[topic]))
                for _, client_id, *_, assignment in members
            ],
        )

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        offsets = run(self.admin_call("list_consumer_group_offsets", group))
        return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}

    # aiokafka's admin client cannot delete groups: no delete_group


ADAPTER = AioKafka
