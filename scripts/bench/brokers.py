"""Produce throughput with 1, 2 and 3 brokers on one Redis and with 3 brokers on a
3-shard Redis Cluster, in one run, and what each process spends: CPU seconds per million
records of every broker, of the Redis servers and of the client.

Starts a private redis-server (and a local 3-primary cluster); for each row, starts that
many `kafkaesque serve` (node ids 1..N), creates a topic of 12 partitions (its leaders
spread over the brokers) and produces N records of 100 bytes with confluent-kafka
bootstrapped to broker 1 (acks=1, linger 5 ms); then stops the brokers. On a machine with
fewer cores than processes this shows the cost per record rather than a speed-up, and the
figures say where the CPU goes.

    python scripts/bench/brokers.py [--records N] [--brokers 1,2,3] [--no-cluster]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from broker_process import free_port, produce, start_broker
from confluent_kafka.admin import AdminClient, NewTopic
from proc_cpu import cpu_seconds, self_cpu

from kafkaesque.hot.embedded import EmbeddedRedis

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' cluster fixture
from tests.cluster_servers import ClusterServers

PARTITIONS = 12


def redis_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def leaders_spread(bootstrap: str, topic: str, brokers: int) -> None:
    """Wait until the topic's leaders are on every broker (the hash spreads 12 over 3)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=5).topics[topic].partitions
        if len(found) == PARTITIONS and len({p.leader for p in found.values()}) == brokers:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the leaders of {topic} did not spread over {brokers} brokers")


def run(url: str, redis_pids: list[int], brokers: int, records: int) -> dict[str, float]:
    ports = [free_port() for _ in range(brokers)]
    procs = [
        start_broker(url, port, extra=("--node-id", str(node)))
        for node, port in enumerate(ports, start=1)
    ]
    bootstrap = f"127.0.0.1:{ports[0]}"
    topic = f"brokers-{brokers}"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
        leaders_spread(bootstrap, topic, brokers)
        produce(bootstrap, "warm-up", 20_000)
        before = [cpu_seconds(p.pid) for p in procs], redis_cpu(redis_pids), self_cpu()
        seconds = produce(bootstrap, topic, records, partitions=PARTITIONS)
        after = [cpu_seconds(p.pid) for p in procs], redis_cpu(redis_pids), self_cpu()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)
    per_million = 1e6 / records
    return {
        "rate": records / seconds,
        "brokers": sum(a - b for a, b in zip(after[0], before[0], strict=True)) * per_million,
        "busiest": max(a - b for a, b in zip(after[0], before[0], strict=True)) * per_million,
        "redis": (after[1] - before[1]) * per_million,
        "client": (after[2] - before[2]) * per_million,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--brokers", default="1,2,3")
    parser.add_argument("--no-cluster", action="store_true", help="skip the cluster row")
    args = parser.parse_args()
    counts = [int(n) for n in args.brokers.split(",")]
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="ks-bench-") as home:
        server = EmbeddedRedis(Path(home))
        try:
            url = server.ensure_started()
            pids = [int(server.pidfile.read_text())]
            for n in counts:
                results[f"{n}"] = run(url, pids, n, args.records)
        finally:
            server.stop()
        if not args.no_cluster:
            cluster = ClusterServers(Path(home) / "cluster")
            try:
                pids = cluster.pids()
                results["3 cluster"] = run(cluster.cluster_url, pids, 3, args.records)
            finally:
                cluster.stop()
    base = results[str(counts[0])]["rate"]
    print(f"{args.records:,} records of 100 B over {PARTITIONS} partitions, acks=1, one producer")
    print("CPU seconds per million records: all brokers, the busiest one, Redis, the client")
    heads = ("brokers", 9), ("records/s", 10), ("ratio", 6), ("brokers", 8), ("busiest", 8)
    heads += ("redis", 6), ("client", 7)
    print(" ".join(f"{name:>{width}}" for name, width in heads))
    for n, r in results.items():
        print(
            f"{n:>9} {r['rate']:>10,.0f} {r['rate'] / base:>6.2f} {r['brokers']:>8.2f} "
            f"{r['busiest']:>8.2f} {r['redis']:>6.2f} {r['client']:>7.2f}"
        )


if __name__ == "__main__":
    main()
