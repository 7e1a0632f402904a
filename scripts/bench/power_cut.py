"""acks=1 and acks=all through a power cut of the embedded Valkey, with their throughput
in the same run (tests/power/power_cut.py simulates the cut: the server runs under an
fsync recorder, is killed, and its AOF is cut back to what its fsyncs covered).

    python scripts/bench/power_cut.py [--seconds 5] [--appendfsync always|everysec]
                                      [--fsync-delay-ms 0]

For each of acks=1 and acks=all (idempotent): a fresh embedded server and broker, a
producer flat out for --seconds, the power cut while records are still in flight, then
the log read back. Prints records/s while producing, acknowledged records and how many
of them the cut lost. --appendfsync everysec sets the server back to what it ran before
(CONFIG SET after start) to show what that lost.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.power.power_cut import PowerCutServer, build_shim
from tests.power.test_power_cut import PARTITIONS, TOPIC, read_all
from tests.wire.conftest import Broker


def produce(bootstrap: str, seconds: float, acks: str) -> tuple[dict, float]:
    """Records acknowledged while a producer sends flat out for ``seconds``: (partition,
    offset) -> value, and the records/s acknowledged."""
    acked: dict[tuple[int, int], bytes] = {}

    def delivered(error: object, message: object) -> None:
        if error is None:
            acked[(message.partition(), message.offset())] = message.value()  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
        }
    )
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < seconds:
        try:
            value = b"%d-" % i + b"v" * 100
            producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.poll(0)
    return acked, len(acked) / (time.monotonic() - started)


def one_run(
    directory: Path, shim: Path, acks: str, args: argparse.Namespace
) -> tuple[float, int, int]:
    """(records/s, acknowledged, acknowledged and lost) of one producer through a cut."""
    server = PowerCutServer(directory / "home", shim, fsync_delay_ms=args.fsync_delay_ms)
    url = server.start()
    try:
        if args.appendfsync != "always":
            redis.Redis(unix_socket_path=str(server.embedded.socket)).config_set(
                "appendfsync", args.appendfsync
            )
        broker = Broker(url, directory / "broker")
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)
            acked, rate = produce(broker.bootstrap, args.seconds, acks)
        finally:
            broker.proc.kill()
            broker.proc.wait()
        server.cut_power()
        server.restart()
        broker = Broker(url, directory / "after")
        try:
            found = read_all(broker.bootstrap)
        finally:
            broker.stop()
    finally:
        server.stop()
    lost = sum(1 for key, value in acked.items() if found.get(key) != value)
    return rate, len(acked), lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--appendfsync", choices=["always", "everysec"], default="always")
    parser.add_argument("--fsync-delay-ms", type=int, default=0, help="a slower disk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ks-power-") as tmp:
        shim = build_shim(Path(tmp))
        results = {
            acks: one_run(Path(tmp) / f"acks-{acks}", shim, acks, args) for acks in ("1", "all")
        }
    print(
        f"appendfsync {args.appendfsync}, fsync delay {args.fsync_delay_ms} ms "
        f"(cpus: {os.cpu_count()})"
    )
    base = results["1"][0]
    for acks, (rate, acked, lost) in results.items():
        name = f"acks={acks}" + (", idempotent" if acks == "all" else "")
        print(
            f"{name + ':':<22}{rate:>10,.0f} records/s  {rate / base:.2f} of acks=1   "
            f"{acked:>9,} acknowledged, {lost:,} lost in the power cut"
        )


if __name__ == "__main__":
    main()
