"""A consume-transform-produce processor (confluent-kafka), run as a subprocess by
tests/wire/test_transactions.py: reads SOURCE in GROUP, writes each value + "!" to SINK
in transactions of up to 20 records, with the consumed offsets sent to each transaction.

With TXN_STALL_AFTER=N it commits N transactions, then opens one more, produces into it,
prints "stalled" and waits to be killed. It exits once it holds every partition of SOURCE
and has read each to its end (a run started after a killed one first waits out the dead
member's session timeout in the group's rebalance), or after 120 s."""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

TIMEOUT = 30.0


def read_to_end(consumer: Consumer, partitions: int) -> bool:
    """Whether the consumer holds all ``partitions`` and its position is at each one's end."""
    assigned = consumer.assignment()
    if len(assigned) < partitions:
        return False
    for tp in consumer.position(assigned):
        _, high = consumer.get_watermark_offsets(tp, TIMEOUT)
        if tp.offset < 0 or tp.offset < high:
            return False
    return True


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    stall_after = int(os.environ.get("TXN_STALL_AFTER", "-1"))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 3000,  # a killed run's member leaves the group sooner
        }
    )
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT)
    partitions = len(consumer.list_topics(source, TIMEOUT).topics[source].partitions)
    done = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        batch = consumer.consume(20, 0.5)
        batch = [m for m in batch if not m.error()]
        if not batch:
            if read_to_end(consumer, partitions):
                break
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, m.value() + b"!", partition=m.partition())
        if done == stall_after:
            producer.flush(TIMEOUT)
            print("stalled", flush=True)
            time.sleep(3600)
        positions = {}
        for m in batch:
            positions[m.partition()] = m.offset() + 1
        offsets = [TopicPartition(source, p, o) for p, o in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        done += 1
    consumer.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
