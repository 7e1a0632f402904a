"""What every client library's consumer groups do alike against the server, each scenario
parametrized over the libraries that have it (adapters: tests.wire.clients): a restarted
consumer resumes from the committed offsets, and the admin client lists, describes and
deletes groups. Members sharing partitions and members killed: test_groups_members.py;
what only one library does: test_groups_<library>.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.wire import groups_common as gc
from tests.wire.clients import Client, params
from tests.wire.common import (
    FAST_GROUP_ARGS,
    committed,
    create_topic,
    positions_after,
    produce_numbered,
    value_of,
    wait_committed,
)

BROKER_ARGS = FAST_GROUP_ARGS  # the module's server: short group delays
PYTHON = ("kafka-python", "aiokafka", "confluent")


@pytest.mark.parametrize("client", params(*PYTHON), indirect=True)
def test_restarted_consumer_resumes_from_committed_offsets(client: Client, topic_name) -> None:
    """A consumer reads half of the records and commits the positions after them; another
    of its group, started after it closed, reads exactly the rest, each partition from its
    committed offset."""
    topic, partitions, total = topic_name(), 3, 3000
    group = f"g-{topic}"
    create_topic(client.bootstrap, topic, partitions)
    produce_numbered(client.bootstrap, topic, partitions, 0, total)
    half, stored = client.group_consume_and_commit(group, topic, total // 2)
    positions = positions_after(half)
    assert stored == positions, (stored, positions)
    rest = client.group_consume_rest(group, topic, total - len(half))
    before = {v for _, _, v in half}
    after = [v for _, _, v in rest]
    assert not before & set(after), "records consumed again after the restart"
    assert before | set(after) == {value_of(i) for i in range(total)}
    assert len(after) == len(set(after))
    # Each partition resumed exactly at its committed offset.
    for p in range(partitions):
        offsets = [offset for q, offset, _ in rest if q == p]
        if offsets:
            assert min(offsets) == positions.get(p, 0), (p, positions)


@contextlib.contextmanager
def two_committed_members(
    broker: Any, directory: Path, topic: str, group: str, library: str, partitions: int
) -> Iterator[tuple[list[list[int]], dict[int, int]]]:
    """Member processes "a" and "b" of ``library`` sharing a new topic of 300 records, once
    they have committed all of them: yields their split and the partitions' log ends, and
    stops the members on leaving."""
    create_topic(broker.bootstrap, topic, partitions)
    ends = produce_numbered(broker.bootstrap, topic, partitions, 0, 300)
    members = gc.start_members(directory, ["a", "b"], library, broker.bootstrap, topic, group)
    try:
        split = gc.wait_for_split(members, partitions)
        wait_committed(broker.bootstrap, group, topic, partitions, ends)
        yield split, ends
    finally:
        gc.stop_all(members)


@pytest.mark.parametrize("client", params(*PYTHON), indirect=True)
def test_admin_lists_describes_and_deletes_groups(client: Client, topic_name, tmp_path) -> None:
    """Two members of the library's own consumer: the admin client lists their group,
    describes it (state, assignor, who has which partitions) with its committed offsets,
    and may not delete it until they left (where the library can delete groups)."""
    topic, partitions = topic_name(), 3
    group = f"g-{topic}"
    deletes = hasattr(client, "delete_group")  # aiokafka's admin client cannot
    members = two_committed_members(client.broker, tmp_path, topic, group, client.name, partitions)
    with members as (split, ends):
        assert client.list_groups()[group] == "consumer"
        described = client.describe_group(group, topic)
        assert (described.state, described.protocol_type, described.assignor) == (
            "Stable",
            "consumer",
            "range",
        ), described
        assert sorted(parts for _, parts in described.members) == sorted(split), described
        client_ids = {client_id for client_id, _ in described.members}
        assert client_ids == {f"{client.name}-a", f"{client.name}-b"}
        assert client.group_offsets(group, topic) == ends
        if deletes:
            assert client.delete_group(group) == ErrorCode.non_empty_group
    # The members left: the group is empty, and now it can be deleted, offsets and all.
    described = client.describe_group(group, topic)
    assert described.state == "Empty" and not described.members, described
    if deletes:
        assert client.delete_group(group) == ErrorCode.none
        assert group not in client.list_groups()
        assert group not in client.broker.cli("groups").stdout.decode().split()
        assert committed(client.bootstrap, group, topic, partitions) == dict.fromkeys(
            range(partitions), -1
        )
