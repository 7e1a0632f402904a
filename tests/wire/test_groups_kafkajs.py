"""kafkajs 2.2.4 consumer groups (its Consumer always joins one) against the server, through
tests/wire/js/kafkajs_group.js: a restarted member resumes from the committed offsets
(sharing partitions and a killed member: test_groups_members.py)."""

from __future__ import annotations

import time

from tests.wire import groups_common as gc
from tests.wire.clients import needs
from tests.wire.common import (
    FAST_GROUP_ARGS,
    committed,
    create_topic,
    produce_numbered,
    value_of,
    wait_until,
)

STRATEGY = "RoundRobinAssigner"  # kafkajs' only built-in assigner
pytestmark = needs("kafkajs")
BROKER_ARGS = FAST_GROUP_ARGS  # the module's server: short group delays


def test_restarted_member_resumes_from_committed_offsets(broker, topic_name, tmp_path):
    topic, partitions, half = topic_name(), 3, 900
    group = f"g-{topic}"
    create_topic(broker.bootstrap, topic, partitions)
    produce_numbered(broker.bootstrap, topic, partitions, 0, half)
    common = ("kafkajs", broker.bootstrap, topic, group)
    [first] = gc.start_members(tmp_path, ["first"], *common, strategy=STRATEGY)
    try:
        wait_until(lambda: len(first.records) >= half, f"{half} records", context=first.describe)
        wait_until(
            lambda: sum(committed(broker.bootstrap, group, topic, partitions).values()) == half,
            "the commits",
            context=first.describe,
        )
    finally:
        assert first.stop() == 0, first.describe()
    assert sorted(first.values()) == [value_of(i) for i in range(half)]
    produce_numbered(broker.bootstrap, topic, partitions, half, half)
    [second] = gc.start_members(tmp_path, ["second"], *common, strategy=STRATEGY)
    try:
        wait_until(
            lambda: len(second.records) >= half, f"{half} more records", context=second.describe
        )
        time.sleep(0.5)  # a record read again would arrive now
    finally:
        second.stop()
    assert sorted(second.values()) == [value_of(i) for i in range(half, 2 * half)]
