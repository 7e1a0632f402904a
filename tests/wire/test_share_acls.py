"""Share groups under ACLs (an in-process broker with the ACL authorizer): ShareGroupHeartbeat
and ShareFetch need READ on the group (GROUP_AUTHORIZATION_FAILED for the request), and a
share fetch READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions, nothing
acquired there), as Kafka checks them; and the share metrics the broker serves."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.records.build import build_batch
from kafkaesque.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.kafka_client import AsyncConnection, request
from tests.kafka_wire import run_with_broker
from wire.net.server import Server

ANONYMOUS = "User:ANONYMOUS"


def allow(resource_type: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        resource_type, name, PatternType.LITERAL, ANONYMOUS, "*", Operation.READ, Permission.ALLOW
    )


def heartbeat(group: str, member: str) -> object:
    return request(
        76,
        1,
        group_id=group,
        member_id=member,
        member_epoch=0,
        rack_id=None,
        subscribed_topic_names=["t"],
    )


def share_fetch(group: str, member: str, topic_id: uuid.UUID) -> object:
    return request(
        78,
        1,
        group_id=group,
        member_id=member,
        share_session_epoch=0,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[
            {
                "topic_id": topic_id,
                "partitions": [{"partition_index": 0, "acknowledgement_batches": []}],
            }
        ],
        forgotten_topics_data=[],
    )


def test_share_groups_need_read_on_the_group_and_the_topic(redis_url: str) -> None:
    async def scenario(server: Server) -> None:
        log = server.broker.log
        await log.create_topic(TopicConfig("t", 1))
        await log.append("t", 0, [build_batch([b"a", b"b"])])
        await log.redis.hset(log.keys.group_configs("g"), "share.auto.offset.reset", "earliest")
        topic_id = uuid.UUID(bytes=(await log.topic("t")).topic_id)
        authorizer = server.broker.authorizer
        assert authorizer is not None
        conn = await AsyncConnection.connect(server.port)
        member = str(uuid.uuid4())
        # No ACL at all: the group refuses.
        refused = await conn.request(heartbeat("g", member))
        assert refused.error_code == ErrorCode.group_authorization_failed
        fetch = await conn.request(share_fetch("g", member, topic_id))
        assert (fetch.error_code, fetch.responses) == (ErrorCode.group_authorization_failed, ())
        # READ on the group, not the topic: subscribing to it needs DESCRIBE on it; a
        # fetch of it refuses its partition, nothing acquired.
        await log.stores.acls.add([allow(ResourceType.GROUP, "g")])
        await authorizer.refresh()
        hidden = await conn.request(heartbeat("g", member))
        assert hidden.error_code == ErrorCode.topic_authorization_failed
        describe = AclBinding(
            ResourceType.TOPIC,
            "t",
            PatternType.LITERAL,
            ANONYMOUS,
            "*",
            Operation.DESCRIBE,
            Permission.ALLOW,
        )
        await log.stores.acls.add([describe])
        await authorizer.refresh()
        assert (await conn.request(heartbeat("g", member))).error_code == ErrorCode.none
        fetch = await conn.request(share_fetch("g", member, topic_id))
        assert fetch.error_code == ErrorCode.none
        ((partition,),) = [t.partitions for t in fetch.responses]
        assert partition.error_code == ErrorCode.topic_authorization_failed
        assert partition.acquired_records == ()
        # READ on the topic too: the records are acquired.
        await log.stores.acls.add([allow(ResourceType.TOPIC, "t")])
        await authorizer.refresh()
        fetch = await conn.request(share_fetch("g", member, topic_id))
        ((partition,),) = [t.partitions for t in fetch.responses]
        assert [(r.first_offset, r.last_offset) for r in partition.acquired_records] == [(0, 1)]
        # The metrics: records acquired, and in flight on the share-partition.
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in server.metrics.registry.collect()
            for s in metric.samples
        }
        assert samples[("kafkaesque_share_records_total", (("kind", "acquired"),))] == 2
        key = (("group", "g"), ("partition", "0"), ("topic", "t"))
        assert samples[("kafkaesque_share_in_flight_records", key)] == 0  # before the acquire
        await conn.close()

    asyncio.run(run_with_broker(redis_url, scenario, authorizer="acl"))
