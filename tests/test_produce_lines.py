"""`produce` streams lines as they arrive and spreads keyless records over the partitions."""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis.asyncio
from click.testing import CliRunner, Result

from kafkaesque.cli import main
from kafkaesque.cli.line_producer import LineProducer, iter_line_chunks
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.records.partitioner import partition_for_key


@pytest.fixture
def ks(redis_url: str):
    """Run a CLI command in-process against the test Redis; returns click's Result."""
    runner = CliRunner()

    def invoke(*args: str, input: bytes | None = None) -> Result:
        result = runner.invoke(main, ["--redis-url", redis_url, *args], input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    return invoke


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A private data directory for CLI processes; its embedded server is stopped after."""
    home = tmp_path / "ks"
    yield home
    subprocess.run([sys.executable, "-m", "kafkaesque", "--home", str(home), "stop"], check=False)


def records(ks, topic: str) -> list[dict]:
    out = ks("consume", topic, "--format", "json").stdout
    return [json.loads(line) for line in out.splitlines()]


# --- streaming ------------------------------------------------------------------------


def test_lines_are_appended_as_they_arrive_through_a_pipe(ks, redis_url, home) -> None:
    ks("create", "slow")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
    cli = [sys.executable, "-m", "kafkaesque", "--home", str(home), "--redis-url", redis_url]
    producer = subprocess.Popen(
        [*cli, "produce", "slow"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert producer.stdin is not None
        producer.stdin.write(b"a\nb\n")
        producer.stdin.flush()
        deadline = time.monotonic() + 5
        seen = b""
        while time.monotonic() < deadline and seen != b"a\nb\n":
            time.sleep(0.1)
            seen = ks("consume", "slow").stdout_bytes
        assert seen == b"a\nb\n"  # appended while the producer's stdin is still open
        assert producer.poll() is None
        # A partial line waits for its end; then an empty line, a "\r", bytes that are not
        # UTF-8 and a last line without "\n".
        producer.stdin.write(b"par")
        producer.stdin.flush()
        time.sleep(0.3)
        assert ks("consume", "slow").stdout_bytes == b"a\nb\n"
        _, err = producer.communicate(b"tial\n\ncr\r\n\xff\xfe\nlast", timeout=60)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    assert producer.returncode == 0, err
    assert b"produced 7 records (24 bytes) to slow" in err
    assert ks("consume", "slow").stdout_bytes == b"a\nb\npartial\n\ncr\r\n\xff\xfe\nlast\n"


def next_chunk(chunks: Iterator, pipe: io.RawIOBase) -> tuple[list[bytes], int] | None:
    """The next chunk, or a failure (not a hang) if it waits for more input."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(next, chunks, None)
        try:
            return future.result(timeout=5)
        except TimeoutError:
            pipe.close()  # EOF ends the read that waits
            future.result()
            pytest.fail("waited for more input")


def test_iter_line_chunks_yields_what_a_pipe_has_without_waiting_for_more() -> None:
    for buffered in (True, False):  # read1 of a BufferedReader; read of a raw FileIO
        r, w = os.pipe()
        with (
            os.fdopen(r, "rb", buffering=-1 if buffered else 0) as stream,
            open(w, "wb", 0) as pipe,
        ):
            assert hasattr(stream, "read1") == buffered
            chunks = iter_line_chunks(stream)
            pipe.write(b"a\n\nb\npart")
            assert next_chunk(chunks, pipe) == ([b"a", b"", b"b"], 9)
            pipe.write(b"ial\nend")
            assert next_chunk(chunks, pipe) == ([b"partial"], 7)
            pipe.close()
            assert next_chunk(chunks, pipe) == ([b"end"], 0)
            assert next_chunk(chunks, pipe) is None


def test_iter_line_chunks_gathers_ready_input_into_full_chunks(tmp_path: Path) -> None:
    data = b"\n".join(b"%d" % i for i in range(60))  # the last line has no "\n"
    path = tmp_path / "lines"
    path.write_bytes(data)
    for stream in (path.open("rb"), io.BytesIO(data)):
        with stream:
            chunks = list(iter_line_chunks(stream, chunk_size=64))
        assert [c for _, c in chunks] == [64, 64, len(data) - 128]
        assert [line for lines, _ in chunks for line in lines] == data.split(b"\n")
        assert chunks[-1][0][-1] == b"59"  # joined the last chunk, not a batch of its own


# --- keyless partitioning -------------------------------------------------------------


def test_round_robin_starts_at_a_random_partition(redis_url: str) -> None:
    # Deterministic: each run gets its own seeded random source, so the expected
    # partitions are known (and not all 0).
    seeds = range(6)
    expected = [random.Random(seed).randrange(3) for seed in seeds]
    assert set(expected) != {0}

    async def run() -> list[int]:
        log = Log(redis.asyncio.Redis.from_url(redis_url))
        config = await log.create_topic(TopicConfig("rr3", 3))
        for seed in seeds:
            producer = LineProducer(log, config, rng=random.Random(seed))
            await producer.produce(io.BytesIO(b"%d\n" % seed))
        ends = [(await log.state("rr3", p)).log_end for p in range(3)]
        await log.redis.aclose()
        return ends

    ends = asyncio.run(run())
    assert ends == [expected.count(p) for p in range(3)]


def test_one_record_runs_spread_over_the_partitions(ks) -> None:
    # The real random source: 30 one-record runs all land in one partition only with
    # probability 3 * 3**-30 (about 1e-14), so a false failure is negligible.
    ks("create", "rr", "--partitions", "3")
    for i in range(30):
        ks("produce", "rr", input=b"%d\n" % i)
    partitions = [r["partition"] for r in records(ks, "rr")]
    assert len(partitions) == 30
    assert len(set(partitions)) > 1


def test_keyless_records_with_a_key_separator_round_robin_per_batch(ks) -> None:
    ks("create", "mixed", "--partitions", "3")
    keyed = [b"k%d:v%d" % (i, i) for i in range(12)]
    keyless = [b"x%d" % i for i in range(6)]
    lines = keyed[:2] + keyless[:1] + keyed[2:5] + keyless[1:3] + keyed[5:9]
    lines += keyless[3:5] + keyed[9:] + keyless[5:]
    ks("produce", "mixed", "--key-separator", ":", "--batch-size", "3", input=b"\n".join(lines))
    got = records(ks, "mixed")
    assert len(got) == len(lines)
    for r in got:
        if r["key"] is not None:
            assert r["partition"] == partition_for_key(r["key"].encode(), 3)
            assert r["value"] == r["key"].replace("k", "v")
    where = {r["value"]: r["partition"] for r in got if r["key"] is None}
    first = where["x0"]
    # Three keyless lines (a batch) to one partition, the next three to the next one.
    assert [where[f"x{i}"] for i in range(6)] == [first] * 3 + [(first + 1) % 3] * 3
