"""acks=all against acks=1 through the broker, in the same run on the embedded server
(Valkey, AOF, appendfsync everysec): acks=all waits for WAITAOF (the append fsynced), so
the ratio is what durability on disk costs a producer.

    python scripts/bench/durability.py [--records N] [--partitions P]
"""

from __future__ import annotations

import argparse
import os

from broker_process import VALUE, broker_on_embedded_redis, produce
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    n, p = args.records, args.partitions
    with broker_on_embedded_redis() as (bootstrap, _):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = ["warm-up", "acks-1", "acks-all", "idem"]
        for future in admin.create_topics([NewTopic(t, p) for t in topics]).values():
            future.result(30)
        produce(bootstrap, "warm-up", 10_000, p)
        runs = {
            "acks=1": produce(bootstrap, "acks-1", n, p),
            "acks=all": produce(bootstrap, "acks-all", n, p, acks="all"),
            "acks=all, idempotent": produce(bootstrap, "idem", n, p, "all", idempotent=True),
        }
    print(f"{n} records of {len(VALUE)} bytes over {p} partitions (cpus: {os.cpu_count()})")
    for name, seconds in runs.items():
        ratio = runs["acks=1"] / seconds
        print(f"{name + ':':<24}{n / seconds:>10,.0f} records/s   {ratio:.2f} of acks=1")


if __name__ == "__main__":
    main()
