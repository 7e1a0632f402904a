"""The CLI's consumer loop: what an idle follow costs."""

from __future__ import annotations

import asyncio
import io
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
