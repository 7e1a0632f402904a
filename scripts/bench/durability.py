"""What a producer pays for durability and for idempotence, through the broker, in one
run: acks=1, acks=all, acks=all with enable.idempotence and acks=all with idempotence's
limit of 5 requests in flight but no idempotence, over P partitions, on the
embedded server's settings (Valkey, AOF, appendfsync always: Redis answers a write once
it is fsynced, so acks=all waits for nothing more) and on appendfsync everysec (acks=all
then waits for WAITAOF). Each producer runs --rounds times, the four taking turns on
fresh topics; per producer: the median records/s of its rounds and their range, its
ratio to acks=all and to acks=1 within each round (the goal of idempotence: >= 0.85 x
acks=all), as median and range, and the CPU seconds per million records of the broker,
Redis and the client (/proc), with the broker's against Redis' per round. Then the same
producers against librdkafka's in-memory mock cluster (no broker, no Redis): the client's
own ceiling on this machine; and the median round trip of one durable write (a SET under
appendfsync always), the least any request that writes waits for.

    python scripts/bench/durability.py [--records N] [--partitions P] [--rounds R]
                                       [--everysec|--no-everysec]
"""

from __future__ import annotations

import argparse
import os
import statistics

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


def spread(values: list[float], digits: str) -> str:
    """ "median (min-max)" of ``values`` with the format ``digits``."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:{digits}} ({low:{digits}}-{high:{digits}})"


def run(records: int, partitions: int, appendfsync: str | None, rounds: int) -> list[str]:
    """The producers through a broker on a fresh Redis, ``rounds`` times, taking turns
    (each round starts one mode later, so none is always first after a pause); the rows
    to print: per mode the median of its rounds with their range, and the ratios taken
    within each round (the load of this machine moves between rounds, less within one)."""
    rows = []
    names = list(MODES)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with embedded_broker(appendfsync) as running:
        bootstrap = running.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = ["warm-up", *(f"t{i}-{r}" for r in range(rounds) for i in range(len(names)))]
        for future in admin.create_topics([NewTopic(t, partitions) for t in topics]).values():
            future.result(30)
        produce(bootstrap, "warm-up", 10_000, partitions, acks="all", idempotent=True)
        for r in range(rounds):
            for k in range(len(names)):
                i = (r + k) % len(names)
                name = names[i]
                acks, idempotent, config = MODES[name]
                with measure(running.pids()) as phase:
                    seconds[name].append(
                        produce(
                            bootstrap, f"t{i}-{r}", records, partitions, acks, idempotent, config
                        )
                    )
                cpu[name].append(phase.per_million(records))
        write_ms = durable_write_ms(running.redis_url)
    for name in names:
        rates = [records / s for s in seconds[name]]
        to_all = [a / s for a, s in zip(seconds["acks=all"], seconds[name], strict=True)]
        to_one = [a / s for a, s in zip(seconds["acks=1"], seconds[name], strict=True)]
        used = "  ".join(
            f"{who} {statistics.median(c[who] for c in cpu[name]):.2f}" for who in cpu[name][0]
        )
        broker_to_redis = [c["broker"] / c["redis"] for c in cpu[name] if c["redis"]]
        rows.append(
            f"  {name + ':':<24}{spread(rates, ',.0f')} records/s"
            f"   {spread(to_all, '.2f')} of acks=all   {spread(to_one, '.2f')} of acks=1"
        )
        rows.append(
            f"  {'':<24}{used} s of CPU per million records (medians);"
            f" broker / redis {spread(broker_to_redis, '.2f')}"
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
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--everysec", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    n, p, r = args.records, args.partitions, args.rounds
    print(
        f"{n} records of {len(VALUE)} bytes over {p} partitions, {r} rounds of each producer"
        f" taking turns; median (min-max) of the rounds (cpus: {os.cpu_count()})"
    )
    print("appendfsync always (the embedded server's):")
    print("\n".join(run(n, p, None, r)))
    if args.everysec:
        print("appendfsync everysec (acks=all waits for WAITAOF):")
        print("\n".join(run(n, p, "everysec", r)))
    print("librdkafka's mock cluster (the client's ceiling):")
    print("\n".join(ceiling(n, p)))


if __name__ == "__main__":
    main()
