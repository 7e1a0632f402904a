"""Three brokers on one Redis: registration, leadership spread over them, clients
bootstrapped to one using all three, a broker SIGKILLed and SIGTERMed under load, and its
return."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kio.schema.errors import ErrorCode

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, create_topics_request, metadata_request, request
from tests.servers import RedisServer
from tests.wire.conftest import REPO, Broker

SESSION_MS = 3000  # short, so a SIGKILLed broker's partitions move within seconds
OPTIONS = ("--broker-session-timeout-ms", str(SESSION_MS), "--broker-heartbeat-interval-ms", "300")
NODES = (1, 2, 3)


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.redis = RedisServer(directory / "redis", appendonly=True)
        self.brokers = {
            node: Broker(
                self.redis.url, directory / f"broker{node}", ("--node-id", str(node), *OPTIONS)
            )
            for node in NODES
        }
        for node in NODES:  # every broker has heard of the others
            self.wait_for(lambda n=node: self.listed(n) == set(NODES), f"broker {node} sees all")

    def listed(self, node: int) -> set[int]:
        return {b.node_id for b in self.metadata(None, node).brokers}

    def bootstrap(self, node: int = 1) -> str:
        return self.brokers[node].bootstrap

    def metadata(self, topics: list[str] | None, node: int = 1) -> Any:
        with Connection(self.bootstrap(node)) as connection:
            return connection.metadata(topics)

    def leaders(self, topic: str, node: int = 1) -> dict[int, int]:
        """partition -> leader as broker ``node`` tells it (-1: none now)."""
        [entry] = self.metadata([topic], node).topics
        assert entry.error_code == ErrorCode.none, entry
        return {p.partition_index: p.leader_id for p in entry.partitions}

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 20.0) -> float:
        """Seconds until ``check`` held."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if check():
                return time.monotonic() - start
            time.sleep(0.05)
        raise AssertionError(f"not within {timeout} s: {what}")

    def settled(self, topic: str) -> dict[int, int]:
        """The partitions' leaders once every live broker tells the same, all alive."""
        found: dict[int, int] = {}

        def agreed() -> bool:
            nonlocal found
            alive = [n for n, b in self.brokers.items() if b.alive()]
            views = [self.leaders(topic, n) for n in alive]
            found = views[0]
            return all(v == found for v in views) and set(found.values()) <= set(alive)

        self.wait_for(agreed, f"the leaders of {topic} settled")
        return found

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        self.redis.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    servers = Cluster(tmp_path_factory.mktemp("brokers"))
    yield servers
    servers.stop()
    for node, broker in servers.brokers.items():
        assert "Traceback" not in broker.stderr(), f"broker {node}:\n{broker.stderr()}"


def _create(cluster: Cluster, topic: str, partitions: int) -> None:
    with Connection(cluster.bootstrap()) as connection:
        assert connection.create_topic(topic, partitions).error_code == ErrorCode.none


def test_metadata_lists_every_broker_and_spreads_the_leaders(cluster: Cluster) -> None:
    listed = {b.node_id: (b.host, b.port) for b in cluster.metadata(None).brokers}
    assert listed == {n: ("127.0.0.1", cluster.brokers[n].port) for n in NODES}
    _create(cluster, "spread", 24)
    cluster.wait_for(
        lambda: set(cluster.leaders("spread").values()) == set(NODES), "leaders on all three"
    )
    # Every broker tells the same leaders.
    assert cluster.leaders("spread", 2) == cluster.leaders("spread", 3) == cluster.leaders("spread")
    # The CLI lists them, with the partitions each leads.
    cluster_line, *table = cluster.brokers[1].cli("brokers").stdout.decode().splitlines()
    assert cluster_line.split()[:2] == ["cluster", "id"] and len(cluster_line.split()[2]) == 22
    assert table[0].split() == ["NODE", "ENDPOINTS", "SESSION", "LEFT", "S", "LEADS"]
    listed = [line.split() for line in table[1:]]
    assert [int(r[0]) for r in listed] == list(NODES)
    assert listed[1][1] == f"PLAINTEXT://127.0.0.1:{cluster.brokers[2].port}"
    described = cluster.brokers[1].cli("describe", "spread").stdout.decode().splitlines()
    rows = [line.split() for line in described if line.strip()[:1].isdigit()]
    assert {int(r[0]): int(r[5]) for r in rows} == cluster.leaders("spread")
    led = Counter(cluster.leaders("spread").values())
    assert all(int(r[3]) >= led[int(r[0])] for r in listed)  # "spread" and earlier topics
    empty = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkaesque",
            "--redis-url",
            cluster.redis.url[:-1] + "5",
            "brokers",
        ],
        capture_output=True,
        cwd=REPO,
    )
    assert (empty.returncode, empty.stderr) == (0, b"no broker is running\n")
    assert empty.stdout.startswith(b"cluster id  ") and len(empty.stdout.splitlines()) == 1


