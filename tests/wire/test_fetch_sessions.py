"""Incremental fetch sessions (KIP-227) on a real server: raw Fetch requests that open,
continue and close sessions, the session errors, the slot limit and Kafka's eviction rule,
topic-id sessions and bad input; then real consumers (kafka-python sends incremental
fetches, librdkafka only sessionless ones), checked through the broker's metrics."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
import uuid
from typing import Any

import redis
import redis.asyncio
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from kafkaesque.errors import UnknownTopic
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.partition.read_types import Fetched
from kafkaesque.records.batch import decode_batch, is_control, read_header
from kafkaesque.records.build import build_batch
from kafkaesque.txn.transaction import TxnMarker
from tests.kafka_client import Connection, create_topics_request, request
from tests.servers import free_port
from tests.wire.common import TIMEOUT, produce_numbered, value_of, wait_until
from wire.fetch.sessions import FINAL_EPOCH, CachedPartition, FetchSessionCache, next_epoch

METRICS_PORT = free_port()
BROKER_ARGS = ("--metrics", f"127.0.0.1:{METRICS_PORT}")
BY_NAME, BY_ID = 12, 17  # Fetch versions: the newest naming topics by name; by id
READ_COMMITTED = 1
Answered = dict[tuple[Any, int], Any]  # (topic name or id, partition) -> PartitionData


def fetch(
    conn: Connection,
    session_id: int,
    epoch: int,
    topics: dict[Any, dict[int, int]] | None = None,
    forgotten: dict[Any, list[int]] | None = None,
    *,
    version: int = BY_NAME,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    isolation: int = 0,
) -> Any:
    """A Fetch of ``topics`` (topic -> partition -> fetch offset; topics by name, or by id
    from v13) in session ``session_id`` at ``epoch``, forgetting ``forgotten``."""
    field = "topic_id" if version >= 13 else "topic"
    return conn.request(
        request(
            1,
            version,
            max_wait=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=1 << 20,
            isolation_level=isolation,
            session_id=session_id,
            session_epoch=epoch,
            topics=[
                {
                    field: topic,
                    "partitions": [
                        {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20}
                        for p, o in offsets.items()
                    ],
                }
                for topic, offsets in (topics or {}).items()
            ],
            forgotten_topics_data=[
                {field: topic, "partitions": partitions}
                for topic, partitions in (forgotten or {}).items()
            ],
        )
    )


def answered(response: Any) -> Answered:
    """The partitions an answer names, by (topic name or id, partition); checks the answer
    names none twice."""
    out: Answered = {}
    for t in response.responses:
        topic = getattr(t, "topic", None) or t.topic_id
        for p in t.partitions:
            assert (topic, p.partition_index) not in out, response
            out[topic, p.partition_index] = p
    return out


def values(partition: Any) -> list[bytes | None]:
    """The values of the records a partition's answer carries (transaction markers left
    out)."""
    records, batches = partition.records or b"", []
    while records:
        length = read_header(records).length
        batches.append(records[:length])
        records = records[length:]
    return [r.value for b in batches if not is_control(b) for r in decode_batch(b)]


def create(conn: Connection, topic: str, partitions: int) -> uuid.UUID:
    """A topic of ``partitions``; its topic id."""
    entry = {"name": topic, "num_partitions": partitions, "replication_factor": 1}
    (created,) = conn.request(create_topics_request(entry)).topics
    assert created.error_code == ErrorCode.none
    metadata = request(
        3,
        12,
        topics=[{"name": topic, "topic_id": None}],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (described,) = conn.request(metadata).topics
    return described.topic_id


def produce(conn: Connection, topic: str, partition: int, *records: bytes) -> None:
    assert conn.produce(topic, partition, build_batch(list(records))).error_code == ErrorCode.none


def metric(name: str) -> float:
    """One sample of the broker's Prometheus metrics (0 if absent)."""
    url = f"http://127.0.0.1:{METRICS_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return 0.0


def opened(
    conn: Connection, topics: dict[Any, dict[int, int]], closing: int = 0, **options: Any
) -> tuple[int, Any]:
    """A full fetch of epoch 0 (closing session ``closing``): (the new session's id, the
    answer), which names every partition asked for."""
    response = fetch(conn, closing, 0, topics, **options)
    assert response.error_code == ErrorCode.none
    assert set(answered(response)) == {(t, p) for t, ps in topics.items() for p in ps}
    return response.session_id, response


