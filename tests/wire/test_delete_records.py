"""DeleteRecords over the wire (confluent-kafka's AdminClient and raw requests of every
version) and ``kafkaesque delete-records``: the new log start is what ListOffsets, Fetch
and ``describe`` report, and bad input is refused per partition."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kafkaesque.records.build import build_batch
from tests.kafka_client import Connection, request

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException, TopicPartition

from tests.wire.clients.confluent import Confluent
from tests.wire.common import TIMEOUT

EARLIEST = -2
NO_WATERMARK = -1


def topic_with_records(broker, topic: str, counts: list[int]) -> None:
    """A topic with ``counts[p]`` records in partition p, one batch each."""
    with Connection(broker.bootstrap) as conn:
        assert conn.create_topic(topic, len(counts)).error_code == ErrorCode.none
        for p, n in enumerate(counts):
            records = build_batch([b"r%d" % i for i in range(n)])
            assert conn.produce(topic, p, records).error_code == ErrorCode.none


def delete_records(conn: Connection, version: int, wanted: dict[str, dict[int, int]]) -> dict:
    """(topic, partition) -> (error code, low watermark) of one DeleteRecords request."""
    req = request(
        21,
        version,
        timeout=10_000,
        topics=[
            {"name": t, "partitions": [{"partition_index": p, "offset": o} for p, o in ps.items()]}
            for t, ps in wanted.items()
        ],
    )
    return {
        (t.name, p.partition_index): (p.error_code, p.low_watermark)
        for t in conn.request(req).topics
        for p in t.partitions
    }


def test_admin_client_deletes_and_reads_see_the_new_start(broker, topic_name):
    topic = topic_name()
    topic_with_records(broker, topic, [10, 6])
    admin, logs = Confluent(broker).admin()
    futures = admin.delete_records(
        [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, -1)], request_timeout=TIMEOUT
    )
    low = {tp.partition: f.result(timeout=TIMEOUT).low_watermark for tp, f in futures.items()}
    assert low == {0: 4, 1: 6}, f"log:\n{logs}"

    with Connection(broker.bootstrap) as conn:
        assert conn.list_offset(topic, 0, EARLIEST).offset == 4
        assert conn.list_offset(topic, 1, EARLIEST).offset == 6
        below = conn.fetch(topic, 0, 3)
        assert below.error_code == ErrorCode.offset_out_of_range
        assert (below.log_start_offset, below.high_watermark) == (4, 10)
        assert not below.records
        at = conn.fetch(topic, 0, 4)
        assert at.error_code == ErrorCode.none and at.log_start_offset == 4 and at.records

    # Past the end: refused, and the partition is as it was.
    futures = admin.delete_records([TopicPartition(topic, 0, 11)], request_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        next(iter(futures.values())).result(timeout=TIMEOUT)
    assert refused.value.args[0].code() == ErrorCode.offset_out_of_range
    with Connection(broker.bootstrap) as conn:
        assert conn.list_offset(topic, 0, EARLIEST).offset == 4


@pytest.mark.parametrize("version", [0, 1, 2])
def test_each_partition_gets_its_own_answer(broker, topic_name, version):
    topic, missing = topic_name(), topic_name("missing")
    topic_with_records(broker, topic, [10, 10, 10, 10])
    with Connection(broker.bootstrap) as conn:
        versions = {
            k.api_key: (k.min_version, k.max_version) for k in conn.api_versions(3).api_keys
        }
        assert versions[21] == (0, 2)
        answers = delete_records(
            conn,
            version,
            {
                topic: {0: 5, 1: 11, 2: -2, 3: -1, 7: 1},
                missing: {0: 1},
            },
        )
        assert answers == {
            (topic, 0): (ErrorCode.none, 5),
            (topic, 1): (ErrorCode.offset_out_of_range, NO_WATERMARK),
            (topic, 2): (ErrorCode.offset_out_of_range, NO_WATERMARK),
            (topic, 3): (ErrorCode.none, 10),
            (topic, 7): (ErrorCode.unknown_topic_or_partition, NO_WATERMARK),
            (missing, 0): (ErrorCode.unknown_topic_or_partition, NO_WATERMARK),
        }
        # A lower offset changes nothing and answers the current start, as Kafka.
        again = delete_records(conn, version, {topic: {0: 2, 1: 10}})
        assert again == {(topic, 0): (ErrorCode.none, 5), (topic, 1): (ErrorCode.none, 10)}
        starts = [conn.list_offset(topic, p, EARLIEST).offset for p in range(4)]
        assert starts == [5, 10, 0, 10]


def test_cli_delete_records(broker, topic_name):
    topic = topic_name()
    topic_with_records(broker, topic, [10, 6])
    done = broker.cli("delete-records", topic, "--partition", "0", "--before", "3")
    assert done.stderr.decode() == f"{topic}[0]: log start 0 -> 3\n"
    described = broker.cli("describe", topic).stdout.decode()
    table = [line.split() for line in described.splitlines() if line.strip()[:1].isdigit()]
    assert [(row[0], row[1], row[2]) for row in table] == [("0", "3", "10"), ("1", "0", "6")]

    # Every partition up to its end; then one already past the asked-for start stays.
    done = broker.cli("delete-records", topic, "--before", "end")
    assert done.stderr.decode().splitlines() == [
        f"{topic}[0]: log start 3 -> 10",
        f"{topic}[1]: log start 0 -> 6",
    ]
    done = broker.cli("delete-records", topic, "--before", "2", "--partition", "1")
    assert done.stderr.decode() == f"{topic}[1]: log start 6 -> 6\n"

    def refused(*args: str) -> tuple[int, list[str]]:
        result = broker.cli("delete-records", *args, check=False)
        return result.returncode, result.stderr.decode().splitlines()

    code, lines = refused(topic, "--before", "11", "--partition", "0")
    assert code == 1 and len(lines) == 1 and "ends at 10); nothing was deleted" in lines[0], lines
    code, lines = refused(topic_name("missing"), "--before", "1")
    assert code == 1 and len(lines) == 1 and "no such topic" in lines[0], lines
    code, lines = refused(topic, "--before", "1", "--partition", "2")
    assert code == 2 and len(lines) == 1 and "has 2 partitions" in lines[0], lines
    for bad in ("-2", "soon"):
        code, lines = refused(topic, "--before", bad)
        assert code == 2 and len(lines) == 1 and "--before" in lines[0], lines
    with Connection(broker.bootstrap) as conn:
        assert [conn.list_offset(topic, p, EARLIEST).offset for p in (0, 1)] == [10, 6]
