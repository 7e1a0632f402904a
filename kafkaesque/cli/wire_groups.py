"""The wire mode's consumer groups (groups, group): ListGroups, DescribeGroups /
ConsumerGroupDescribe, OffsetFetch and DeleteGroups through confluent-kafka's admin
client. Loaded only in wire mode."""

from __future__ import annotations

import click
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
    TopicPartition,
)

from kafkaesque.cli.group_view import CLASSIC, CONSUMER, GroupView, MemberView, by_topic
from kafkaesque.cli.wire_client import INTERNAL_TOPICS, TIMEOUT, WireClient, WireFailure
from kafkaesque.types import TopicPartition as TP

STATES = {
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.UNKNOWN: "Unknown",
}


class WireGroups:
    """The group requests of one command, over its client."""

    def __init__(self, client: WireClient) -> None:
        self.client = client
        self._partitionwise: set[str] = set()  # groups whose offsets are asked one by one

    def _unsupported(self, exc: WireFailure, what: str) -> None:
        """A broker's UNSUPPORTED_FEATURE raised as what it lacks (``what``: "lists no
        groups (no ListGroups)"); any other failure is left to the caller."""
        if exc.message.startswith("UNSUPPORTED_FEATURE"):
            raise WireFailure(
                f"UNSUPPORTED_FEATURE: the broker at {self.client.bootstrap} {what}"
            ) from None

    def list_groups(self) -> list[list[object]]:
        """Every group: [group, state, type], by id."""
        try:
            result = self.client.wait(
                self.client.admin.list_consumer_groups(request_timeout=TIMEOUT)
            )
        except WireFailure as exc:
            self._unsupported(exc, "lists no groups (no ListGroups)")
            raise
        for error in result.errors:
            raise self.client.failed(KafkaException(error))
        rows: list[list[object]] = []
        for g in sorted(result.valid, key=lambda g: g.group_id):
            kind = CONSUMER if g.type == ConsumerGroupType.CONSUMER else CLASSIC
            rows.append([g.group_id, STATES.get(g.state, str(g.state)), kind])
        return rows

    def describe_group(self, group: str) -> GroupView | None:
        """The group as DescribeGroups / ConsumerGroupDescribe tell; None if there is none
        (Dead, or GROUP_ID_NOT_FOUND). The generation is not told (None)."""
        futures = self.client.admin.describe_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            description = self.client.wait(futures[group])
        except WireFailure as exc:
            if "GROUP_ID_NOT_FOUND" in exc.message:
                return None
            if not exc.message.startswith("UNSUPPORTED_FEATURE"):
                raise
            # A broker without DescribeGroups (librdkafka's mock): the group as its
            # committed offsets show it, if it has any.
            # Its OffsetFetch of every offset answers none either: ask partition by partition.
            self._partitionwise.add(group)
            if not self.committed(group):
                return None
            click.echo(
                f"the broker does not describe groups (DescribeGroups): {group}'s state "
                "and members are not known",
                err=True,
            )
            return GroupView(group, CLASSIC, "Unknown", "", "", None)
        state = STATES.get(description.state, str(description.state))
        if state == "Dead" and not description.members:
            return None
        kind = CLASSIC
        if getattr(description, "type", None) == ConsumerGroupType.CONSUMER:  # 2.6: none
            kind = CONSUMER
        protocol_type = "" if description.is_simple_consumer_group else "consumer"
        view = GroupView(
            group, kind, state, protocol_type, description.partition_assignor or "", None
        )
        for m in description.members:
            parts = m.assignment.topic_partitions if m.assignment is not None else []
            assignment = by_topic(sorted((tp.topic, tp.partition) for tp in parts))
            view.members.append(
                MemberView(m.member_id, m.group_instance_id, m.client_id, m.host, assignment)
            )
        return view

    def committed(self, group: str) -> dict[TP, int]:
        """The group's committed offsets."""
        request = [ConsumerGroupTopicPartitions(group)]
        if group in self._partitionwise:
            topics = self.client.metadata().topics
            request[0].topic_partitions = [
                TopicPartition(t, p)
                for t in sorted(topics)
                if t not in INTERNAL_TOPICS
                for p in sorted(topics[t].partitions)
            ]
        futures = self.client.admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT)
        result = self.client.wait(futures[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        }

    def delete_group(self, group: str) -> str:
        """DeleteGroups; the error code's name ("NONE" when deleted)."""
        # DescribeGroups first: a broker without it has no DeleteGroups either, and
        # librdkafka 2.16 aborts on DeleteGroups' UNSUPPORTED_FEATURE.
        futures = self.client.admin.describe_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            self.client.wait(futures[group])
        except WireFailure as exc:
            self._unsupported(exc, "deletes no groups (no DeleteGroups)")
        futures = self.client.admin.delete_consumer_groups([group], request_timeout=TIMEOUT)
        try:
            self.client.wait(futures[group])
        except WireFailure as exc:
            for code in ("GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP"):
                if exc.message.startswith(code):
                    return code
            raise
        return "NONE"
