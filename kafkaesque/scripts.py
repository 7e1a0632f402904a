"""The Lua scripts, each one atomic operation on the log, registered once and called by SHA."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

SCRIPT_NAMES = (
    "create",
    "append",
    "read",
    "state",
    "delete",
    "find_time",
    "partitions",
    "closed_pages",
    "mark_archived",
    "close_idle",
    "restore",
    "archive_on",
    "producer_id",
)


@cache
def source(name: str) -> str:
    """The script's text with the shared helpers (common.lua) in front of it."""
    lua = files("kafkaesque") / "lua"
    return (lua / "common.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


class Scripts:
    """One registered script per operation; redis-py sends EVALSHA and loads on NOSCRIPT."""

    def __init__(self, redis: Redis) -> None:
        for name in SCRIPT_NAMES:
            setattr(self, name, redis.register_script(source(name)))

    create: AsyncScript
    append: AsyncScript
    read: AsyncScript
    state: AsyncScript
    delete: AsyncScript
    find_time: AsyncScript
    partitions: AsyncScript
    closed_pages: AsyncScript
    mark_archived: AsyncScript
    close_idle: AsyncScript
    restore: AsyncScript
    archive_on: AsyncScript
    producer_id: AsyncScript
