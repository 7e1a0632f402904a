"""The "consumer" protocol's member metadata and assignments, as far as the broker reads
them (Kafka's ConsumerProtocolSubscription and ConsumerProtocolAssignment): every version
starts with an int16 version, then the topics, which is all the broker needs."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = _I16.unpack_from(data, pos)
    end = pos + 2 + length
    if length < 0 or end > len(data):
        raise ValueError("string past the end")
    return data[pos + 2 : end].decode(), end


def decode_subscription(data: bytes) -> list[str] | None:
    """The topics a member subscribes to, None if ``data`` is not a subscription."""
    try:
        (count,) = _I32.unpack_from(data, 2)
        pos, topics = 6, []
        for _ in range(max(count, 0)):
            topic, pos = _string(data, pos)
            topics.append(topic)
        return topics
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


def decode_assignment(data: bytes) -> dict[str, list[int]] | None:
    """Topic -> partitions of an assignment ([topic string, [partition int32]], user
    data), None if ``data`` is not one."""
    try:
        (count,) = _I32.unpack_from(data, 2)
        pos = 6
        out: dict[str, list[int]] = {}
        for _ in range(max(count, 0)):
            topic, pos = _string(data, pos)
            (n,) = _I32.unpack_from(data, pos)
            out[topic] = list(struct.unpack_from(f">{n}i", data, pos + 4))
            pos += 4 + 4 * n
        return out
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