# -- the session's life ---------------------------------------------------------------------


def test_full_fetch_of_epoch_0_opens_a_session_and_incremental_ones_answer_changes(
    broker, topic_name
):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 3)
        produce(conn, topic, 0, b"a", b"b")
        session, first = opened(conn, {topic: {0: 0, 1: 0, 2: 0}})
        assert session != 0
        assert values(answered(first)[topic, 0]) == [b"a", b"b"]
        # The client moves partition 0 on; nothing else changed: an empty answer.
        moved = fetch(conn, session, 1, {topic: {0: 2}})
        assert (moved.error_code, moved.session_id) == (ErrorCode.none, session)
        assert answered(moved) == {}
        # Records on partition 1: an incremental fetch naming no partition gets them alone.
        produce(conn, topic, 1, b"c")
        news = answered(fetch(conn, session, 2))
        assert list(news) == [(topic, 1)]
        assert values(news[topic, 1]) == [b"c"] and news[topic, 1].high_watermark == 1
        # The session still reads partition 1 from 0 until told otherwise: the same
        # records again (their offsets unchanged), as Kafka's sessions do.
        assert values(answered(fetch(conn, session, 3))[topic, 1]) == [b"c"]
        assert answered(fetch(conn, session, 4, {topic: {1: 1}})) == {}
        # A full fetch in the session closes it and opens another, answering everything.
        again, full = opened(conn, {topic: {0: 2, 1: 1, 2: 0}}, closing=session)
        assert again not in (0, session)
        assert fetch(conn, session, 5).error_code == ErrorCode.fetch_session_id_not_found
        assert all(p.records in (b"", None) for p in answered(full).values())


