"""Turn lines of input into record batches and append them: the CLI's producer."""

from __future__ import annotations

import os
import random
import select
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.partition.layer import Partitions
from kafkaesque.records.batch import Compression
from kafkaesque.records.build import build_batch
from kafkaesque.records.partitioner import partition_for_key

READ_CHUNK = 4 << 20  # input bytes split into lines at a time
NO_SIZE_LIMIT = 1 << 62
APPEND_BYTES = 8 << 20  # batch bytes per append script call: bounds how long Redis is busy


@dataclass(slots=True)
class ProduceSummary:
    records: int = 0
    bytes: int = 0  # input bytes consumed, line terminators included
    seconds: float = 0.0


def _would_not_block(stream: BinaryIO) -> Callable[[], bool]:
    """A check that the stream's next read returns at once: always for regular files and
    in-memory streams, else whether the descriptor (pipe, terminal, socket) is readable now."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return lambda: True
    if stat.S_ISREG(mode) or stat.S_ISBLK(mode):
        return lambda: True

    def readable() -> bool:
        try:
            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):  # cannot poll it: send what has been read
            return False

    return readable


def iter_line_chunks(stream: BinaryIO, chunk_size: int = READ_CHUNK):
    """Yield (lines, bytes consumed) per chunk. Only the b"\\n" terminator is removed; a
    last line without one is still a record; nothing is decoded.

    Reads take what is available (read1, else read: a raw stream's read returns what is
    there), so lines trickling in through a pipe or a terminal are yielded as soon as the
    next read would block, a partial last line waiting for its end or EOF. Input that is
    ready (a file, a fast pipe) is gathered into chunks of about chunk_size bytes, each held
    back until the next read has returned data, so a final unterminated line joins its chunk."""
    read = getattr(stream, "read1", None) or stream.read
    ready = _would_not_block(stream)
    leftover = b""
    lines: list[bytes] = []
    consumed = 0
    while True:
        data = read(chunk_size)
        if not data:
            break
        if consumed >= chunk_size:
            yield lines, consumed
            lines, consumed = [], 0
        chunk = (leftover + data).split(b"\n")
        leftover = chunk.pop()
        if lines:
            lines.extend(chunk)
        else:
            lines = chunk
        consumed += len(data)
        if not ready():
            # Nothing more yet: send what has arrived rather than wait for more.
            yield lines, consumed
            lines, consumed = [], 0
    if leftover:
        lines.append(leftover)
    if lines or consumed:
        yield lines, consumed


class LineProducer:
    """Batches lines per partition and appends them: keyed records by murmur2 of the key,
    keyless ones round-robin per batch, or all to one fixed partition.

    The round-robin starts at a random partition (from rng, default the random module), as
    the sticky partitioner of Kafka's producers does, so short runs spread over the
    partitions. With a key separator, each batch_size keyless records of a chunk go to one
    partition, the next ones to the next partition."""

    def __init__(
        self,
        log: Log,
        config: TopicConfig,
        *,
        batch_size: int = 1024,
        partition: int | None = None,
        key_separator: bytes | None = None,
        compression: Compression = Compression.NONE,
        rng: random.Random | None = None,
    ) -> None:
        # The partition layer, as the broker's: the CLI's own batches need no size limit
        # beyond Redis' (a line is one record, however long).
        self.partitions = Partitions(log, max_message_bytes=NO_SIZE_LIMIT)
        self.config = config
        self.batch_size = batch_size
        self.partition = partition
        self.key_separator = key_separator
        self.compression = compression
        self._next_partition = (rng or random).randrange(config.partitions)

    def _round_robin(self) -> int:
        p = self._next_partition
        self._next_partition = (p + 1) % self.config.partitions
        return p

    def _batches(self, lines: list[bytes]) -> dict[int, list[bytes]]:
        """Build this chunk's batches, grouped by partition."""
        size, now = self.batch_size, int(time.time() * 1000)
        out: dict[int, list[bytes]] = {}
        if self.key_separator is None:
            for i in range(0, len(lines), size):
                p = self.partition if self.partition is not None else self._round_robin()
                batch = build_batch(
                    lines[i : i + size], timestamp=now, compression=self.compression
                )
                out.setdefault(p, []).append(batch)
            return out
        # Keyed: a line without the separator is a record with a null key.
        per_partition: dict[int, tuple[list[bytes | None], list[bytes]]] = {}
        sep, n = self.key_separator, self.config.partitions
        keyless, keyless_partition = 0, 0
        key: bytes | None
        for line in lines:
            key, found, value = line.partition(sep)
            if not found:
                key, value = None, line
            if self.partition is not None:
                p = self.partition
            elif key is None:
                # A batch of keyless records to one partition, the next batch to the next.
                if keyless % size == 0:
                    keyless_partition = self._round_robin()
                keyless += 1
                p = keyless_partition
            else:
                p = partition_for_key(key, n)
            keys, values = per_partition.setdefault(p, ([], []))
            keys.append(key)
            values.append(value)
        for p, (keys, values) in per_partition.items():
            out[p] = [
                build_batch(
                    values[i : i + size],
                    keys[i : i + size],
                    timestamp=now,
                    compression=self.compression,
                )
                for i in range(0, len(values), size)
            ]
        return out

    async def send(self, lines: list[bytes]) -> None:
        """Append the lines as records; batches of one partition keep their order."""
        for p, batches in self._batches(lines).items():
            group: list[bytes] = []
            group_bytes = 0
            for batch in batches:
                group.append(batch)
                group_bytes += len(batch)
                if group_bytes >= APPEND_BYTES:
                    await self.partitions.append(self.config.name, p, group)
                    group, group_bytes = [], 0
            if group:
                await self.partitions.append(self.config.name, p, group)

    async def produce(
        self, stream: BinaryIO, progress: Callable[[int], None] | None = None
    ) -> ProduceSummary:
        summary = ProduceSummary()
        started = time.perf_counter()
        for lines, consumed in iter_line_chunks(stream):
            if lines:
                await self.send(lines)
                summary.records += len(lines)
            summary.bytes += consumed
            if progress is not None:
                progress(consumed)
        summary.seconds = time.perf_counter() - started
        return summary
