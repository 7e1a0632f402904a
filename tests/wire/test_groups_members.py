"""Group members as separate processes, for every client and assignor it has: three members
share a topic's partitions and consume each record exactly once; a member killed without
leaving is expelled after its session timeout and its partitions move."""

from __future__ import annotations

import pytest

from tests.wire import groups_common as gc

BROKER_ARGS = gc.FAST_GROUP_ARGS  # the module's server: short group delays

# The assignors each client ships (kafkajs has only its round-robin one).
ASSIGNORS = {
    "confluent": ["range", "roundrobin", "cooperative-sticky"],
    "kafka-python": ["range", "roundrobin", "sticky"],
    "aiokafka": ["range", "roundrobin", "sticky"],
    "kafkajs": ["RoundRobinAssigner"],
}


def client_params(with_assignor: bool) -> list:
    return [
        pytest.param(client, assignor, marks=gc.needs(client), id=f"{client}-{assignor}")
        for client, assignors in ASSIGNORS.items()
        for assignor in (assignors if with_assignor else assignors[:1])
    ]


@pytest.mark.parametrize(("client", "strategy"), client_params(with_assignor=True))
def test_three_members_split_and_consume_exactly_once(
    broker, topic_name, tmp_path, client, strategy
):
    topic = topic_name()
    gc.check_split_exactly_once(broker, tmp_path, topic, f"g-{topic}", client, strategy)


@pytest.mark.parametrize(("client", "strategy"), client_params(with_assignor=False))
def test_killed_member_is_expelled_and_its_partitions_move(
    broker, topic_name, tmp_path, client, strategy
):
    topic = topic_name()
    gc.check_killed_member(broker, tmp_path, topic, f"g-{topic}", client, strategy)
