"""The CLI's consumer loop: what an idle follow costs."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis.asyncio
from click.testing import CliRunner, Result

import kafkaesque.cli.line_consumer
from kafkaesque.cli import main
from kafkaesque.cli.line_consumer import Consumer
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.groups.coordinator import GroupCoordinator, GroupState, decode_consumer_assignment
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch


def test_idle_follow_reads_only_partitions_that_moved(
    make_log: Callable[[], Log], monkeypatch
) -> None:
    monkeypatch.setattr(kafkaesque.cli.line_consumer, "FOLLOW_WAKEUP", 0.1)

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("many", 50))
        await log.append("many", 7, [build_batch([b"seven"], timestamp=1)])
        reads: list[int] = []
        read = log.read

        async def counting_read(topic: str, partition: int, *args, **kwargs):
            reads.append(partition)
            return await read(topic, partition, *args, **kwargs)

        monkeypatch.setattr(log, "read", counting_read)
        out = io.BytesIO()
        consumer = Consumer(log, "many", dict.fromkeys(range(50), 0))
        following = asyncio.create_task(consumer.run(out, follow=True))
        await asyncio.sleep(0.6)  # several safety-net wakeups with nothing new
        assert out.getvalue() == b"seven\n"
        await log.append("many", 31, [build_batch([b"late"], timestamp=1)])
        for _ in range(50):
            if out.getvalue().endswith(b"late\n"):
                break
            await asyncio.sleep(0.05)
        following.cancel()
        assert out.getvalue() == b"seven\nlate\n"
        assert reads == [7, 31]

    asyncio.run(scenario())


# -- consume --group: real processes sharing a topic ----------------------------------------


def _cli(redis_url: str, *args: str, input: bytes | None = None) -> Result:
    result = CliRunner().invoke(main, ["--redis-url", redis_url, *args], input=input)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


class _Member:
    """A `consume --group --follow` process; its output lines gathered by a thread."""

    def __init__(self, redis_url: str, home: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
        env["KAFKAESQUE_HOME"] = str(home)
        command = [sys.executable, "-m", "kafkaesque", "--redis-url", redis_url, "consume"]
        self.process = subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.decode().rstrip("\n"))

    def stop(self, sig: int) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(timeout=30)
        self.reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _members(redis_url: str, group: str) -> dict[str, list[int]]:
    """The group's members and their partitions, as the coordinator has them."""

    async def load() -> dict[str, list[int]]:
        client = redis.asyncio.Redis.from_url(redis_url)
        log = Log(client)
        try:
            group_state = await GroupCoordinator(log).store.load(group)
            if group_state is None or group_state.state != GroupState.STABLE:
                return {}
            return {
                m.member_id: (decode_consumer_assignment(m.assignment) or {}).get("shared", [])
                for m in group_state.members.values()
            }
        finally:
            await client.aclose()

    return asyncio.run(load())


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_group_members_share_partitions_and_rebalance(redis_url: str, tmp_path: Path) -> None:
    _cli(redis_url, "create", "shared", "--partitions", "6")
    args = ("shared", "--group", "G", "--follow", "--format-string", "%p %s\\n")
    first = _Member(redis_url, tmp_path, *args)
    second = _Member(redis_url, tmp_path, *args)
    try:
        # Both join one round (the new group waits for more members), 3 partitions each.
        _wait_for(
            lambda: sorted(len(ps) for ps in _members(redis_url, "G").values()) == [3, 3],
            "two members of 3 partitions",
        )
        shown = _cli(redis_url, "group", "G", "--members").output
        assert shown.count("kafkaesque-cli-") == 2, shown
        records = [f"k{i}=v{i}" for i in range(600)]
        _cli(
            redis_url,
            "produce",
            "shared",
            "--key-separator",
            "=",
            input="\n".join(records).encode(),
        )
        everyone = lambda: first.lines + second.lines  # noqa: E731
        _wait_for(lambda: len(everyone()) >= 600, "600 records printed")
        time.sleep(0.5)  # no more than those
        printed = sorted(line.split(" ")[1] for line in everyone())
        assert printed == sorted(f"v{i}" for i in range(600))  # each exactly once
        parts = [{int(line.split(" ")[0]) for line in m.lines} for m in (first, second)]
        assert not parts[0] & parts[1] and parts[0] | parts[1] == set(range(6))
        # Ctrl-C: the member leaves, the other one takes every partition at once.
        assert first.stop(signal.SIGINT) == 130
        _wait_for(
            lambda: [len(ps) for ps in _members(redis_url, "G").values()] == [6],
            "one member of 6 partitions",
            timeout=10,
        )
        more = [f"k{i}=w{i}" for i in range(60)]
        _cli(redis_url, "produce", "shared", "--key-separator", "=", input="\n".join(more).encode())
        _wait_for(
            lambda: sum(line.split(" ")[1].startswith("w") for line in second.lines) == 60,
            "60 more",
        )
        assert len(first.lines) + len(second.lines) == 660
        # SIGTERM leaves too; the group keeps the offsets its members committed.
        assert second.stop(signal.SIGTERM) == 143
        assert _members(redis_url, "G") == {}
        lag = _cli(redis_url, "consume", "shared", "--group", "G").output
        assert lag == ""  # everything was committed
    finally:
        first.kill()
        second.kill()


# -- start positions, formats, several topics ----------------------------------------------