def test_a_non_leader_refuses_with_not_leader(cluster: Cluster) -> None:
    _create(cluster, "refuse", 24)
    leaders = cluster.settled("refuse")
    partition, leader = next((p, n) for p, n in leaders.items() if n != 1)
    with Connection(cluster.bootstrap(1)) as connection:
        answer = connection.produce("refuse", partition, _one_batch())
        assert answer.error_code == ErrorCode.not_leader_or_follower
        fetched = connection.fetch("refuse", partition, 0)
        assert fetched.error_code == ErrorCode.not_leader_or_follower
    with Connection(cluster.bootstrap(leader)) as connection:
        assert connection.produce("refuse", partition, _one_batch()).error_code == ErrorCode.none


def _one_batch() -> bytes:
    return build_batch([b"v"])


def test_clients_bootstrapped_to_one_broker_use_all_three(cluster: Cluster) -> None:
    _create(cluster, "all-three", 9)
    cluster.settled("all-three")
    producer = Producer({"bootstrap.servers": cluster.bootstrap(2), "enable.idempotence": True})
    for i in range(900):
        producer.produce("all-three", value=f"{i}".encode(), partition=i % 9)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap(3),
            "group.id": "all-three",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["all-three"])
    seen = _drain(consumer, 900)
    consumer.close()
    assert sorted(int(v) for v in seen) == list(range(900))
    # kafka-python too: it refreshes metadata on NOT_LEADER as librdkafka does.
    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap(3), acks="all")
    for i in range(90):
        kp.send("all-three", value=f"kp{i}".encode(), partition=i % 9)
    kp.flush(30)
    kp.close()
    kc = KafkaConsumer(
        "all-three", bootstrap_servers=cluster.bootstrap(1), auto_offset_reset="earliest"
    )
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 990 and time.monotonic() < deadline:
        got += [m.value for records in kc.poll(timeout_ms=500).values() for m in records]
    got += [m.value for records in kc.poll(timeout_ms=2000).values() for m in records]  # no more
    kc.close()
    assert sorted(v for v in got if v.startswith(b"kp")) == sorted(
        f"kp{i}".encode() for i in range(90)
    )
    assert len(got) == 990


def _drain(consumer: Consumer, count: int, timeout: float = 60.0) -> list[bytes]:
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    return seen


class Load:
    """An idempotent acks=all producer and a two-member consumer group, in threads."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.topic = topic
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.consumed: list[bytes] = []
        self.stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap(1),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60_000,
            }
        )
        self.threads = [threading.Thread(target=self._produce)]
        self.threads += [threading.Thread(target=self._consume, args=(cluster, i)) for i in (1, 3)]
        for thread in self.threads:
            thread.start()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed.append(str(error))

    def _produce(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, value=f"r{i}".encode(), on_delivery=self._delivered)
            i += 1
            self.producer.poll(0.002)
        self.producer.flush(60)

    def _consume(self, cluster: Cluster, node: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap(node),
                "group.id": f"{self.topic}-group",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([self.topic])
        idle_since = None
        while True:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.consumed.append(message.value())
                idle_since = None
            elif self.stop.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 5:
                    break
        consumer.close()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)


def _log(cluster: Cluster, topic: str, partitions: int) -> list[bytes]:
    """Every record of the topic, read from offset 0 of each partition."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(1), "group.id": "reader"})
    ends = [
        consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)
    ]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values = _drain(consumer, sum(ends))
    consumer.close()
    return values


