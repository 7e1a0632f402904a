"""`consume --group` is a classic consumer-protocol member Kafka clients see and share
partitions with: DescribeGroups shows it, and a librdkafka consumer of the same group
splits the topic with it."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests.wire.common import TIMEOUT, create_topic, wait_until

pytest.importorskip("confluent_kafka")

from tests.wire.clients.confluent import Confluent, Logs, group_consumer


def test_cli_member_is_described_and_shares_with_a_kafka_client(broker, topic_name) -> None:
    topic, group = topic_name(), f"cli-{topic_name()}"
    create_topic(broker.bootstrap, topic, 4)
    command = [sys.executable, "-m", "kafkaesque", *broker.global_args, "consume", topic]
    command += ["--group", group, "--follow", "--format-string", "%p %s\\n"]
    cli = subprocess.Popen(command, env=broker.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    printed: list[str] = []

    def read() -> None:
        assert cli.stdout is not None
        printed.extend(line.decode().rstrip("\n") for line in cli.stdout)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    admin, _ = Confluent(broker).admin()

    def described():
        return admin.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result(
            timeout=TIMEOUT
        )

    def assignment() -> dict[str, list[int]]:
        desc = described()
        if str(desc.state) != "ConsumerGroupState.STABLE":
            return {}
        return {
            m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
            for m in desc.members
        }

    consumer = None
    try:
        wait_until(lambda: assignment() == {"kafkaesque-cli": [0, 1, 2, 3]}, "the CLI member")
        assert described().partition_assignor == "range"
        client_logs = Logs()
        consumer = group_consumer(
            broker.bootstrap,
            group,
            client_logs,
            **{"session.timeout.ms": 10_000, "heartbeat.interval.ms": 500},
        )
        consumer.subscribe([topic])
        # librdkafka joins through the broker; the CLI rejoins when its heartbeat says so.
        wait_until(
            lambda: (
                consumer.consume(10, 0.1) is not None
                and sorted(map(len, assignment().values())) == [2, 2]
            ),
            "a split of the partitions",
            context=lambda: f"{described().state}; librdkafka log:\n{client_logs}",
        )
        split = assignment()
        broker.cli("produce", topic, input=b"".join(b"%d\n" % i for i in range(40)))
        mine = sorted(split["kafkaesque-cli"])
        got = []
        wait_until(
            lambda: got.extend(consumer.consume(40, 0.1)) is None and len(got) + len(printed) >= 40,
            "every record once",
        )
        values = sorted([int(m.value()) for m in got] + [int(x.split()[1]) for x in printed])
        assert values == list(range(40))
        assert {int(x.split()[0]) for x in printed} <= set(mine)
        assert {m.partition() for m in got}.isdisjoint(mine)
    finally:
        if consumer is not None:
            consumer.close()
        cli.terminate()
        cli.wait(timeout=30)
        reader.join(timeout=10)
    assert cli.returncode == 143, cli.stderr.read() if cli.stderr else ""
