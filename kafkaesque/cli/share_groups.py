"""Share groups (KIP-932) in the group commands (direct mode): ``groups`` lists them (type
share), ``group NAME`` shows one (each share-partition's start offset as its current
offset, the lag past it), ``group NAME --reset-offsets`` moves its share-partitions' start
(AlterShareGroupOffsets: only while it has no members), ``group NAME --delete`` deletes an
empty one. group_describe.py and group_admin.py call these for a group that is neither
classic nor consumer."""

from __future__ import annotations

from collections.abc import Mapping

import click

from kafkaesque.cli.group_view import GroupView, MemberView, by_topic
from kafkaesque.errors import Refused
from kafkaesque.groups.share.coordinator import ShareGroupCoordinator
from kafkaesque.groups.share.state import ASSIGNOR
from kafkaesque.hot.group_offsets import CommittedOffset
from kafkaesque.hot.log import Log
from kafkaesque.types import TopicPartition

SHARE = "share"  # ListGroups v5's group type, and a share group's protocol type


async def load_share_group(log: Log, group: str) -> GroupView | None:
    """The share group as the commands show groups; None if there is none."""
    share = await ShareGroupCoordinator(log).load(group)
    if share is None:
        return None
    view = GroupView(group, SHARE, share.state, SHARE, ASSIGNOR, share.epoch)
    for m in share.members.values():
        view.members.append(
            MemberView(m.member_id, None, m.client_id, m.client_host, by_topic(m.assigned))
        )
    return view


async def share_starts(log: Log, group: str) -> dict[TopicPartition, CommittedOffset]:
    """Each share-partition's start offset (SPSO), where a consumer group's committed
    offset would be: every record below it is done."""
    coordinator = ShareGroupCoordinator(log)
    states = await coordinator.offsets(group, None)
    return {tp: CommittedOffset(s.start, "", 0) for tp, s in states.items() if s is not None}


async def delete_share_group(log: Log, group: str) -> str | None:
    """DeleteGroups of a share group: its outcome's name, None if it is no share group."""
    code = await ShareGroupCoordinator(log).delete(group)
    return None if code is None else code.name


async def expire_share_members(log: Log, group: str) -> None:
    """Members whose session ended leave the share group now, as the broker's tick
    would make them (before a reset checks the group is empty)."""
    coordinator = ShareGroupCoordinator(log)
    try:
        await coordinator.tick(group)
    finally:
        coordinator.close()


async def reset_share_offsets(log: Log, group: str, offsets: Mapping[TopicPartition, int]) -> None:
    """The share-partitions start afresh at ``offsets`` (AlterShareGroupOffsets); refused
    while the group has members."""
    try:
        await ShareGroupCoordinator(log).alter_offsets(group, offsets)
    except Refused as refused:
        raise click.ClickException(f"group {group}: {refused} ({refused.code.name})") from None