def test_sigkill_a_broker_under_load_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    _create(cluster, "load", 6)
    node = cluster.settled("load")[0]
    node = node if node != 1 else 2  # the producer is bootstrapped to broker 1
    load = Load(cluster, "load")
    try:
        cluster.wait_for(lambda: len(load.consumed) > 500, "consuming")
        victim = cluster.brokers[node]
        victim.proc.kill()
        victim.proc.wait()
        took = cluster.wait_for(
            lambda: node not in cluster.settled("load").values(),
            "partitions of the killed broker moved",
        )
        assert took < SESSION_MS / 1000 + 5
        before = len(load.acked)
        cluster.wait_for(lambda: len(load.acked) > before + 500, "producing after the kill")
        victim.start()  # the same node id, address and options: it rejoins
        cluster.wait_for(
            lambda: node in cluster.leaders("load").values(), "the restarted broker leads"
        )
        before = len(load.acked)
        cluster.wait_for(lambda: len(load.acked) > before + 500, "producing after the return")
    finally:
        load.finish()
    assert not load.failed, load.failed[:5]
    log = _log(cluster, "load", 6)
    counts = Counter(log)
    assert not [v for v, n in counts.items() if n > 1], "duplicated in the log"
    assert set(load.acked) <= set(counts), "acknowledged records lost"
    assert set(load.consumed) >= set(load.acked), "the group did not go on"


def test_sigterm_hands_partitions_over_at_once(cluster: Cluster) -> None:
    _create(cluster, "handover", 24)
    cluster.settled("handover")
    before = {p: e for p, e in _epochs(cluster, "handover").items()}
    leaving = cluster.brokers[3]
    assert leaving.stop() == 0
    # Handed over before it exited: no wait for its session to time out.
    assert set(cluster.leaders("handover").values()) == {1, 2}
    cluster.wait_for(lambda: cluster.listed(1) == {1, 2}, "broker 3 gone from the list")
    after = _epochs(cluster, "handover")
    moved = [p for p in before if after[p] != before[p]]
    assert moved and all(after[p] == before[p] + 1 for p in moved)  # one new epoch per move
    leaving.start()
    cluster.wait_for(lambda: set(cluster.leaders("handover").values()) == set(NODES), "back")


def _epochs(cluster: Cluster, topic: str) -> dict[int, int]:
    with Connection(cluster.bootstrap()) as connection:
        [entry] = connection.request(metadata_request([topic], version=9)).topics
    return {p.partition_index: p.leader_epoch for p in entry.partitions}


def test_a_second_process_with_a_taken_node_id_is_told(cluster: Cluster, tmp_path: Path) -> None:
    twin = Broker(cluster.redis.url, tmp_path / "twin", ("--node-id", "1", *OPTIONS))
    try:
        cluster.wait_for(lambda: "is registered by a live broker" in twin.stderr(), "warning")
        # The registered broker 1 keeps its address in everyone's metadata.
        listed = {b.node_id: b.port for b in cluster.metadata(None, 2).brokers}
        assert listed[1] == cluster.brokers[1].port
    finally:
        twin.stop()


def test_group_coordinators_are_spread(cluster: Cluster) -> None:
    with Connection(cluster.bootstrap()) as connection:
        answer = connection.request(
            request(10, 4, key_type=0, coordinator_keys=tuple(f"g{i}" for i in range(30)))
        )
    nodes = {c.node_id for c in answer.coordinators}
    assert nodes == set(NODES)
    assert all(c.port == cluster.brokers[c.node_id].port for c in answer.coordinators)


