"""`consume --follow --group` across Redis losing its data: the records it read at offsets
that now hold other records are never skipped silently, nor committed past."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.storage.common import bare_env
from tests.storage.test_served import REPO, cli, ok


def follower(redis_url: str, pg_dsn: str, home: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "kafkaesque", "--redis-url", redis_url, "--pg-dsn", pg_dsn]
    return subprocess.Popen(
        [*command, "consume", "t", "--follow", "--group", "g", "--format", "offset", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=bare_env(home),
    )


def committed(run) -> int | None:
    """Group g's committed offset of t[0] as `group g t` shows it (None: no such group)."""
    shown = run("group", "g", "t")
    if shown.returncode != 0:
        return None
    row = shown.stdout.decode().strip().splitlines()[-1].split()
    return int(row[2]) if row[:2] == ["t", "0"] else None


def read_lines(proc: subprocess.Popen[bytes], n: int) -> list[str]:
    assert proc.stdout is not None
    return [proc.stdout.readline().decode().rstrip("\n") for _ in range(n)]


@pytest.mark.parametrize("mode", ["error", "rewind"])
def test_consume_follow_group_across_a_flush(
    redis_url: str, pg_dsn: str, tmp_path: Path, mode: str
) -> None:
    def run(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return cli(redis_url, tmp_path, *args, input=input, pg_dsn=pg_dsn)

    ok(run("create", "t", "--page-size", "200"))
    ok(run("produce", "t", input=b"".join(b"old-%d\n" % i for i in range(1000))))
    ok(run("archive", "--once", "--idle-close", "0"))  # offsets 0-999 archived
    ok(run("produce", "t", input=b"".join(b"old-%d\n" % i for i in range(1000, 1030))))

    proc = follower(redis_url, pg_dsn, tmp_path, "--on-truncation", mode)
    try:
        lines = read_lines(proc, 1030)
        assert lines[-1] == "0\t1029\told-1029"
        deadline = time.monotonic() + 30
        while committed(run) != 1030:  # it commits right after printing
            assert time.monotonic() < deadline, "the group never committed 1030"
            time.sleep(0.1)
        ok(run("archive", "--once"))  # the group's offset is archived with the records
        # Redis loses everything; at once, new records take offsets 1000 on.
        redis.Redis.from_url(redis_url).flushall()
        ok(run("produce", "t", input=b"".join(b"new-%d\n" % i for i in range(200))))
        if mode == "error":
            proc.wait(60)
            stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
            assert proc.returncode == 1, stderr
            *before, line = stderr.splitlines()
            assert line.startswith("Error: t[0] was truncated at offset 1000"), stderr
            # Only the restore's note, when this process was the one that ran it.
            assert all("is past the restored log end" in b for b in before), stderr
            assert proc.stdout.read() == b""  # type: ignore[union-attr]
        else:
            lines = read_lines(proc, 200)
            assert lines[0] == "0\t1000\tnew-0" and lines[-1] == "0\t1199\tnew-199"
            assert proc.poll() is None  # still following
    finally:
        proc.terminate()
        proc.wait(10)
    if mode == "rewind":
        stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
        assert "t[0] was truncated at offset 1000" in stderr and "30 offsets" in stderr
    # The group never committed past a record it did not print: its archived 1030 came
    # back as committed (past the restored log end, 1000), and only a rewind read on.
    assert committed(run) == (1030 if mode == "error" else 1200)
