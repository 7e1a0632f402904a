"""The stored form of a group's state, classic or consumer protocol: msgpack of its slots,
each member as the list of its own slots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

M = TypeVar("M")


def pack_group(group: Any, member_slots: tuple[str, ...], **replaced: Any) -> bytes:
    """``group``'s slots (those in ``replaced`` as given there), its members last."""
    d = {k: getattr(group, k) for k in group.__slots__ if k != "members"}
    d.update(replaced)
    d["members"] = [[getattr(m, k) for k in member_slots] for m in group.members.values()]
    return msgpack.packb(d)


def unpack_group(data: bytes, member: Callable[..., M]) -> tuple[dict[str, Any], list[M]]:
    """What ``pack_group`` stored: the group's fields but its members, and its members."""
    d = msgpack.unpackb(data)
    return d, [member(*values) for values in d.pop("members")]