def test_replica_assignments_pick_the_leader(cluster: Cluster) -> None:
    """A replica assignment at creation and a reassignment name a partition's preferred
    leader; it leads at once, a preferred election finds nothing to do; assignments of
    an unknown broker or of two brokers are refused."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import InvalidReplicationAssignmentError

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1))
    try:
        admin.create_topics([NewTopic("assigned", 3, replica_assignments={0: [3], 1: [1], 2: [2]})])
        cluster.wait_for(lambda: cluster.leaders("assigned") == {0: 3, 1: 1, 2: 2}, "assigned")
        epoch = _epochs(cluster, "assigned")[0]
        tp = KafkaTopicPartition("assigned", 0)
        results = admin.alter_partition_reassignments(
            {
                tp: [2],
                KafkaTopicPartition("assigned", 1): [9],
                KafkaTopicPartition("assigned", 2): [1, 2],
            }
        )
        assert results[tp] is None
        assert results[KafkaTopicPartition("assigned", 1)] is InvalidReplicationAssignmentError
        assert results[KafkaTopicPartition("assigned", 2)] is InvalidReplicationAssignmentError
        assert cluster.leaders("assigned")[0] == 2  # at once, with a new epoch
        assert _epochs(cluster, "assigned")[0] == epoch + 1
        # Every broker keeps it there: the preferred leader wins while it lives.
        time.sleep(1)
        assert cluster.settled("assigned") == {0: 2, 1: 1, 2: 2}
    finally:
        admin.close()


def test_brokers_started_without_a_node_id_get_one(cluster: Cluster, tmp_path: Path) -> None:
    """The first takes node id 0 if free, the next one an id from 1000 up; both serve."""
    first = Broker(cluster.redis.url, tmp_path / "a", OPTIONS, assign_node_id=True)
    second = Broker(cluster.redis.url, tmp_path / "b", OPTIONS, assign_node_id=True)
    try:
        cluster.wait_for(lambda: cluster.listed(1) == {0, 1, 2, 3, 1000}, "five brokers")
        assert "this broker is node 1000" in second.stderr()
        ports = {b.node_id: b.port for b in cluster.metadata(None).brokers}
        assert (ports[0], ports[1000]) == (first.port, second.port)
    finally:
        assert first.stop() == 0 and second.stop() == 0
    cluster.wait_for(lambda: cluster.listed(1) == set(NODES), "the two gone")


def test_replication_factor_up_to_the_brokers(cluster: Cluster) -> None:
    """Every broker serves the one copy in Redis: CreateTopics takes a replication factor
    up to the live brokers, and Metadata lists that many replicas, all in sync; a larger
    factor is refused with Kafka's error and message, as are 0 and below -1."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    futures = admin.create_topics(
        [NewTopic("rf3", 4, 3), NewTopic("rf2", 2, 2), NewTopic("rf4", 1, 4)],
        request_timeout=20,
    )
    futures["rf3"].result(20)
    futures["rf2"].result(20)
    with pytest.raises(KafkaException) as refused:
        futures["rf4"].result(20)
    error = refused.value.args[0]
    assert error.code() == ErrorCode.invalid_replication_factor.value
    assert "factor of 4 cannot be reached because only 3 broker(s)" in error.str()
    for topic, factor in (("rf3", 3), ("rf2", 2)):
        for node in NODES:  # every broker tells the same
            [entry] = cluster.metadata([topic], node).topics
            for p in entry.partitions:
                assert len(p.replica_nodes) == factor and p.replica_nodes[0] == p.leader_id
                assert set(p.replica_nodes) <= set(NODES)
                assert p.isr_nodes == p.replica_nodes
    described = admin.describe_topics(TopicCollection(["rf3"]))
    [description] = [f.result(20) for f in described.values()]
    assert all(len(p.replicas) == 3 and len(p.isr) == 3 for p in description.partitions)
    with Connection(cluster.bootstrap()) as conn:
        for factor in (0, -2):
            answer = conn.request(
                create_topics_request(
                    dict(name=f"rf-bad{-factor}", num_partitions=1, replication_factor=factor),
                    version=7,
                )
            )
            [result] = answer.topics
            assert result.error_code == ErrorCode.invalid_replication_factor
            assert "larger than 0, or -1" in result.error_message
