"""The classic group protocol's vocabulary: states, error codes, the coordinator's
configuration, members, and what a JoinGroup asks and gets.

Plain data, shared by the state machine (group_state.py), its per-request checks
(group_rules.py) and the coordinator (groups.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

from kafkaesque.clock import SYSTEM, Clock, Timer
from kafkaesque.errors import Code
from kafkaesque.hot.outage import background_step

_log = logging.getLogger(__name__)

MAX_METADATA = 4096  # Kafka's offset.metadata.max.bytes
INT32_MAX = 2**31 - 1


class GroupState(StrEnum):
    """Kafka's group states, by the names DescribeGroups reports."""

    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"  # a group that does not exist (DescribeGroups of an unknown id)


@dataclass(slots=True)
class CoordinatorConfig:
    """The group.* and offsets.* broker configs the coordinator obeys (Kafka's defaults)."""

    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = INT32_MAX  # group.max.size: members of one group at most
    # offsets.retention.minutes: how long an empty group keeps its committed offsets.
    offsets_retention_minutes: int = 7 * 24 * 60

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    generation: int = -1  # the generation whose join round included this member
    joined: bool = False  # has joined the round in progress
    assignment: bytes = b""

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup's fields the state machine needs."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member: bool


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: Code
    member_id: str
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # leader only
    protocol_type: str | None = None
    # A static leader came back to a stable group: it gets the members' metadata, but must
    # not compute a new assignment (KIP-814; only JoinGroup v9+ can say so).
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class JoinStep:
    """What a JoinGroup did: an answer now (``result``), or a member at the barrier that
    waits for a generation past ``generation``. ``changed``: the group must be saved."""

    member_id: str
    result: JoinResult | None
    generation: int
    changed: bool

    @property
    def heartbeat(self) -> bool:
        """Whether the join counts as the member's heartbeat (it is one unless refused)."""
        return self.result is None or self.result.error == Code.NONE


class ExpiryTimers:
    """One timer per group that ticks it when its next member's session ends (ms), as
    Kafka's coordinator times sessions out, rather than at the next periodic tick, whose
    pass over many groups may come late. The earliest deadline per group wins; a tick
    re-arms the timer with the group's next deadline (heartbeats move it later)."""

    def __init__(self, what: str, clock: Clock = SYSTEM) -> None:
        self.what = what  # for the log, when a tick fails
        self.clock = clock  # the coordinator's: deadlines are on its now_ms
        self._handles: dict[str, tuple[int, Timer]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    def arm(self, group_id: str, due: int | None, tick: Callable[[str], Awaitable[None]]) -> None:
        """Tick ``group_id`` at ``due`` (ms since the epoch; None: nothing due)."""
        if due is None or self.closed:
            return
        current = self._handles.get(group_id)
        if current is not None and current[0] <= due:
            return
        if current is not None:
            current[1].cancel()
        # At least 1 ms: a timer that fires a hair early re-arms without spinning.
        delay = max(1, due - self.clock.now_ms()) / 1000
        handle = self.clock.call_later(delay, self._fire, group_id, tick)
        self._handles[group_id] = (due, handle)

    def _fire(self, group_id: str, tick: Callable[[str], Awaitable[None]]) -> None:
        self._handles.pop(group_id, None)
        if self.closed:
            return
        task = asyncio.get_running_loop().create_task(self._run(group_id, tick))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, group_id: str, tick: Callable[[str], Awaitable[None]]) -> None:
        with background_step(self.what, _log):
            await tick(group_id)

    def close(self) -> None:
        """Cancel every timer and running tick (the broker is stopping)."""
        self.closed = True
        for _, handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        for task in self._tasks:
            task.cancel()
