"""kafkajs 2.2.4 (Node.js) behind the adapter of tests.wire.clients, through
tests/wire/js/kafkajs_client.js: produce with the codecs kafkajs has without plug-ins (none,
gzip), fetch with explicit partitions and offsets (kafkajs' Consumer always joins a group)."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

from kio.schema.errors import ErrorCode

from tests.wire.clients import JS, Client
from tests.wire.common import Rec, by_position

TIMEOUT = 90.0  # seconds for one node process


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class KafkaJS(Client):
    name = "kafkajs"
    null_header_values = False  # kafkajs has none
    idempotent = {"idempotent": True}

    def node(self, action: str, **command: Any) -> Any:
        """Run one scenario of kafkajs_client.js; its stderr (kafkajs' log) shows on failure."""
        payload = json.dumps({"action": action, "brokers": self.bootstrap, **command}).encode()
        result = subprocess.run(
            ["node", str(JS / "kafkajs_client.js")],
            input=payload,
            capture_output=True,
            timeout=TIMEOUT,
            cwd=JS,
        )
        log = result.stderr.decode(errors="replace")
        assert result.returncode == 0, f"kafkajs {action} failed:\n{log}"
        return json.loads(result.stdout)

    def produce(self, topic: str, records: list[Rec], codec: str = "none", **options: Any) -> None:
        """Send in one batch per partition; each starts at the offset of its first record."""
        messages = [
            {
                "partition": r.partition,
                "key": b64(r.key),
                "value": b64(r.value),
                "headers": [[name, b64(value)] for name, value in r.headers],
                "timestamp": r.timestamp,
            }
            for r in records
        ]
        sent = self.node("produce", topic=topic, messages=messages, compression=codec, **options)
        assert all(s["errorCode"] == ErrorCode.none for s in sent), sent
        first: dict[int, int] = {}
        for r in records:
            first.setdefault(r.partition, r.offset)
        assert {s["partition"]: int(s["baseOffset"]) for s in sent} == first, sent

    def consume(
        self, topic: str, partitions: int, count: int, start: int | None = None
    ) -> list[Rec]:
        """Every record of every partition of the topic from ``start`` to its end."""
        out = []
        for m in self.node("fetch", topic=topic, fromOffset=start or 0):
            assert m["magic"] == 2 and m["timestampType"] == 0, m
            headers = tuple((name, unb64(value)) for name, value in m["headers"])
            key, value = unb64(m["key"]), unb64(m["value"])
            out.append(Rec(m["partition"], m["offset"], m["timestamp"], key, value, headers))
        return by_position(out)


ADAPTER = KafkaJS
