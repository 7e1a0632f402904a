"""kcat (librdkafka from Debian) behind the adapter of tests.wire.clients: it consumes (-C
-e, manual assignment); its producer (-P) cannot set timestamps or partitions per record,
so tests/wire/test_kcat.py drives that itself."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.wire.clients import Client, kcat_path
from tests.wire.common import Rec, by_position

TIMEOUT = 120.0  # seconds for one kcat command


def kcat(broker: Any, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run kcat against the server; it must succeed."""
    command = [kcat_path(), "-b", broker.bootstrap, "-X", "broker.address.family=v4", *args]
    result = subprocess.run(
        command,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, (
        f"{' '.join(command)} exited with {result.returncode}:\n"
        f"{result.stderr.decode(errors='replace')}"
    )
    return result


def kcat_consume(broker: Any, topic: str, *args: str) -> list[Rec]:
    """Every record of the topic through ``kcat -C -J -e`` (assign, no group)."""
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q", *args).stdout
    records = []
    for line in out.splitlines():
        obj = json.loads(line)
        assert obj["tstype"] == "create", obj
        names, values = obj.get("headers", [])[0::2], obj.get("headers", [])[1::2]
        records.append(
            Rec(
                partition=obj["partition"],
                offset=obj["offset"],
                timestamp=obj["ts"],
                key=None if obj["key"] is None else obj["key"].encode(),
                value=None if obj["payload"] is None else obj["payload"].encode(),
                headers=tuple(
                    (n, None if v is None else v.encode())
                    for n, v in zip(names, values, strict=True)
                ),
            )
        )
    return by_position(records)


class Kcat(Client):
    name = "kcat"

    def consume(
        self, topic: str, partitions: int, count: int, start: int | None = None
    ) -> list[Rec]:
        """Every record of the topic (kcat reads all partitions to their end)."""
        assert start is None, "kcat_consume reads from the beginning"
        return kcat_consume(self.broker, topic)


ADAPTER = Kcat