def test_high_watermark_last_stable_and_log_start_changes_are_answered(broker, topic_name):
    """A partition without new records is answered when its high watermark, last stable
    offset or log start offset moved: an open transaction moves the first, its commit the
    second (and brings the records), DeleteRecords the third (within the read cache's 5 s)."""
    topic = topic_name()
    pid = 7001
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 2)
        session, _ = opened(conn, {topic: {0: 0, 1: 0}}, isolation=READ_COMMITTED)

        async def open_transaction(parts: Partitions) -> None:
            batch = build_batch(
                [b"t"], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True
            )
            await parts.log.append(topic, 0, [batch])

        async def commit(parts: Partitions) -> None:
            assert await parts.write_markers([(topic, 0)], TxnMarker(pid, 0, commit=True)) == {
                (topic, 0): None
            }

        on_log(broker.redis_url, open_transaction)
        pending = answered(fetch(conn, session, 1, isolation=READ_COMMITTED))
        assert list(pending) == [(topic, 0)]
        p = pending[topic, 0]
        assert (p.high_watermark, p.last_stable_offset, values(p)) == (1, 0, [])
        assert answered(fetch(conn, session, 2, isolation=READ_COMMITTED)) == {}
        on_log(broker.redis_url, commit)
        committed = answered(fetch(conn, session, 3, isolation=READ_COMMITTED))[topic, 0]
        assert (committed.high_watermark, committed.last_stable_offset) == (2, 2)
        assert values(committed) == [b"t"]
        # The client moves on past the marker; then records are deleted below 2.
        assert answered(fetch(conn, session, 4, {topic: {0: 2}}, isolation=1)) == {}
        deleted = conn.request(
            request(
                21,
                2,
                topics=[{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                timeout=10_000,
            )
        )
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.none
        # DeleteRecords is not announced as appends are: the session's read cache (see
        # kafkaesque.partition.read_types.ReadCache) reads the quiet partition again within 5 s.
        epoch, deadline = 5, time.monotonic() + 10
        while not (moved := answered(fetch(conn, session, epoch, isolation=READ_COMMITTED))):
            assert time.monotonic() < deadline, "the log start change was never answered"
            epoch += 1
            time.sleep(0.2)
        assert list(moved) == [(topic, 0)]
        assert (moved[topic, 0].log_start_offset, values(moved[topic, 0])) == (2, [])


def on_log(redis_url: str, work: Any) -> None:
    """Run ``work(partitions)`` on the broker's Redis, as the transaction coordinator
    writes (transactional batches and markers a raw client cannot)."""

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await work(Partitions(Log(client)))
        finally:
            await client.aclose()

    asyncio.run(run())


def test_forgotten_partitions_leave_the_session(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 2)
        session, _ = opened(conn, {topic: {0: 0, 1: 0}})
        produce(conn, topic, 1, b"x")
        assert answered(fetch(conn, session, 1, forgotten={topic: [1]})) == {}
        produce(conn, topic, 0, b"y")
        assert list(answered(fetch(conn, session, 2))) == [(topic, 0)]
        # Forgetting the last partition closes the session: the answer says session 0.
        closing = fetch(conn, session, 3, forgotten={topic: [0]})
        assert (closing.error_code, closing.session_id, closing.responses) == (
            ErrorCode.none,
            0,
            (),
        )
        assert fetch(conn, session, 4).error_code == ErrorCode.fetch_session_id_not_found


def test_session_errors(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 1)
        unknown = fetch(conn, 12345, 1, {topic: {0: 0}})
        assert (unknown.error_code, unknown.session_id, unknown.responses) == (
            ErrorCode.fetch_session_id_not_found,
            0,
            (),
        )
        session, _ = opened(conn, {topic: {0: 0}})
        for wrong in (2, 7, 2**31 - 1):
            refused = fetch(conn, session, wrong)
            assert (refused.error_code, refused.responses) == (
                ErrorCode.invalid_fetch_session_epoch,
                (),
            )
        # The session is still there, at the epoch it expects.
        assert fetch(conn, session, 1).error_code == ErrorCode.none
        assert fetch(conn, session, 1).error_code == ErrorCode.invalid_fetch_session_epoch
        # A session by topic names is not continued by topic ids.
        mixed = fetch(conn, session, 2, version=BY_ID)
        assert mixed.error_code == ErrorCode.fetch_session_topic_id_error
        assert fetch(conn, session, 2).error_code == ErrorCode.none


def test_epoch_minus_one_closes_the_session(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 1)
        session, _ = opened(conn, {topic: {0: 0}})
        sessionless = fetch(conn, session, -1, {topic: {0: 0}})
        assert (sessionless.error_code, sessionless.session_id) == (ErrorCode.none, 0)
        assert list(answered(sessionless)) == [(topic, 0)]
        assert fetch(conn, session, 1).error_code == ErrorCode.fetch_session_id_not_found


def test_sessions_outlive_connections(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 1)
        session, _ = opened(conn, {topic: {0: 0}})
    with Connection(broker.bootstrap) as conn:
        produce(conn, topic, 0, b"later")
        news = answered(fetch(conn, session, 1))
        assert values(news[topic, 0]) == [b"later"]


def test_incremental_long_poll_waits_on_all_the_session_partitions(broker, topic_name):
    """The incremental fetch names no partition, yet a produce to any of the session's
    partitions ends its wait."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 4)
        session, _ = opened(conn, {topic: {p: 0 for p in range(4)}})
        timer = threading.Timer(0.5, lambda: produce_numbered(broker.bootstrap, topic, 4, 3, 1))
        started = time.monotonic()
        timer.start()
        try:
            woken = fetch(conn, session, 1, max_wait_ms=10_000, min_bytes=1)
        finally:
            timer.join()
        assert time.monotonic() - started < 5
        assert list(answered(woken)) == [(topic, 3)]
        assert values(answered(woken)[topic, 3]) == [value_of(3).encode()]


def test_metrics_count_sessions_and_their_partitions(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 5)
        sessions, partitions = (
            metric("kafkaesque_fetch_sessions"),
            metric("kafkaesque_fetch_session_partitions"),
        )
        incremental = metric("kafkaesque_incremental_fetches_total")
        session, _ = opened(conn, {topic: {p: 0 for p in range(5)}})
        assert metric("kafkaesque_fetch_sessions") == sessions + 1
        assert metric("kafkaesque_fetch_session_partitions") == partitions + 5
        fetch(conn, session, 1, forgotten={topic: [0, 1]})
        assert metric("kafkaesque_fetch_session_partitions") == partitions + 3
        assert metric("kafkaesque_incremental_fetches_total") == incremental + 1
        fetch(conn, session, -1)
        assert metric("kafkaesque_fetch_sessions") == sessions


# -- topic ids and bad input ----------------------------------------------------------------


def test_sessions_by_topic_id(broker, topic_name):
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        topic_id = create(conn, topic, 2)
        session, _ = opened(conn, {topic_id: {0: 0, 1: 0}}, version=BY_ID)
        assert session != 0
        produce(conn, topic, 1, b"by id")
        news = fetch(conn, session, 1, version=BY_ID)
        (entry,) = news.responses
        assert entry.topic_id == topic_id
        assert [p.partition_index for p in entry.partitions] == [1]
        assert values(entry.partitions[0]) == [b"by id"]
        assert answered(fetch(conn, session, 2, {topic_id: {1: 1}}, version=BY_ID)) == {}
        # Topic ids are forgotten by id.
        fetch(conn, session, 3, forgotten={topic_id: [1]}, version=BY_ID)
        produce(conn, topic, 1, b"unseen")
        assert answered(fetch(conn, session, 4, version=BY_ID)) == {}
        # A session by topic ids is not continued by names.
        by_name = fetch(conn, session, 5)
        assert by_name.error_code == ErrorCode.fetch_session_topic_id_error


def test_incremental_fetch_of_an_unknown_topic_id(broker, topic_name):
    """A topic id no topic has joins the session and is answered UNKNOWN_TOPIC_ID on every
    fetch (an error always is), beside the good partitions, until the client forgets it."""
    topic = topic_name()
    nowhere = uuid.uuid4()
    with Connection(broker.bootstrap) as conn:
        topic_id = create(conn, topic, 1)
        session, _ = opened(conn, {topic_id: {0: 0}}, version=BY_ID)
        for epoch in (1, 2):
            named = {nowhere: {0: 0}} if epoch == 1 else None
            response = fetch(conn, session, epoch, named, version=BY_ID)
            assert response.error_code == ErrorCode.none
            assert {k: p.error_code for k, p in answered(response).items()} == {
                (nowhere, 0): ErrorCode.unknown_topic_id
            }
        produce(conn, topic, 0, b"still served")
        response = fetch(conn, session, 3, forgotten={nowhere: [0]}, version=BY_ID)
        assert list(answered(response)) == [(topic_id, 0)]
        assert answered(fetch(conn, session, 4, {topic_id: {0: 1}}, version=BY_ID)) == {}


def test_forgetting_what_the_session_does_not_have(broker, topic_name):
    """Forgotten partitions the session does not have (another partition, another topic,
    an unknown topic id) are ignored, as Kafka ignores them."""
    topic, other = topic_name(), topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 2)
        create(conn, other, 1)
        session, _ = opened(conn, {topic: {0: 0}})
        response = fetch(conn, session, 1, forgotten={topic: [1, 5, -1], other: [0]})
        assert (response.error_code, response.session_id) == (ErrorCode.none, session)
        produce(conn, topic, 0, b"kept")
        assert list(answered(fetch(conn, session, 2))) == [(topic, 0)]
        topic_id = create(conn, topic_name(), 1)
        by_id, _ = opened(conn, {topic_id: {0: 0}}, version=BY_ID)
        response = fetch(conn, by_id, 1, forgotten={uuid.uuid4(): [0]}, version=BY_ID)
        assert (response.error_code, response.session_id) == (ErrorCode.none, by_id)


def test_unknown_partitions_and_unknown_topics_in_a_session(broker, topic_name):
    """Added partitions that do not exist are answered with their error each time."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 1)
        session, _ = opened(conn, {topic: {0: 0}})
        absent = topic_name("absent")
        response = fetch(conn, session, 1, {topic: {9: 0}, absent: {0: 0}})
        errors = {k: p.error_code for k, p in answered(response).items()}
        assert set(errors) == {(topic, 9), (absent, 0)}
        assert all(e != ErrorCode.none for e in errors.values()), errors
        again = {k: p.error_code for k, p in answered(fetch(conn, session, 2)).items()}
        assert again == errors


# -- the slot limit and eviction --------------------------------------------------------------


def test_a_full_cache_answers_session_0(broker_factory, topic_name):
    """With 2 slots, both taken by fresh sessions, a third full fetch of epoch 0 is
    answered in full, with session 0; the two go on."""
    small = broker_factory("--max-incremental-fetch-session-cache-slots", "2")
    topic = topic_name()
    with Connection(small.bootstrap) as conn:
        create(conn, topic, 2)
        first, _ = opened(conn, {topic: {0: 0}})
        second, _ = opened(conn, {topic: {0: 0, 1: 0}})
        third, _ = opened(conn, {topic: {0: 0, 1: 0}})
        assert first != 0 and second != 0 and third == 0
        assert fetch(conn, first, 1).error_code == ErrorCode.none
        assert fetch(conn, second, 1).error_code == ErrorCode.none


def test_no_slots_no_sessions(broker_factory, topic_name):
    none = broker_factory("--config", "max.incremental.fetch.session.cache.slots=0")
    topic = topic_name()
    with Connection(none.bootstrap) as conn:
        create(conn, topic, 1)
        assert opened(conn, {topic: {0: 0}})[0] == 0


def test_eviction_follows_kafkas_rule(broker_factory, topic_name):
    """One slot, sessions evictable after 1 s. A session idle that long gives way to any
    new one; one in use gives way only, once older than 1 s, to a session of more
    partitions; a fresh one to none."""
    one = broker_factory(
        "--max-incremental-fetch-session-cache-slots",
        "1",
        "--config",
        "min.incremental.fetch.session.eviction.ms=1000",
    )
    topic = topic_name()
    with Connection(one.bootstrap) as conn:
        create(conn, topic, 3)
        idle, _ = opened(conn, {topic: {0: 0, 1: 0, 2: 0}})
        assert idle != 0
        assert opened(conn, {topic: {0: 0}})[0] == 0  # fresh: not evicted
        time.sleep(1.2)
        small, _ = opened(conn, {topic: {0: 0}})  # the idle one gives way
        assert small != 0
        assert fetch(conn, idle, 1).error_code == ErrorCode.fetch_session_id_not_found
        epoch = 1
        deadline = time.monotonic() + 1.3
        while time.monotonic() < deadline:  # in use, so never idle past 1 s
            assert fetch(conn, small, epoch).error_code == ErrorCode.none
            epoch += 1
            assert opened(conn, {topic: {1: 0}})[0] == 0  # not larger
            time.sleep(0.2)
        bigger, _ = opened(conn, {topic: {0: 0, 1: 0}})  # more partitions: takes the slot
        assert bigger != 0
        assert fetch(conn, small, epoch).error_code == ErrorCode.fetch_session_id_not_found
        assert opened(conn, {topic: {0: 0, 1: 0, 2: 0}})[0] == 0  # bigger is fresh


# -- real clients ---------------------------------------------------------------------------


def consumed_with_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> dict:
    """Every record of the topic, read by a kafka-python consumer assigned all its
    partitions: partition -> values."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        max_partition_fetch_bytes=256,  # a batch per partition and fetch
        request_timeout_ms=int(TIMEOUT * 1000),
    )
    got: dict[int, list[str]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200, max_records=500).items():
                got[tp.partition] += [r.value.decode() for r in records]
    finally:
        consumer.close()
    return got


def expected(partitions: int, start: int, count: int) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for i in range(start, start + count):
        out[i % partitions].append(value_of(i))
    return out


def test_kafka_python_consumes_many_partitions_through_incremental_fetches(broker, topic_name):
    topic = topic_name()
    partitions, count = 24, 4800  # 10 batches a partition
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, partitions)
    produce_numbered(broker.bootstrap, topic, partitions, 0, count, batch=20)
    incremental = metric("kafkaesque_incremental_fetches_total")
    got = consumed_with_kafka_python(broker.bootstrap, topic, partitions, count)
    assert got == expected(partitions, 0, count)
    # It read through a session: incremental fetches, not only full ones.
    assert metric("kafkaesque_incremental_fetches_total") >= incremental + 9


def test_kafka_python_sees_records_produced_while_it_consumes(broker, topic_name):
    """Records arriving on some partitions of an idle session reach the consumer."""
    topic = topic_name()
    partitions = 8
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, partitions)
    produce_numbered(broker.bootstrap, topic, partitions, 0, 80)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        request_timeout_ms=int(TIMEOUT * 1000),
    )
    seen: list[str] = []
    try:
        consumer.assign([KafkaTopicPartition(topic, p) for p in range(partitions)])

        def poll_until(n: int) -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                seen.extend(r.value.decode() for r in records)
            return len(seen) >= n

        wait_until(lambda: poll_until(80), "the first 80 records")
        incremental = metric("kafkaesque_incremental_fetches_total")
        for start, count in ((80, 3), (83, 3), (86, 11)):  # on a few partitions at a time
            produce_numbered(broker.bootstrap, topic, partitions, start, count)
            wait_until(lambda n=start + count: poll_until(n), "the new records")
        assert metric("kafkaesque_incremental_fetches_total") > incremental
    finally:
        consumer.close()
    assert sorted(seen) == [value_of(i) for i in range(97)]


def evalsha_calls(redis_url: str) -> int:
    """Scripts Redis has run so far (every log read and append is one)."""
    client = redis.Redis.from_url(redis_url)
    try:
        stats = client.info("commandstats").get("cmdstat_evalsha", {})
        return stats.get("calls", 0) - stats.get("failed_calls", 0)
    finally:
        client.close()


def test_sessionless_fetches_on_a_connection_read_only_what_changed(broker, topic_name):
    """A client without sessions asks for every partition each time; the connection keeps
    what its last fetches read, so quiet partitions cost Redis nothing, and an append, a
    DeleteRecords or a topic deletion is still answered at once."""
    topic = topic_name()

    def poll(conn: Connection, topics: dict) -> Any:  # as clients fetch: a long poll
        return fetch(conn, 0, FINAL_EPOCH, topics, max_wait_ms=50, min_bytes=1)

    with Connection(broker.bootstrap) as conn:
        create(conn, topic, 20)
        produce(conn, topic, 3, b"a")
        offsets = dict.fromkeys(range(20), 0)
        first = answered(poll(conn, {topic: offsets}))
        assert values(first[topic, 3]) == [b"a"]
        offsets[3] = 1
        poll(conn, {topic: offsets})  # partition 3 at its new offset
        before = evalsha_calls(broker.redis_url)
        for _ in range(3):
            quiet = answered(poll(conn, {topic: offsets}))
            assert len(quiet) == 20 and quiet[topic, 3].high_watermark == 1
        assert evalsha_calls(broker.redis_url) == before  # nothing read
        with Connection(broker.bootstrap) as other:
            produce(other, topic, 7, b"b")
            wait_until(
                lambda: values(answered(poll(conn, {topic: offsets}))[topic, 7]) == [b"b"],
                what="the append on another connection",
            )
            on_log(broker.redis_url, lambda parts: parts.log.delete_records(topic, 3, 1))
            wait_until(
                lambda: answered(poll(conn, {topic: offsets}))[topic, 3].log_start_offset == 1,
                what="the DeleteRecords",
                timeout=3,  # well under the cache's 5 s refresh
            )
            on_log(broker.redis_url, lambda parts: parts.log.delete_topic(topic))
            wait_until(
                lambda: (
                    answered(poll(conn, {topic: offsets}))[topic, 0].error_code
                    == ErrorCode.unknown_topic_or_partition
                ),
                what="the deletion",
                timeout=3,
            )


def test_confluent_kafka_consumes_with_sessionless_fetches(broker, topic_name):
    """librdkafka sends every Fetch with session id 0 and epoch -1 (no KIP-227): it reads
    correctly from a broker keeping sessions, and opens none."""
    topic = topic_name()
    partitions, count = 12, 600
    with Connection(broker.bootstrap) as conn:
        create(conn, topic, partitions)
    produce_numbered(broker.bootstrap, topic, partitions, 0, count)
    sessions = metric("kafkaesque_fetch_sessions")
    incremental = metric("kafkaesque_incremental_fetches_total")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got: dict[int, list[str]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                assert message.error() is None, message.error()
                got[message.partition()].append(message.value().decode())
    finally:
        consumer.close()
    assert got == expected(partitions, 0, count)
    assert metric("kafkaesque_fetch_sessions") == sessions
    assert metric("kafkaesque_incremental_fetches_total") == incremental


# -- the cache itself, on a fake clock ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def cached(*partitions: int, topic: str = "t") -> list[CachedPartition]:
    return [CachedPartition(topic, p, 0, 1 << 20) for p in partitions]


def test_epochs_wrap_to_1():
    assert [next_epoch(e) for e in (0, 1, 2**31 - 2, 2**31 - 1, -1)] == [1, 2, 2**31 - 1, 1, -1]


def test_cache_eviction_rule():
    clock = Clock()
    cache = FetchSessionCache(slots=2, eviction_ms=1000, clock=clock)
    a = cache.create(False, cached(0, 1))
    b = cache.create(False, cached(0))
    assert 0 not in (a, b) and a != b and len(cache) == 2 and cache.partitions == 3
    assert cache.create(False, cached(0, 1, 2)) == 0  # both fresh
    clock.now = 1.5  # both settled, neither idle past 1 s after a touch
    cache.touch(cache.get(a))  # type: ignore[arg-type]
    cache.touch(cache.get(b))  # type: ignore[arg-type]
    assert cache.create(False, cached(5)) == 0  # not larger than the smallest (b)
    c = cache.create(False, cached(0, 1))  # larger than b: b goes
    assert c != 0 and cache.get(b) is None and cache.get(a) is not None
    assert cache.evictions == 1 and cache.refused == 2
    clock.now = 2.7  # a idle for 1.2 s: any new session takes its slot
    d = cache.create(False, cached(0))
    assert d != 0 and cache.get(a) is None and cache.get(c) is not None


def test_cache_without_slots():
    cache = FetchSessionCache(slots=0)
    assert cache.create(False, cached(0)) == 0 and len(cache) == 0


def test_a_partition_is_answered_when_it_changed_or_failed():
    p = cached(0)[0]
    assert p.answered(Fetched(high_watermark=3, log_start=0, last_stable=3))
    assert not p.answered(Fetched(high_watermark=3, log_start=0, last_stable=3))
    assert p.answered(Fetched(high_watermark=3, log_start=0, last_stable=3, batches=[b"x"]))
    assert p.answered(Fetched(high_watermark=3, log_start=1, last_stable=3))
    assert p.answered(Fetched(UnknownTopic("gone")))
    # After an error the offsets are named again, though unchanged.
    assert p.answered(Fetched(high_watermark=3, log_start=1, last_stable=3))
    assert p.answered(Fetched(high_watermark=3, log_start=1, last_stable=3, diverging_epoch=(0, 2)))


def test_a_session_gone_closes_its_read_cache():
    """A session removed, evicted or refused a slot, or the cache closed at shutdown, ends
    its read cache's watch for appends."""

    class Watch:
        closed = 0

        def close(self) -> None:
            self.closed += 1

    clock = Clock()
    caches: list[Watch] = []

    def new() -> Any:
        caches.append(Watch())
        return caches[-1]

    cache = FetchSessionCache(slots=1, eviction_ms=1000, clock=clock, read_cache=new)
    a = cache.create(False, cached(0))
    refused = Watch()
    assert cache.create(False, cached(0), refused) == 0 and refused.closed == 1  # type: ignore[arg-type]
    clock.now = 2.0
    b = cache.create(False, cached(0))  # a evicted
    assert caches[0].closed == 1 and caches[1].closed == 0
    cache.remove(b)
    assert caches[1].closed == 1 and len(cache) == 0 and a != b
    cache.create(False, cached(0))
    cache.close()
    assert caches[2].closed == 1 and len(cache) == 0


def during(poll: Any, action: Any) -> None:
    """``poll()`` (a long poll) in a thread, and ``action()`` while it waits."""
    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.4)
    action()
    thread.join()


def test_a_partition_forgotten_while_it_grew_is_answered_with_its_records(broker, topic_name):
    """An append heard while a session's long poll waits on another partition is not
    read by that poll; the partition, asked again, is read, not answered from the
    session's cache as it was before."""
    topic = topic_name()
    with Connection(broker.bootstrap) as conn, Connection(broker.bootstrap) as other:
        create(other, topic, 2)
        session, _ = opened(conn, {topic: {0: 0, 1: 0}}, max_wait_ms=100, min_bytes=1)
        during(
            lambda: fetch(conn, session, 1, {}, {topic: [1]}, max_wait_ms=1500, min_bytes=1),
            lambda: produce(other, topic, 1, b"x"),
        )
        got = answered(fetch(conn, session, 2, {topic: {1: 0}}, max_wait_ms=500, min_bytes=1))
        assert (got[topic, 1].high_watermark, values(got[topic, 1])) == (1, [b"x"])
