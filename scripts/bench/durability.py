"""What a producer pays for durability and for idempotence, through the broker, in one
run: acks=1, acks=all, acks=all with enable.idempotence and acks=all with idempotence's
limit of 5 requests in flight but no idempotence, over P partitions, on the
embedded server's settings (Valkey, AOF, appendfsync always: Redis answers a write once
it is fsynced, so acks=all waits for nothing more) and on appendfsync everysec (acks=all
then waits for WAITAOF). Per row: records/s, the ratio to acks=all (the goal of
idempotence: >= 0.85) and to acks=1, and the CPU seconds per million records of the
broker, Redis and the client (/proc). Then the same producers against librdkafka's
in-memory mock cluster (no broker, no Redis): the client's own ceiling on this machine;
and the median round trip of one durable write (a SET under appendfsync always), the
least any request that writes waits for.

    python scripts/bench/durability.py [--records N] [--partitions P] [--everysec|--no-everysec]
"""

from __future__ import annotations

import argparse
import os

from broker_process import VALUE, durable_write_ms, embedded_broker, produce
from confluent_kafka.admin import AdminClient, NewTopic
from proc_cpu import measure

FIVE_IN_FLIGHT = {"max.in.flight.requests.per.connection": 5}
MODES: dict[str, tuple[str, bool, dict[str, object]]] = {  # name: acks, idempotent, config
    "acks=1": ("1", False, {}),
    "acks=all": ("all", False, {}),
    "acks=all, idempotent": ("all", True, {}),
    # Idempotence allows at most 5 requests in flight per connection: the same limit
    # without idempotence tells the limit's cost from the sequence checks'.
    "acks=all, 5 in flight": ("all", False, FIVE_IN_FLIGHT),
}


def run(records: int, partitions: int, appendfsync: str | None) -> list[str]:
    """The three producers through a broker on a fresh Redis; the rows to print."""
    rows = []
    with embedded_broker(appendfsync) as running:
        bootstrap = running.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = ["warm-up", *(f"t{i}" for i in range(len(MODES)))]  # a fresh one each
        for future in admin.create_topics([NewTopic(t, partitions) for t in topics]).values():
            future.result(30)
        produce(bootstrap, "warm-up", 10_000, partitions, acks="all", idempotent=True)
        seconds, cpu = {}, {}
        for i, (name, (acks, idempotent, config)) in enumerate(MODES.items()):
            with measure(running.pids()) as phase:
                seconds[name] = produce(
                    bootstrap, f"t{i}", records, partitions, acks, idempotent, config
                )
            cpu[name] = phase
        write_ms = durable_write_ms(running.redis_url)
    for name, s in seconds.items():
        rows.append(
            f"  {name + ':':<24}{records / s:>10,.0f} records/s"
            f"   {seconds['acks=all'] / s:.2f} of acks=all   {seconds['acks=1'] / s:.2f} of acks=1"
            f"   {cpu[name].line(records)}"
        )
    rows.append(f"  one durable write (SET) on this Redis: median {write_ms:.2f} ms")
    return rows


def ceiling(records: int, partitions: int) -> list[str]:
    """The same producers against librdkafka's mock cluster: what the client reaches when
    the broker and the storage cost nothing."""
    rows = []
    for name, (acks, idempotent, config) in MODES.items():
        with measure({"client": None}) as phase:
            mock = {"test.mock.num.brokers": 1, **config}
            seconds = produce("", "mock", records, partitions, acks, idempotent, mock)
        rows.append(
            f"  {name + ':':<24}{records / seconds:>10,.0f} records/s   {phase.line(records)}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--everysec", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    n, p = args.records, args.partitions
    print(f"{n} records of {len(VALUE)} bytes over {p} partitions (cpus: {os.cpu_count()})")
    print("appendfsync always (the embedded server's):")
    print("\n".join(run(n, p, None)))
    if args.everysec:
        print("appendfsync everysec (acks=all waits for WAITAOF):")
        print("\n".join(run(n, p, "everysec")))
    print("librdkafka's mock cluster (the client's ceiling):")
    print("\n".join(ceiling(n, p)))


if __name__ == "__main__":
    main()
