"""kafkajs 2.2.4 consumer groups (its Consumer always joins one) against the server, through
tests/wire/js/kafkajs_group.js: members sharing partitions with its round-robin assigner, a
member killed, and a restarted member resuming from the committed offsets."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from tests.wire import groups_common as gc
from tests.wire.conftest import check_log

NODE = shutil.which("node")
STRATEGY = "RoundRobinAssigner"  # kafkajs' only built-in assigner

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
    pytest.mark.skipif(
        not (gc.JS / "node_modules" / "kafkajs").is_dir(),
        reason="kafkajs is not installed: npm ci --prefix tests/wire/js",
    ),
]


@pytest.fixture(scope="module")
def group_broker(broker_factory):
    return broker_factory(*gc.FAST_GROUP_ARGS)


@pytest.fixture
def broker(group_broker, request) -> Iterator:
    """The module's server (short group delays); fails the test on a Traceback or exit."""
    check_log(group_broker, 0, "an earlier test or start-up")
    start = group_broker.stderr_size()
    yield group_broker
    check_log(group_broker, start, request.node.name)


def test_three_members_split_and_consume_exactly_once(broker, topic_name, tmp_path):
    topic = topic_name()
    gc.check_split_exactly_once(broker, tmp_path, topic, f"g-{topic}", "kafkajs", STRATEGY)


def test_killed_member_is_expelled_and_its_partitions_move(broker, topic_name, tmp_path):
    topic = topic_name()
    gc.check_killed_member(broker, tmp_path, topic, f"g-{topic}", "kafkajs", STRATEGY)


def test_restarted_member_resumes_from_committed_offsets(broker, topic_name, tmp_path):
    topic, partitions, half = topic_name(), 3, 900
    group = f"g-{topic}"
    gc.create_topic(broker.bootstrap, topic, partitions)
    gc.produce_numbered(broker.bootstrap, topic, partitions, 0, half)
    common = ("kafkajs", broker.bootstrap, topic, group)
    [first] = gc.start_members(tmp_path, ["first"], *common, strategy=STRATEGY)
    try:
        gc.wait_until(lambda: len(first.records) >= half, f"{half} records", context=first.describe)
        gc.wait_until(
            lambda: sum(gc.committed(broker.bootstrap, group, topic, partitions).values()) == half,
            "the commits",
            context=first.describe,
        )
    finally:
        assert first.stop() == 0, first.describe()
    assert sorted(first.values()) == [gc.value_of(i) for i in range(half)]
    gc.produce_numbered(broker.bootstrap, topic, partitions, half, half)
    [second] = gc.start_members(tmp_path, ["second"], *common, strategy=STRATEGY)
    try:
        gc.wait_until(
            lambda: len(second.records) >= half, f"{half} more records", context=second.describe
        )
        time.sleep(0.5)  # a record read again would arrive now
    finally:
        second.stop()
    assert sorted(second.values()) == [gc.value_of(i) for i in range(half, 2 * half)]
