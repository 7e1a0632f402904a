"""Running the command line in wire mode (``-b``) as a subprocess, for the wire-mode
tests (tests/wire/test_cli_wire_*.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0


def wire(
    bootstrap: str,
    *args: str,
    config: Path | None = None,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m kafkaesque -b BOOTSTRAP [--command-config FILE] ARGS...``; no Redis
    reachable for it (KAFKAESQUE_REDIS_URL unset, an empty data directory)."""
    command = [sys.executable, "-m", "kafkaesque", "-b", bootstrap]
    command += ["--command-config", str(config)] if config is not None else []
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KAFKAESQUE_")}
    environment.update(env or {})
    return subprocess.run(
        [*command, *args],
        cwd=REPO,
        env=environment,
        input=input,
        capture_output=True,
        timeout=TIMEOUT,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    """The stdout of a command that must succeed."""
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def as_json(result: subprocess.CompletedProcess[bytes]) -> Any:
    return json.loads(ok(result))


def one_line_error(result: subprocess.CompletedProcess[bytes], code: int, *fragments: str) -> str:
    """The stderr of a command that must fail with ``code`` and one line naming each of
    ``fragments`` (no traceback, no librdkafka log line)."""
    err = result.stderr.decode(errors="replace")
    assert result.returncode == code, (result.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def write_config(path: Path, properties: dict[str, str]) -> Path:
    path.write_text("# client properties\n" + "".join(f"{k}={v}\n" for k, v in properties.items()))
    return path


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line]


def values(records: Sequence[dict[str, Any]]) -> list[str]:
    return sorted(r["value"] for r in records)
