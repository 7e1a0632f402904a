"""acks=all survives a power cut on the embedded server (tests/power/power_cut.py).

Idempotent acks=all producers write through a real broker while every AOF fsync of the
embedded Valkey takes 50 ms (a slow disk); then the power goes: the server is killed and
its AOF cut back to what its fsyncs covered. Started again, it must hold every record a
producer was told was written, at the offset it was told. Under appendfsync everysec
Valkey answers WAITAOF before the fsync it waits for is done, and this lost acknowledged
records; the embedded server runs with appendfsync always."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.power.power_cut import PowerCutServer, build_shim
from tests.wire.conftest import Broker

TOPIC = "power"
PARTITIONS = 2


def produce(bootstrap: str, seconds: float, acks: str) -> dict[tuple[int, int], bytes]:
    """Records acknowledged in ``seconds`` of producing: (partition, offset) -> value."""
    acked: dict[tuple[int, int], bytes] = {}

    def delivered(error: object, message: object) -> None:
        if error is None:
            acked[(message.partition(), message.offset())] = message.value()  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 2,
        }
    )
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        try:
            producer.produce(
                TOPIC, f"record {i}".encode(), partition=i % PARTITIONS, on_delivery=delivered
            )
            i += 1
        except BufferError:
            pass
        producer.poll(0.001)
    # The power goes while records are still in flight: only what was answered counts.
    producer.poll(0)
    return acked


def read_all(bootstrap: str) -> dict[tuple[int, int], bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=20)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while any(sum(1 for (p, _) in found if p == q) < ends[q] for q in ends):
        assert time.monotonic() < deadline, "could not read the log back"
        for message in consumer.consume(10_000, 0.5):
            assert message.error() is None, message.error()
            found[(message.partition(), message.offset())] = message.value()
    consumer.close()
    return found


def test_acks_all_loses_nothing_acknowledged_in_a_power_cut(tmp_path: Path) -> None:
    server = PowerCutServer(tmp_path / "home", build_shim(tmp_path), fsync_delay_ms=50)
    url = server.start()
    try:
        broker = Broker(url, tmp_path / "broker")
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(20)
            acked = produce(broker.bootstrap, seconds=4, acks="all")
        finally:
            broker.proc.kill()  # the power goes for the broker too
            broker.proc.wait()
        dropped = server.cut_power()
        server.restart()
        broker = Broker(url, tmp_path / "after")
        try:
            found = read_all(broker.bootstrap)
        finally:
            broker.stop()
    finally:
        server.stop()
    assert len(acked) > 100, f"too few records acknowledged to tell: {len(acked)}"
    lost = {key: value for key, value in acked.items() if found.get(key) != value}
    assert not lost, (
        f"{len(lost)} of {len(acked)} acknowledged records lost or changed by the power cut "
        f"(AOF bytes dropped: {dropped}); first: {sorted(lost)[:5]}"
    )
