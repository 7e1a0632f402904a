"""The CLI through click's runner against a real redis-server."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from kafkaesque.cli import main
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.records.partitioner import partition_for_key
from tests.servers import free_port


@pytest.fixture
def ks(redis_url: str):
    """Run a CLI command against the test Redis; returns click's Result."""
    runner = CliRunner()

    def invoke(*args: str, input: bytes | None = None) -> Result:
        return runner.invoke(main, ["--redis-url", redis_url, *args], input=input)

    return invoke


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def one_line_error(result: Result, code: int, fragment: str) -> None:
    """A user mistake: exit code, one readable message, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert fragment in result.output
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_produce_then_consume_keeps_lines_byte_for_byte(ks) -> None:
    data = b"alpha\n\n  spaced  \r\ncaf\xc3\xa9\n\xff\xfe binary\nlast line without newline"
    ok(ks("create", "lines"))
    result = ok(ks("produce", "lines", "--batch-size", "2", input=data))
    assert "produced 6 records" in result.output
    out = ok(ks("consume", "lines")).stdout_bytes
    assert out == data + b"\n"


def test_produce_from_file_and_empty_input(ks, tmp_path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\ntwo\n")
    ok(ks("create", "f"))
    ok(ks("produce", "f", str(path)))
    ok(ks("produce", "f", input=b""))
    assert ok(ks("consume", "f")).stdout_bytes == b"one\ntwo\n"


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(ks, codec: str) -> None:
    lines = [b"record %d " % i + b"z" * (i % 50) for i in range(3000)]
    ok(ks("create", "z"))
    ok(ks("produce", "z", "--compression", codec, input=b"\n".join(lines) + b"\n"))
    assert ok(ks("consume", "z", "--fetch-size", "100")).stdout_bytes.split(b"\n")[:-1] == lines


def test_keyed_records_go_to_murmur2_partitions(ks) -> None:
    ok(ks("create", "keyed", "--partitions", "4"))
    lines = [b"k%d=v%d" % (i % 10, i) for i in range(200)] + [b"no separator"]
    ok(ks("produce", "keyed", "--key-separator", "=", input=b"\n".join(lines)))
    records = [
        json.loads(x)
        for x in ok(ks("consume", "keyed", "--format", "json")).stdout_bytes.splitlines()
    ]
    assert len(records) == 201
    for r in records:
        if r["key"] is None:
            assert r["value"] == "no separator"
        else:
            assert r["partition"] == partition_for_key(r["key"].encode(), 4)
            assert r["value"].startswith("v")
    # Per key, order is kept.
    for key in {r["key"] for r in records if r["key"]}:
        values = [int(r["value"][1:]) for r in records if r["key"] == key]
        assert values == sorted(values)


def test_keyless_records_round_robin_per_batch(ks) -> None:
    ok(ks("create", "rr", "--partitions", "3"))
    ok(ks("produce", "rr", "--batch-size", "10", input=b"\n".join(b"%d" % i for i in range(60))))
    held = [ok(ks("consume", "rr", "--partition", str(p))).stdout_bytes.split() for p in range(3)]
    # The rotation starts at a random partition; batch k goes to the k-th one after it.
    (start,) = [p for p in range(3) if held[p][0] == b"0"]
    for k in range(6):
        out = held[(start + k) % 3]
        assert len(out) == 20
        assert out[(k // 3) * 10 : (k // 3) * 10 + 10] == [
            b"%d" % i for i in range(k * 10, k * 10 + 10)
        ]


def test_consume_formats_offsets_and_limits(ks) -> None:
    ok(ks("create", "fm", "--partitions", "2"))
    ok(ks("produce", "fm", "--partition", "1", input=b"a\nb\nc\nd\n"))
    assert (
        ok(ks("consume", "fm", "--format", "offset")).stdout_bytes
        == b"1\t0\ta\n1\t1\tb\n1\t2\tc\n1\t3\td\n"
    )
    assert ok(ks("consume", "fm", "--partition", "1", "--offset", "2")).stdout_bytes == b"c\nd\n"
    assert ok(ks("consume", "fm", "--max-records", "3")).stdout_bytes == b"a\nb\nc\n"
    record = json.loads(
        ok(ks("consume", "fm", "--format", "json", "--max-records", "1")).stdout_bytes
    )
    assert record["partition"] == 1 and record["offset"] == 0 and record["value"] == "a"
    assert record["key"] is None and record["timestamp"] > 1_600_000_000_000


def test_empty_listings_say_so_on_stderr(ks) -> None:
    for command, message in (("topics", "no topics\n"), ("groups", "no consumer groups\n")):
        result = ok(ks(command))
        assert result.stdout == "" and result.stderr == message


def test_counts_of_one_are_singular(ks) -> None:
    assert ok(ks("create", "one")).stderr == "created topic one with 1 partition\n"
    assert ok(ks("produce", "one", input=b"x")).stderr.startswith("produced 1 record (1 byte) ")
    assert ok(ks("alter", "one", "--partitions", "2")).stderr == "topic one: 1 -> 2 partitions\n"
    reset = ok(ks("group", "g", "one", "--reset-offsets", "earliest", "--execute")).stderr
    assert reset == "reset 2 partitions of one for group g\n"
    one_line_error(ks("produce", "one", "--partition", "5", input=b"x"), 2, "has 2 partitions")


def test_topics_describe_delete(ks) -> None:
    ok(
        ks(
            "create",
            "d1",
            "--partitions",
            "2",
            "--page-size",
            "2",
            "--ttl",
            "60",
            "--max-pages",
            "5",
        )
    )
    ok(ks("create", "d0"))
    assert ok(ks("topics")).stdout == "d0\nd1\n"
    ok(ks("produce", "d1", "--partition", "0", "--batch-size", "1", input=b"1\n2\n3\n"))
    out = ok(ks("describe", "d1")).stdout
    assert "partitions  2" in out and "page size   2 records" in out and "ttl         60 s" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert rows[0][:4] == ["0", "0", "3", "2"] and rows[1][:4] == ["1", "0", "0", "0"]
    assert rows[0][5:] == ["-", "0"]  # no broker has led it
    ok(ks("delete", "d1"))
    assert ok(ks("topics")).stdout == "d0\n"


def test_alter_grows_partitions_and_keyed_records_use_them(ks) -> None:
    ok(ks("create", "g", "--partitions", "2"))
    ok(ks("alter", "g", "--partitions", "4"))
    assert "partitions  4" in ok(ks("describe", "g")).stdout
    keys = [f"k{i}".encode() for i in range(40)]
    ok(ks("produce", "g", "--key-separator", ":", input=b"".join(k + b":v\n" for k in keys)))
    for p in range(4):
        out = ok(ks("consume", "g", "--partition", str(p))).stdout_bytes
        assert out.count(b"v\n") == sum(partition_for_key(k, 4) == p for k in keys)
    one_line_error(ks("alter", "g", "--partitions", "3"), 1, "must be larger")
    one_line_error(ks("alter", "nope", "--partitions", "3"), 1, "no such topic")
    one_line_error(ks("alter", "g", "--partitions", "0"), 2, "--partitions")
    assert "partitions  4" in ok(ks("describe", "g")).stdout


def test_a_topic_created_again_is_consumed_from_its_start_by_old_groups(ks) -> None:
    ok(ks("create", "again"))
    ok(ks("produce", "again", input=b"1\n2\n3\n"))
    assert ok(ks("consume", "again", "--group", "g")).stdout == "1\n2\n3\n"
    ok(ks("delete", "again"))
    ok(ks("create", "again"))
    ok(ks("produce", "again", input=b"x\ny\n"))
    assert ok(ks("consume", "again", "--group", "g")).stdout == "x\ny\n"


def test_errors_are_one_line_with_exit_codes(ks, tmp_path) -> None:
    ok(ks("create", "e", "--partitions", "2"))
    one_line_error(ks("create", "e"), 1, "already exists")
    for command in (
        ["consume", "nope"],
        ["produce", "nope"],
        ["describe", "nope"],
        ["delete", "nope"],
    ):
        one_line_error(ks(*command, input=b"x\n"), 1, "no such topic")
    one_line_error(ks("create", "bad name"), 2, "invalid topic name")
    one_line_error(ks("create", "x" * 250), 2, "longer than 249")
    one_line_error(ks("create", "n", "--partitions", "0"), 2, "--partitions")
    one_line_error(ks("create", "n", "--page-size", "-3"), 2, "--page-size")
    one_line_error(ks("create", "n", "--ttl", "soon"), 2, "--ttl")
    one_line_error(ks("produce", "e", str(tmp_path / "missing.txt")), 2, "missing.txt")
    one_line_error(ks("produce", "e", "--partition", "2", input=b"x\n"), 2, "has 2 partitions")
    one_line_error(ks("consume", "e", "--partition", "1", "--offset", "5"), 1, "out of range")
    one_line_error(ks("consume", "e", "--offset", "5"), 2, "--offset needs --partition")
    one_line_error(ks("produce", "e", "--compression", "brotli", input=b"x\n"), 2, "brotli")
    # Nothing was left behind by the failures.
    assert ok(ks("topics")).stdout == "e\n"
    assert ok(ks("consume", "e")).stdout_bytes == b""


def test_more_mistakes_are_one_line_errors(ks, redis_url) -> None:
    ok(ks("create", "m"))
    one_line_error(ks("create", "big", "--ttl", str(2**31)), 2, "--ttl")
    one_line_error(ks("create", "big", "--page-size", str(2**64)), 2, "--page-size")
    one_line_error(ks("create", "big", "--max-pages", str(2**31)), 2, "--max-pages")
    one_line_error(ks("nosuch"), 2, "No such command")
    one_line_error(ks("create", "m2", "--bogus"), 2, "--bogus")
    one_line_error(ks("consume", "m", "--max-records", "0"), 2, "--max-records")
    one_line_error(ks("consume", "m", "--group", ""), 2, "must not be empty")
    one_line_error(ks("group", "", "m", "--reset-offsets", "earliest"), 2, "must not be empty")
    one_line_error(ks("group", "g", "m", "--reset-offsets", "\u00b2"), 2, "--reset-offsets")
    one_line_error(ks("group", "g", "nosuchtopic"), 1, "nosuchtopic")
    one_line_error(ks("archive", "--once", "--interval", "5"), 2, "alternatives")
    one_line_error(ks("archive", "--status", "--interval", "5"), 2, "alternatives")
    runner = CliRunner()
    for url in (
        "bogus",
        "redis://127.0.0.1:99999/0",
        "http://127.0.0.1/",
        "redis://[::1",
        "redis://127.0.0.1:0/0",
        "redis://127.0.0.1/0?socket_timeout=abc",
    ):
        one_line_error(runner.invoke(main, ["--redis-url", url, "topics"]), 2, "--redis-url")
    for dsn in ("bogus", "postgresql://u:secret@127.0.0.1:99999/db", "postgresql://[::1"):
        args = ["--redis-url", redis_url, "--pg-dsn", dsn, "topics"]
        one_line_error(result := runner.invoke(main, args), 2, "--pg-dsn")
        assert "secret" not in result.output  # a password is never echoed
    assert ok(ks("topics")).stdout == "m\n"  # nothing was created by the failures


def test_json_headers_that_are_not_text_come_as_base64(ks, redis_url) -> None:
    import asyncio

    import redis.asyncio

    from kafkaesque.hot.log import Log
    from kafkaesque.records.build import build_batch

    async def produce() -> None:
        log = Log(redis.asyncio.Redis.from_url(redis_url))
        await log.create_topic(TopicConfig("hdr", 1))
        headers = [[("bin", b"\xff\x00ok"), ("text", b"caf\xc3\xa9"), ("none", None)]]
        await log.append("hdr", 0, [build_batch([b"v"], headers=headers, timestamp=1)])
        await log.redis.aclose()

    asyncio.run(produce())
    record = json.loads(ok(ks("consume", "hdr", "--format", "json")).stdout)
    assert record["headers"] == [
        {"key": "bin", "value_base64": "/wBvaw=="},
        {"key": "text", "value": "caf\u00e9"},
        {"key": "none", "value": None},
    ]


def test_unreachable_redis_is_a_clear_error() -> None:
    port = free_port()
    result = CliRunner().invoke(main, ["--redis-url", f"redis://127.0.0.1:{port}/0", "topics"])
    one_line_error(result, 1, f"cannot reach Redis: 127.0.0.1:{port} (connection refused)")
    result = CliRunner().invoke(main, ["--redis-url", "unix:///nonexistent.sock", "topics"])
    one_line_error(result, 1, "Redis: /nonexistent.sock (no such file or directory)")


def test_archive_status_creates_no_archive(redis_url: str, tmp_path) -> None:
    home = tmp_path / "home"
    result = CliRunner().invoke(
        main, ["--redis-url", redis_url, "--home", str(home), "archive", "--status"]
    )
    assert result.exit_code == 0 and "no archive yet" in result.stdout
    assert not (home / "pg").exists()  # no PostgreSQL set up, so retention still applies


def test_delete_records_changes_every_partition_or_none(ks) -> None:
    """An offset past one partition's end is refused before any partition is cut (it used to
    cut partition 0, then fail the others: partly applied, exit 1)."""
    ok(ks("create", "dr", "--partitions", "3"))
    for partition, count in ((0, 2000), (1, 10), (2, 10)):
        lines = b"".join(b"r%d\n" % i for i in range(count))
        ok(ks("produce", "dr", "--partition", str(partition), input=lines))
    one_line_error(ks("delete-records", "dr", "--before", "1000"), 1, "nothing was deleted")
    described = ok(ks("describe", "dr")).output
    assert "2000" in described
    consumed = ok(ks("consume", "dr", "--partition", "0", "--max-records", "1")).stdout_bytes
    assert consumed == b"r0\n"  # partition 0 still starts at offset 0
    result = ok(ks("delete-records", "dr", "--before", "5"))
    assert result.stderr.count("log start 0 -> 5") == 3
