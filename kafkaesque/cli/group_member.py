"""The CLI's consumer as a member of a classic consumer group (``GroupMember``): it joins
through the group coordinator in this process, as a broker's members do."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field

import click

from kafkaesque.cli.group_view import by_topic
from kafkaesque.errors import Code, UnknownTopic
from kafkaesque.groups.assignors import range_
from kafkaesque.groups.consumer_protocol import decode_assignment, decode_subscription
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.groups.types import JoinRequest
from kafkaesque.hot.log import Log
from kafkaesque.types import TopicPartition as TP


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def encode_subscription(topics: Iterable[str]) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    names = sorted(topics)
    return struct.pack(">hi", 0, len(names)) + b"".join(map(_string, names)) + b"\xff" * 4


def encode_assignment(partitions: Iterable[TP]) -> bytes:
    """ConsumerProtocolAssignment v0: partitions per topic, no user data."""
    per_topic = by_topic(partitions)
    out = [struct.pack(">hi", 0, len(per_topic))]
    for t, ps in sorted(per_topic.items()):
        out.append(_string(t) + struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps)))
    return b"".join(out) + b"\xff" * 4


class GroupFailure(click.ClickException):
    """The group refused this member for good (another protocol, full, bad timeout): one
    line and exit code 1."""


@dataclass(eq=False)
class GroupMember:
    """The CLI's consumer as a member of a classic consumer group: joins through the group
    coordinator in this process (the same rounds a broker runs for Kafka clients), with
    the "consumer" protocol type and the range assignor, so Kafka tools show it;
    heartbeats in the background, and commits with its generation.

    ``subscription()`` gives the topics to subscribe to (a pattern is matched on each
    join, as Kafka's clients do); ``start_at(partitions, first)`` the offsets (and leader
    epochs) to start newly assigned partitions at: the group's committed offsets, else
    the reset policy (``first``: this is the process's first assignment)."""

    log: Log
    coordinator: GroupCoordinator
    group: str
    subscription: Callable[[], Awaitable[list[str]]]
    start_at: Callable[[list[TP], bool], Awaitable[tuple[dict[TP, int], dict[TP, int]]]]
    _: KW_ONLY
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 30_000
    heartbeat_interval: float = 1.0
    client_id: str = "kafkaesque-cli"
    member_id: str = field(default="", init=False)
    generation: int = field(default=-1, init=False)
    needs_join: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    failure: BaseException | None = field(default=None, init=False)
    # topic -> partitions, as last joined
    subscribed: dict[str, int] = field(default_factory=dict, init=False)
    joined_before: bool = field(default=False, init=False)
    joining: bool = field(default=False, init=False)  # heartbeats wait while a join is under way
    _beating: asyncio.Task | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.needs_join.set()

    async def _topics(self) -> dict[str, int]:
        out = {}
        for topic in await self.subscription():
            try:
                out[topic] = (await self.log.topic(topic)).partitions
            except UnknownTopic:
                continue
        return out

    async def join(self) -> list[TP]:
        """Join (again): the round's partitions for this member."""
        if self._beating is None:
            self._beating = asyncio.create_task(self._heartbeats())
        self.joining = True
        try:
            return await self._join()
        finally:
            self.joining = False

    async def _join(self) -> list[TP]:
        while True:
            self.needs_join.clear()
            # Redis lost its data (a heartbeat found the group gone): restore it from the
            # archive first, as the broker does before a group request, rather than join
            # an empty group whose restored offsets would then be ignored.
            await self.log.ensure_recovered()
            self.subscribed = await self._topics()
            request = JoinRequest(
                self.member_id,
                None,
                self.client_id,
                socket.gethostname(),
                self.session_timeout_ms,
                self.rebalance_timeout_ms,
                "consumer",
                [("range", encode_subscription(self.subscribed))],
                False,
            )
            joined = await self.coordinator.join(self.group, request)
            if joined.error in (Code.UNKNOWN_MEMBER_ID, Code.FENCED_INSTANCE_ID):
                self.member_id = ""
                continue
            if joined.error in (Code.REBALANCE_IN_PROGRESS, Code.COORDINATOR_NOT_AVAILABLE):
                await asyncio.sleep(0.1)
                continue
            if joined.error == Code.INCONSISTENT_GROUP_PROTOCOL:
                raise GroupFailure(
                    f"group {self.group} is used by members of another protocol or assignor"
                )
            if joined.error:
                raise GroupFailure(f"group {self.group} refused to join: {joined.error.name}")
            self.member_id, self.generation = joined.member_id, joined.generation
            assignments: dict[str, bytes] = {}
            if joined.leader == self.member_id and not joined.skip_assignment:
                assignments = await self._assign(joined.members)
            synced = await self.coordinator.sync(
                self.group,
                self.generation,
                self.member_id,
                None,
                assignments,
                ("consumer", "range"),
            )
            if synced.error == Code.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if synced.error in (Code.REBALANCE_IN_PROGRESS, Code.ILLEGAL_GENERATION):
                continue
            if synced.error:
                raise GroupFailure(f"group {self.group} refused to sync: {synced.error.name}")
            if self.needs_join.is_set():  # the round moved on meanwhile
                continue
            assigned = decode_assignment(synced.assignment) or {}
            return sorted((t, p) for t, ps in assigned.items() for p in ps)

    async def _assign(self, members: list[tuple[str, str | None, bytes]]) -> dict[str, bytes]:
        """The leader's part: Kafka's range assignor over every member's subscription."""
        subscriptions = {m: frozenset(decode_subscription(meta) or []) for m, _, meta in members}
        counts: dict[str, int] = {}
        for topic in sorted(set().union(*subscriptions.values())):
            try:
                counts[topic] = (await self.log.topic(topic)).partitions
            except UnknownTopic:
                continue
        assignment = range_(subscriptions, counts, {})
        return {m: encode_assignment(tps) for m, tps in assignment.items()}

    async def rejoin(self) -> tuple[dict[TP, int], dict[TP, int]]:
        """Join again; the offsets (and epochs) to read the assigned partitions from,
        as ``start_at`` says (the caller committed its positions before: an eager
        rebalance, as Kafka's classic consumers do)."""
        assigned = await self.join()
        first = not self.joined_before
        self.joined_before = True
        return await self.start_at(assigned, first) if assigned else ({}, {})

    async def commit(self, offsets: Mapping[TP, int], epochs: Mapping[TP, int]) -> None:
        """Commit with this member's generation; a refusal (the group rebalanced) means
        joining again: another member may then read those records again (at least once)."""
        if not offsets or self.member_id == "":
            return
        stored: dict[TP, tuple[int, str | None, int]] = {
            tp: (o, "", epochs.get(tp, -1)) for tp, o in offsets.items()
        }
        code = await self.coordinator.admin.commit(
            self.group, self.generation, self.member_id, None, stored
        )
        if code == Code.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code:
            self.needs_join.set()

    async def check_subscription(self) -> None:
        """Join again when the subscribed topics or their partitions changed."""
        if await self._topics() != self.subscribed:
            self.needs_join.set()

    async def _heartbeats(self) -> None:
        """Heartbeat at the interval; tick the group as a broker would (members whose
        session ended leave, a round past its deadline closes), so CLI members alone on
        Redis keep the group going."""
        try:
            while True:
                await asyncio.sleep(self.heartbeat_interval)
                if self.joining or self.needs_join.is_set():
                    continue
                if await self.log.needs_recovery():
                    # Redis lost its data: rejoin once the archive restored the group
                    # (with this member), keeping the member id it will know.
                    self.needs_join.set()
                    continue
                await self.coordinator.tick(self.group)
                if not self.member_id:
                    continue
                generation = self.generation
                code = await self.coordinator.heartbeat(
                    self.group, generation, self.member_id, None
                )
                if self.joining or generation != self.generation:
                    continue  # a join since answers for itself
                if code in (Code.UNKNOWN_MEMBER_ID, Code.FENCED_INSTANCE_ID):
                    self.member_id = ""
                if code:
                    self.needs_join.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis went away: the main loop reports it
            self.failure = exc
            self.needs_join.set()

    async def leave(self) -> None:
        """Stop heartbeats and leave the group, so the others rebalance at once."""
        if self._beating is not None:
            self._beating.cancel()
            try:
                await self._beating
            except asyncio.CancelledError:
                pass
            self._beating = None
        if self.member_id:
            await self.coordinator.leave(self.group, [(self.member_id, None)])
            self.member_id = ""
