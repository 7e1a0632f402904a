"""One CLI process that runs command after command, for tests that run many commands and
check what each did: a Python start (about half a second) instead of one per command.

The process runs each command as `python -m kafkaesque ARGS` would: click's main,
standalone (its own error lines and exit codes), stdin, stdout and stderr its own for the
command, a fresh logging setup. It reads the commands from a pipe, one JSON line each, and
answers each with one line; output written to the descriptors themselves rather than
through sys.stdout/sys.stderr is not captured (a test that checks such output runs the
command as a process of its own).
"""

from __future__ import annotations

import base64
import json
import select
import subprocess
import sys
from pathlib import Path

TIMEOUT = 120.0  # seconds one command may take

# The commands come on stdin, the answers go to the descriptor stdout had (fd 1 then
# points at /dev/null, so that nothing else writes between the answers).
_SERVE = """
import base64, io, json, logging, os, sys
from kafkaesque.cli import main
answers = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
for line in sys.stdin:
    request = json.loads(line)
    stdin = io.TextIOWrapper(io.BytesIO(base64.b64decode(request["input"])))
    stdout = io.TextIOWrapper(io.BytesIO(), write_through=True)
    stderr = io.TextIOWrapper(io.BytesIO(), write_through=True)
    logging.root.handlers.clear()  # each command's logging goes to its own stderr
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    try:
        main(request["args"], prog_name="python -m kafkaesque")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    out = [base64.b64encode(s.buffer.getvalue()).decode() for s in (stdout, stderr)]
    answers.write(json.dumps([code, *out]) + "\\n")
    answers.flush()
"""


class CommandsInTurn:
    """A CLI process with environment ``env`` in directory ``cwd``: ``run`` gives it a
    command, ``close`` ends it (it must end cleanly)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )

    def run(
        self, *args: str, input: bytes | None = None, timeout: float = TIMEOUT
    ) -> subprocess.CompletedProcess[bytes]:
        """Exit code, stdout and stderr of ``python -m kafkaesque ARGS``, run by the
        process; a command that takes longer than ``timeout`` seconds fails the test."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {"args": list(args), "input": base64.b64encode(input or b"").decode()}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.proc.kill()
            _, stderr = self.proc.communicate()
            raise AssertionError(f"{args} took over {timeout} s: {stderr!r}")
        answer = self.proc.stdout.readline()
        if not answer:
            _, stderr = self.proc.communicate(timeout=120)
            raise AssertionError(f"the CLI process exited with {self.proc.returncode}: {stderr!r}")
        code, stdout, stderr = json.loads(answer)
        return subprocess.CompletedProcess(
            list(args), code, base64.b64decode(stdout), base64.b64decode(stderr)
        )

    def close(self) -> None:
        _, stderr = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0 and stderr == b"", stderr.decode(errors="replace")

    def __enter__(self) -> CommandsInTurn:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.proc.kill()
            self.proc.wait()
