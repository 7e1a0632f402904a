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


# --- keys, headers, nulls, JSON -------------------------------------------------------


def _fails(redis_url: str, *args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], input=input)


def test_headers_from_options_and_from_each_line_with_null_markers(ks) -> None:
    ks("create", "h", "--partitions", "2")
    lines = b"a:1,b:2\tk1=v1\n\tk2=NULL\nc:NULL\tNULL=v3\n"
    ks(
        "produce", "h", "--parse-headers", "--key-separator", "=", "--null-marker", "NULL",
        "--header", "src=cli", "--header", "empty=",
        input=lines,
    )  # fmt: skip
    got = sorted(records(ks, "h"), key=lambda r: r["value"] or "")
    fixed = [{"key": "src", "value": "cli"}, {"key": "empty", "value": ""}]
    assert [(r["key"], r["value"], r["headers"]) for r in got] == [
        ("k2", None, fixed),  # a tombstone
        (
            "k1",
            "v1",
            [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}, *fixed],
        ),
        (None, "v3", [{"key": "c", "value": None}, *fixed]),
    ]
    assert got[0]["partition"] == partition_for_key(b"k2", 2)


def test_json_input_round_trips_through_consume_json(ks, redis_url: str) -> None:
    ks("create", "j", "--partitions", "3")
    lines = [
        {"key": "a", "value": "1", "headers": {"h": "x", "n": None}},
        {"key": "a", "value": None},  # a tombstone
        {"value": "to two", "partition": 2, "timestamp": 1_700_000_000_000},
        {"key_base64": "/w==", "value_base64": "AP8=", "headers": [{"key": "b", "value": "y"}]},
    ]
    data = "\n".join(json.dumps(x) for x in lines).encode() + b"\n\n"
    result = ks("produce", "j", "--format", "json", input=data)
    assert "produced 4 records" in result.output
    got = records(ks, "j")
    by_value = {r.get("value", r.get("value_base64")): r for r in got}
    assert by_value["1"]["headers"] == [{"key": "h", "value": "x"}, {"key": "n", "value": None}]
    assert by_value[None]["key"] == "a"
    assert by_value["1"]["partition"] == by_value[None]["partition"] == partition_for_key(b"a", 3)
    assert by_value["to two"]["partition"] == 2
    assert by_value["to two"]["timestamp"] == 1_700_000_000_000
    assert by_value["AP8="]["key_base64"] == "/w=="
    # consume --format json's output is produce --format json's input.
    ks("create", "copy", "--partitions", "3")
    ks(
        "produce",
        "copy",
        "--format",
        "json",
        input=ks("consume", "j", "--format", "json").stdout_bytes,
    )
    strip = lambda rs: sorted(json.dumps({**r, "topic": 0, "offset": 0}) for r in rs)  # noqa: E731
    assert strip(records(ks, "copy")) == strip(got)


def test_bad_json_stops_at_its_line_after_producing_those_before(ks, redis_url: str) -> None:
    ks("create", "bad")
    data = b'{"value": "one"}\n{"value": "two"}\n{"value": oops}\n{"value": "four"}\n'
    result = _fails(
        redis_url, "produce", "bad", "--format", "json", "--batch-size", "1", input=data
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "line 3: not JSON" in result.stderr
    assert "produced the 2 records before it" in result.stderr
    assert [r["value"] for r in records(ks, "bad")] == ["one", "two"]
    for args, fragment, code in (
        (["--format", "json"], "line 1: unknown field 'valu'", 1),
        (["--format", "json", "--key-separator", "="], "exclude each other", 2),
        (["--header", "nokey"], "expected KEY=VALUE", 2),
        (["--parse-headers"], "line 1: no headers delimiter", 1),
    ):
        result = _fails(redis_url, "produce", "bad", *args, input=b'{"valu": 1}\n')
        assert result.exit_code == code, (args, result.output)
        assert fragment in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    result = _fails(redis_url, "produce", "bad", "--format", "json", input=b'{"partition": 1}\n')
    assert "line 1: partition must be 0..0" in result.stderr
