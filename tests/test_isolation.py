"""The suite never touches the user's data: with a populated data directory at its
default place (~/.local/share/kafkaesque: topics, records, an embedded archive), CLI tests
run from the user's directory leave it byte for byte as it was and start no server in it;
nor does a command given another Redis."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INNER_TESTS = [
    "tests/test_cli.py::test_topics_describe_delete",
    "tests/test_cli.py::test_errors_are_one_line_with_exit_codes",
    "tests/test_cli.py::test_more_mistakes_are_one_line_errors",
    "tests/test_cli.py::test_archive_status_creates_no_archive",
    "tests/test_cli_process.py::test_words_round_trip_on_the_embedded_default",
]


def user_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell whose home directory is ``home``: none of the
    suite's KAFKAESQUE_* settings, no XDG_DATA_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
    env.pop("XDG_DATA_HOME", None)
    return {**env, "HOME": str(home)}


def data(home: Path) -> Path:
    """The user's data directory: the CLI's default."""
    return home / ".local" / "share" / "kafkaesque"


def kafkaesque(cwd: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kafkaesque", *args],
        cwd=cwd,
        env=user_env(cwd),
        input=input,
        capture_output=True,
        timeout=300,
    )


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (through the embedded PostgreSQL's link, if relocated):
    its kind, mode and content."""
    digest = {}
    for directory, dirs, files in os.walk(root, followlinks=True):
        for name in sorted(dirs + files):
            path = Path(directory, name)
            st = path.lstat()
            entry = f"{st.st_mode:o}"
            if path.is_symlink():
                entry += " -> " + os.readlink(path)
            elif path.is_file():
                entry += " " + hashlib.sha256(path.read_bytes()).hexdigest()
            digest[str(path.relative_to(root))] = entry
    return digest


@pytest.fixture(scope="module")
def user_checkout() -> Iterator[Path]:
    """A user's home directory as scripts/run.sh leaves it: the data directory with a
    topic, its records and an embedded archive of them, servers stopped. Under /tmp itself (not
    pytest's mode-700 directory), so the embedded PostgreSQL's user reaches it as root."""
    work = Path(tempfile.mkdtemp(prefix="ks-user-"))
    work.chmod(0o755)
    try:
        for args, input in (
            (["create", "words", "--partitions", "3", "--page-size", "100"], None),
            (["produce", "words"], b"".join(b"word %d\n" % i for i in range(1000))),
            (["archive"], None),
        ):
            result = kafkaesque(work, *args, input=input)
            assert result.returncode == 0, result.stderr.decode()
        assert (data(work) / "pg").exists()
        stopped = kafkaesque(work, "stop")
        assert b"stopped PostgreSQL and Valkey" in stopped.stderr
        yield work
    finally:
        kafkaesque(work, "stop")
        cluster = data(work) / "pg"
        if cluster.is_symlink():  # as root: the cluster under /var/lib/kafkaesque
            shutil.rmtree(cluster.resolve(), ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def test_cli_tests_leave_the_users_data_directory_untouched(user_checkout: Path) -> None:
    before = tree_digest(data(user_checkout))
    basetemp = Path(tempfile.mkdtemp(prefix="ks-inner-"))  # short: sockets live under it
    try:
        inner = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            + ["--basetemp", str(basetemp / "t"), "--rootdir", str(REPO)]
            + [str(REPO / test) for test in INNER_TESTS],
            cwd=user_checkout,
            env=user_env(user_checkout),
            capture_output=True,
            timeout=600,
        )
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
    assert inner.returncode == 0, inner.stdout.decode()[-3000:]
    assert f"{len(INNER_TESTS)} passed" in inner.stdout.decode()
    assert tree_digest(data(user_checkout)) == before
    assert sorted(p.name for p in user_checkout.iterdir()) == [".local"]


def test_another_redis_never_gets_the_directorys_archive(
    user_checkout: Path, redis_url: str
) -> None:
    before = tree_digest(data(user_checkout))
    topics = kafkaesque(user_checkout, "--redis-url", redis_url, "topics")
    assert topics.returncode == 0 and topics.stdout == b""  # nothing restored into it
    missing = kafkaesque(user_checkout, "--redis-url", redis_url, "consume", "words")
    assert missing.returncode == 1 and b"no such topic: words" in missing.stderr
    served = kafkaesque(user_checkout, "--redis-url", redis_url, "serve")
    assert served.returncode == 2 and b"the archive must be given too" in served.stderr
    assert tree_digest(data(user_checkout)) == before
    # The directory's own Redis and archive still have it all.
    consumed = kafkaesque(user_checkout, "consume", "words")
    assert consumed.returncode == 0 and len(consumed.stdout.splitlines()) == 1000
    assert kafkaesque(user_checkout, "stop").returncode == 0