def _consume_error(redis_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--redis-url", redis_url, "consume", *args])


def test_format_string_json_and_start_positions(redis_url: str) -> None:
    _cli(redis_url, "create", "fs", "--partitions", "2")
    rows = [
        {"key": "a", "value": "x", "partition": 0, "timestamp": 1000, "headers": {"h": "1"}},
        {"key": "b", "value": None, "partition": 0, "timestamp": 2000},
        {"value": "z", "partition": 0, "timestamp": 3000},
        {"key": "c", "value": "w", "partition": 1, "timestamp": 1500},
    ]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    _cli(redis_url, "produce", "fs", "--format", "json", input=data)
    spec = "%t|%p|%o|%k|%s|%h|%T|%K|%S%%\\n"
    out = _cli(redis_url, "consume", "fs", "--format-string", spec).output
    assert out.splitlines() == [
        "fs|0|0|a|x|h=1|1000|1|1%",
        "fs|0|1|b|||2000|1|-1%",
        "fs|0|2||z||3000|-1|1%",
        "fs|1|0|c|w||1500|1|1%",
    ]
    printed = [
        json.loads(x)
        for x in _cli(redis_url, "consume", "fs", "--format", "json").output.splitlines()
    ]
    assert printed[1] == {
        "topic": "fs", "partition": 0, "offset": 1, "timestamp": 2000, "key": "b", "value": None
    }  # fmt: skip
    assert printed[0]["headers"] == [{"key": "h", "value": "1"}]

    def values(*args: str) -> list[str]:
        return _cli(redis_url, "consume", "fs", "--format-string", "%p:%o ", *args).output.split()

    assert values("--last", "1") == ["0:2", "1:0"]
    assert values("--last", "2") == ["0:1", "0:2", "1:0"]
    assert values("--from-end") == values("--offset", "end") == []
    assert values("--offset", "beginning") == ["0:0", "0:1", "0:2", "1:0"]
    assert values("--partition", "0", "--offset", "1") == ["0:1", "0:2"]
    assert values("--from-time", "1500") == ["0:1", "0:2", "1:0"]
    assert values("--from-time", "1970-01-01T00:00:02Z") == ["0:1", "0:2"]
    assert values("--from-time", "1970-01-01T00:00:02.500+00:00") == ["0:2"]
    assert values("--from-time", "9999") == []
    for args, fragment in (
        (["fs", "--format-string", "%x"], "unknown token %x"),
        (["fs", "--format-string", "%s", "--format", "json"], "exclude each other"),
        (["fs", "--from-end", "--last", "2"], "--from-end and --last exclude each other"),
        (["fs", "--from-time", "yesterday"], "--from-time"),
        (["fs", "--offset", "-3"], "--offset"),
        (["fs", "--offset", "3"], "--offset needs --partition"),
        (["fs", "--group", "g", "--partition", "0"], "exclude each other"),
        (["--pattern", "("], "not a regular expression"),
        ([], "give a TOPIC or --pattern"),
        (["fs", "other", "--partition", "0"], "--partition needs exactly one TOPIC"),
    ):
        result = _consume_error(redis_url, *args)
        assert result.exit_code == 2, (args, result.output)
        assert fragment in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    result = _consume_error(redis_url, "fs", "nosuch")
    assert result.exit_code == 1 and "no such topic: nosuch" in result.stderr
    result = _consume_error(redis_url, "--pattern", "zz.*")
    assert result.exit_code == 1 and "no topic matches" in result.stderr


def test_several_topics_and_a_pattern(redis_url: str) -> None:
    for name in ("logs-a", "logs-b", "other"):
        _cli(redis_url, "create", name)
        _cli(redis_url, "produce", name, input=f"{name} 1\n{name} 2\n".encode())
    both = _cli(redis_url, "consume", "logs-a", "other", "--format-string", "%t %s\\n").output
    assert sorted(both.splitlines()) == [
        "logs-a logs-a 1",
        "logs-a logs-a 2",
        "other other 1",
        "other other 2",
    ]
    matched = _cli(redis_url, "consume", "--pattern", "logs-.*", "--format-string", "%s\\n").output
    assert sorted(matched.splitlines()) == ["logs-a 1", "logs-a 2", "logs-b 1", "logs-b 2"]
    # Named topics and a pattern together; a group member reads them all and commits.
    grouped = _cli(redis_url, "consume", "other", "--pattern", "logs-b", "--group", "mix").output
    assert sorted(grouped.splitlines()) == ["logs-b 1", "logs-b 2", "other 1", "other 2"]
    _cli(redis_url, "produce", "logs-b", input=b"logs-b 3\n")
    assert (
        _cli(redis_url, "consume", "other", "--pattern", "logs-b", "--group", "mix").output
        == "logs-b 3\n"
    )


def test_from_end_follows_only_new_records(redis_url: str, tmp_path: Path) -> None:
    _cli(redis_url, "create", "tail", "--partitions", "3")
    _cli(redis_url, "produce", "tail", input=b"old 1\nold 2\n")
    follower = _Member(redis_url, tmp_path, "tail", "--from-end", "--follow")
    try:
        i = 0
        deadline = time.monotonic() + 30
        while not follower.lines:  # until it is positioned and sees one
            assert time.monotonic() < deadline
            _cli(redis_url, "produce", "tail", input=b"new %d\n" % i)
            i += 1
            time.sleep(0.2)
        _wait_for(lambda: len(follower.lines) >= 1, "a new record")
        assert all(line.startswith("new") for line in follower.lines), follower.lines
    finally:
        follower.kill()
