"""Static members that close: gone when their session ends, to the millisecond.

A static member (group.instance.id) that closes sends no LeaveGroup (classic protocol), or
leaves with member epoch -2 (KIP-848): either way Kafka keeps it until its session times
out, then removes it on a timer of millisecond precision. So a DeleteGroups right after
the close is refused (NON_EMPTY_GROUP), and one sent just past the session's end succeeds
for every group, however the broker's periodic expiry pass is phased against it.
"""

from __future__ import annotations

import time

import pytest

from tests.kafka_client import Connection, request
from tests.wire.common import FAST_GROUP_ARGS, TIMEOUT, create_topic

pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient

SESSION_MS = 6000  # the classic protocol's broker minimum, as Kafka's
# KIP-848 members get their session timeout from the broker (or their group's config).
BROKER_ARGS = (
    *FAST_GROUP_ARGS,
    "--config",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    "--config",
    "group.consumer.heartbeat.interval.ms=100",
)
GROUPS = 3
# How long after a close DeleteGroups must succeed: the session (counted from the last
# heartbeat, which came before the close) and a little for the request. Well within the
# broker's 0.5 s expiry pass, so groups deleted only by that pass fail here.
MARGIN_S = 0.1


def _consumer(bootstrap: str, group: str, protocol: str) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "group.id": group,
        "group.instance.id": f"{group}-static",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config |= {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 100}
    return Consumer(config)


def _delete(admin: AdminClient, group: str) -> KafkaError | None:
    """DeleteGroups of one group: None when deleted, else the error."""
    future = admin.delete_consumer_groups([group], request_timeout=TIMEOUT)[group]
    try:
        future.result()
    except Exception as exc:  # KafkaException carrying the KafkaError
        return exc.args[0]
    return None


def _start(consumers: list[Consumer], topic: str) -> None:
    """Subscribe, and poll until every consumer has partitions."""
    for c in consumers:
        c.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT
    while not all(c.assignment() for c in consumers):
        assert time.monotonic() < deadline, "the consumers got no partitions"
        for c in consumers:
            c.poll(0.05)


def _close(consumers: list[Consumer]) -> list[float]:
    """Close one after another, out of phase with each other and with the broker's
    periodic pass, so each group's session ends at its own moment; the close times."""
    closed = []
    for c in consumers:
        c.close()
        closed.append(time.monotonic())
        time.sleep(0.17)
    return closed


def _deleted_on_time(broker, groups: list[str], closed: list[float]) -> None:
    """DeleteGroups is refused right after the closes (the static members stay) and
    succeeds for each group just past its session's end."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4"})
    for group in groups:
        error = _delete(admin, group)
        assert error is not None and error.code() == KafkaError.NON_EMPTY_GROUP, (group, error)
    for group, at in zip(groups, closed, strict=True):
        time.sleep(max(0.0, at + SESSION_MS / 1000 + MARGIN_S - time.monotonic()))
        late = time.monotonic() - at - SESSION_MS / 1000
        assert _delete(admin, group) is None, f"{group} still has members {late:.3f} s late"


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_closed_static_members_leave_when_their_session_ends(broker, topic_name, protocol):
    topic = topic_name()
    create_topic(broker.bootstrap, topic, GROUPS)
    groups = [f"{topic}-g{i}" for i in range(GROUPS)]
    consumers = [_consumer(broker.bootstrap, g, protocol) for g in groups]
    try:
        _start(consumers, topic)
        closed = _close(consumers)
    finally:
        for c in consumers:
            c.close()  # a no-op after the first close
    _deleted_on_time(broker, groups, closed)


# Groups other programs left behind: the broker's start-up pass over every group (offset
# expiry) takes seconds for this many.
LEFT_BEHIND = 2000


def test_static_members_leave_on_time_while_a_restarted_broker_sweeps(broker_factory, topic_name):
    """A broker (re)started under many groups first passes over all of them, which takes
    seconds; the sessions of members it coordinates end on time all the same (they once
    waited for that pass, and for the periodic ticks held up behind it)."""
    server = broker_factory(*BROKER_ARGS)
    topic = topic_name()
    create_topic(server.bootstrap, topic, GROUPS)
    with Connection(server.bootstrap) as conn:
        for start in range(0, LEFT_BEHIND, 200):
            sent = []
            for i in range(start, start + 200):
                req = request(
                    8,
                    8,
                    group_id=f"a-left-behind-{i}",
                    generation_id_or_member_epoch=-1,
                    member_id="",
                    group_instance_id=None,
                    topics=[
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 0,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": None,
                                }
                            ],
                        }
                    ],
                )
                sent.append((req, conn.send_request(req)))
            for req, correlation_id in sent:
                answer = conn.read_response(req, correlation_id)
                assert answer.topics[0].partitions[0].error_code == 0, answer
    # Sorted after those: a pass over every group reaches these last.
    groups = [f"z-{topic}-g{i}" for i in range(GROUPS)]
    consumers = [_consumer(server.bootstrap, g, "classic") for g in groups]
    try:
        _start(consumers, topic)
        closed = _close(consumers)
    finally:
        for c in consumers:
            c.close()
    assert server.stop() == 0, server.stderr()
    server.start()
    try:
        _deleted_on_time(server, groups, closed)
    finally:
        server.stop()
