"""``consume`` in the direct mode: where each partition starts (the start options, else the
group's committed offsets, else the log start, archive included), partitions and topics
found while following, gaps retention left in the archive, and the run itself (Ctrl-C and
SIGTERM leave the group first). The records are read and printed by line_consumer.py's
``Consumer``; with a group, group_member.py's ``GroupMember`` takes part in it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from typing import Any

import click

from kafkaesque.cli.consume_start import BEGINNING, END, LAST, OFFSET, Start
from kafkaesque.cli.group_member import GroupMember
from kafkaesque.cli.line_consumer import Consumer, Formatter
from kafkaesque.cli.output import reader_gone
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.errors import UnknownTopic
from kafkaesque.groups.coordinator import GroupCoordinator
from kafkaesque.groups.types import CoordinatorConfig
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import LATEST, Partitions
from kafkaesque.types import TopicPartition as TP


class DirectStarts:
    """The partitions a direct consume reads and where each starts: the topics named (their
    ``configs``) and those ``regex`` matches, from ``start`` (None: none given); with a
    ``group``, its coordinator in this process."""

    def __init__(
        self,
        log: Log,
        configs: dict[str, TopicConfig],
        regex: re.Pattern[str] | None,
        start: Start | None,
        *,
        read_committed: bool,
        group: str | None,
        follow: bool,
    ) -> None:
        self.log = log
        self.layer = Partitions(log)
        self.configs = configs  # the topics named, until discover() looked at them
        self.named = list(configs)
        self.regex = regex
        self.start = start
        self.read_committed = read_committed
        self.group = group
        self.coordinator = None
        if group is not None:
            # As the broker's coordinator, in this process against the same Redis; a
            # one-off read does not wait for more members to join a new group.
            self.coordinator = GroupCoordinator(
                log, CoordinatorConfig(initial_rebalance_delay_ms=3000 if follow else 0)
            )
        # The archive leaves out transaction markers and aborted records too: only a gap
        # it recorded (retention dropped records before archiving) is news.
        self.dropped: dict[str, list[tuple[int, int, int]]] = {}
        self.compact: dict[str, bool] = {}

    async def subscription(self) -> list[str]:
        """The topics to read: those named, and those the pattern matches now."""
        names = list(self.named)
        if self.regex is not None:
            regex = self.regex
            names += [
                n for n in await self.log.list_topics() if regex.fullmatch(n) and n not in names
            ]
        return names

    async def earliest(self, t: str, p: int) -> int:
        if self.log.cold is not None:
            # From the first offset DeleteRecords left (0 if none): a gap at the start
            # (records retention dropped before archiving) is read across and reported.
            return (await self.log.state(t, p)).floor
        return await self.log.earliest_offset(t, p)

    async def end(self, t: str, p: int) -> int:
        found = await self.layer.list_offset(t, p, LATEST, committed=self.read_committed)
        assert found is not None  # the log end is always there
        return found.offset

    async def chosen(self, t: str, p: int) -> int | None:
        """Where the start options say, None when none was given."""
        start = self.start
        if start is None:
            return None
        if start.kind == BEGINNING:
            return await self.earliest(t, p)
        if start.kind == END:
            return await self.end(t, p)
        if start.kind == OFFSET:
            return start.value
        if start.kind == LAST:
            return max(await self.earliest(t, p), await self.end(t, p) - start.value)
        found = await self.layer.list_offset(t, p, start.value, committed=self.read_committed)
        return found.offset if found is not None else await self.end(t, p)

    async def start_at(self, tps: list[TP], first: bool) -> tuple[dict[TP, int], dict[TP, int]]:
        """Offsets (and epochs) to start newly assigned partitions at: on the first
        assignment the start options if given, else the group's committed offsets, else
        the start options, else the log start."""
        committed = {}
        if self.coordinator is not None:
            assert self.group is not None
            committed = await self.coordinator.admin.committed(self.group)
        offsets, epochs = {}, {}
        for t, p in tps:
            explicit = first or (t, p) not in committed
            at = await self.chosen(t, p) if explicit else None
            if at is None and (t, p) in committed:
                at = committed[t, p].offset
                if committed[t, p].leader_epoch >= 0:  # checked at the first read
                    epochs[t, p] = committed[t, p].leader_epoch
            offsets[t, p] = await self.earliest(t, p) if at is None else at
        return offsets, epochs

    async def gaps_of(self, t: str) -> None:
        if self.log.cold is not None and t not in self.dropped:
            self.dropped[t] = await self.log.cold.dropped_ranges(t)

    async def discover(self, known: set[TP]) -> dict[TP, int]:
        """Partitions added to the topics (`alter`, CreatePartitions), and topics the
        pattern matches, created since: read from their start."""
        new = []
        for t in await self.subscription():
            try:
                config = self.configs.get(t) or await self.log.topic(t)
            except UnknownTopic:
                continue
            self.configs.pop(t, None)  # partitions may be added: look again next time
            self.compact[t] = config.compact
            await self.gaps_of(t)
            new += [(t, p) for p in range(config.partitions) if (t, p) not in known]
        return {(t, p): await self.earliest(t, p) for t, p in new}

    async def subscribed(self) -> list[str]:
        """The group member's subscription, each topic's gaps and compaction known."""
        names = await self.subscription()
        for t in names:
            await self.gaps_of(t)
            if t not in self.compact:
                self.compact[t] = (await self.log.topic(t)).compact
        return names

    def report_gap(self, t: str, p: int, first: int, last_offset: int) -> None:
        # A compact topic's offsets have gaps wherever compaction removed records.
        if self.compact.get(t, False):
            return
        dropped = self.dropped.get(t, [])
        if any(dp == p and df <= last_offset and first <= dl for dp, df, dl in dropped):
            click.echo(
                f"offsets {first}..{last_offset} of {t}[{p}] were dropped by retention before "
                "archiving: not in the log",
                err=True,
            )


def report_truncation(t: str, p: int, at: int, was: int) -> None:
    """--on-truncation rewind: said on stderr, reading on from the truncation point."""
    click.echo(
        f"{t}[{p}] was truncated at offset {at} (Redis lost records it had not "
        f"archived): reading again from {at}, where {was - at} offsets read before now "
        "hold other records",
        err=True,
    )


async def consume_direct(
    starts: DirectStarts,
    partition: tuple[str, int] | None,
    *,
    pattern: str | None,
    fetch_size: int,
    fmt: str,
    formatter: Formatter | None,
    follow: bool,
    max_records: int | None,
    rewind: bool,
) -> None:
    """Print the records of ``starts``' partitions (or of the one ``partition``, or of
    those the group assigns); SIGTERM and Ctrl-C leave the group first."""
    log = starts.log
    for t, config in starts.configs.items():
        starts.compact[t] = config.compact
        await starts.gaps_of(t)
    member = None
    offsets: dict[TP, int] = {}
    coordinator = starts.coordinator
    if coordinator is not None:
        assert starts.group is not None
        member = GroupMember(log, coordinator, starts.group, starts.subscribed, starts.start_at)
    elif partition is not None:
        offsets, _ = await starts.start_at([partition], True)
    else:
        offsets, _ = await starts.start_at(list(await starts.discover(set())), True)
        if not offsets and not follow:
            raise click.ClickException(f"no topic matches --pattern {pattern}")

    consumer = Consumer(
        log,
        None,
        offsets,
        fetch_size=fetch_size,
        fmt=fmt,
        formatter=formatter,
        member=member,
        discover=starts.discover if partition is None else None,
        on_gap=starts.report_gap,
        read_committed=starts.read_committed,
        on_truncation=report_truncation if rewind else None,
    )
    out = sys.stdout.buffer
    terminated = False

    def on_sigterm(task: asyncio.Task[Any] | None) -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, on_sigterm, asyncio.current_task())
    try:
        if coordinator is not None:
            coordinator.start()
        await consumer.run(out, follow=follow, max_records=max_records)
        out.flush()
    except BrokenPipeError:
        reader_gone()
    except asyncio.CancelledError:
        if not terminated:
            raise  # Ctrl-C: asyncio.run turns it into KeyboardInterrupt (exit 130)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGTERM)
        # Leave the group (also on Ctrl-C and SIGTERM), so its others rebalance at once.
        if member is not None:
            await member.leave()
        if coordinator is not None:
            await coordinator.stop()
    if terminated:
        sys.exit(128 + signal.SIGTERM)
