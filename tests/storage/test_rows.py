"""Stored batches to archive rows: the fast parser against the reference decoder."""

from __future__ import annotations

import random

import pytest
from crc32c import crc32c

from kafkaesque.records.batch import Compression, InvalidRecord, decode_batch
from kafkaesque.records.build import build_batch
from storage_pg.pool import ms_to_pg, pg_to_ms
from storage_pg.rows import batch_rows, headers_json


def reference(batch: bytes, first_id: int, pid=None, epoch=None, seq=None) -> list[tuple]:
    base = int.from_bytes(batch[:8], "big")
    return [
        (
            first_id + r.offset - base,
            "t",
            3,
            r.offset,
            ms_to_pg(r.timestamp),
            r.key,
            r.value,
            headers_json(r.headers),
            pid,
            epoch,
            None if seq is None else (seq + r.offset - base) & 0x7FFFFFFF,
        )
        for r in decode_batch(batch)
    ]


@pytest.mark.parametrize("compression", list(Compression))
def test_every_shape_and_compression(compression: Compression) -> None:
    rng = random.Random(int(compression))
    for n in (1, 2, 70, 300):
        values = [
            None if i % 17 == 5 else rng.randbytes(rng.choice([0, 1, 63, 64, 200, 9000]))
            for i in range(n)
        ]
        keys = [None if i % 3 == 0 else rng.randbytes(rng.choice([0, 5, 300])) for i in range(n)]
        headers = [
            [(f"k{j}", None if j == 1 else b"v" * j) for j in range(i % 4)] for i in range(n)
        ]
        stamps = [1_700_000_000_000 + rng.randint(-(10**7), 10**7) for _ in range(n)]
        for kwargs in (
            {},
            {"keys": keys},
            {"headers": headers, "timestamps": stamps},
            {"keys": keys, "headers": headers, "timestamps": stamps},
        ):
            batch = build_batch(values, compression=compression, base_offset=1000, **kwargs)
            header, rows = batch_rows(batch, 50, "t", 3)
            assert rows == reference(batch, 50)
            assert header.record_count == n


def test_producer_fields_and_sequence_wrap() -> None:
    batch = build_batch(
        [b"a", b"b", b"c"], producer_id=9, producer_epoch=2, base_sequence=2**31 - 2
    )
    _, rows = batch_rows(batch, 1, "t", 3)
    assert [r[8:] for r in rows] == [(9, 2, 2**31 - 2), (9, 2, 2**31 - 1), (9, 2, 0)]
    _, rows = batch_rows(build_batch([b"a"]), 1, "t", 3)
    assert rows[0][8:] == (None, None, None)


def test_from_offset_skips_the_records_before() -> None:
    batch = build_batch([b"%d" % i for i in range(10)], base_offset=100)
    _, rows = batch_rows(batch, 1, "t", 3, from_offset=104)
    assert [(r[0], r[3], r[6]) for r in rows] == [
        (5 + i, 104 + i, b"%d" % (4 + i)) for i in range(6)
    ]


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    batch = bytearray(build_batch([b"a", b"b"], timestamps=[5, 7]))
    batch[22] |= 0x08  # attributes: timestampType = LogAppendTime
    batch[35:43] = (99).to_bytes(8, "big")  # maxTimestamp
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    _, rows = batch_rows(bytes(batch), 1, "t", 0)
    assert [pg_to_ms(r[4]) for r in rows] == [99, 99]


def test_garbage_records_are_refused() -> None:
    batch = bytearray(build_batch([b"abc", b"def"]))
    batch[-5] = 0x20  # the last value length: 16 bytes, beyond the record
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecord):
        batch_rows(bytes(batch), 1, "t", 0)
    with pytest.raises(InvalidRecord):
        batch_rows(b"\x00" * 70, 1, "t", 0)


def _stamps(n: int, kind: str, rng: random.Random) -> list[int]:
    base = 1_700_000_000_000
    if kind == "same":
        return [base] * n
    if kind == "clock":  # a producer's clock: a millisecond every few records
        return [base + i // 7 for i in range(n)]
    if kind == "wide":  # deltas of two and three varint bytes, some negative
        return [base + rng.randint(-(10**5), 10**5) for _ in range(n)]
    return [base + rng.randint(-60, 60) for _ in range(n)]  # one byte, signed


@pytest.mark.parametrize("n", [15, 16, 17, 63, 64, 65, 130, 1000, 8300])
def test_runs_of_one_layout_give_the_reference_rows(n: int) -> None:
    """Batches of equal records (what producers mostly send) are read a run at a time by
    strided slices (storage_pg/row_runs.py): every row as the reference decoder has it,
    across the offset delta's width changes (64, 8192), with keys, timestamps of every
    varint width, producer sequences and a start offset inside a run."""
    rng = random.Random(n)
    for kind in ("same", "clock", "small", "wide"):
        stamps = _stamps(n, kind, rng)
        values = [rng.randbytes(100) for _ in range(n)]
        keys = [rng.randbytes(8) for _ in range(n)]
        compressed = {"compression": Compression(n % 4 + 1)}  # each codec over the sizes
        for kwargs in ({}, {"keys": keys}, compressed):
            batch = build_batch(
                values,
                timestamps=stamps,
                base_offset=77,
                producer_id=4,
                producer_epoch=1,
                base_sequence=2**31 - 40,
                **kwargs,
            )
            _, rows = batch_rows(batch, 9, "t", 3)
            assert rows == reference(batch, 9, 4, 1, 2**31 - 40)
            _, rows = batch_rows(batch, 9, "t", 3, from_offset=77 + n // 2)
            assert rows == reference(batch, 9, 4, 1, 2**31 - 40)[n // 2 :]


def test_runs_broken_by_other_records_and_gaps() -> None:
    """A record of another size, one with headers, a null value or a key, and offset
    deltas with gaps (a compacted batch) end a run; the rows stay the reference's."""
    rng = random.Random(7)
    n = 300
    values: list[bytes | None] = [rng.randbytes(100) for _ in range(n)]
    values[40] = rng.randbytes(99)
    values[41] = None
    keys: list[bytes | None] = [None] * n
    keys[150] = b"k"
    headers = [[("h", b"v")] if i == 200 else [] for i in range(n)]
    stamps = _stamps(n, "clock", rng)
    batch = build_batch(values, keys, timestamps=stamps, headers=headers)
    assert batch_rows(batch, 1, "t", 3)[1] == reference(batch, 1)
    deltas = [i + i // 50 for i in range(n)]  # a gap every 50 records
    gapped = build_batch(values, keys, timestamps=stamps, offset_deltas=deltas)
    assert batch_rows(gapped, 1, "t", 3)[1] == reference(gapped, 1)


def test_a_damaged_record_inside_a_run_is_refused() -> None:
    """A run's records are checked as parse_record checks one: a value length changed in
    the middle of a run (the CRC made right again) refuses the batch, not a row of it."""
    batch = bytearray(build_batch([bytes(100)] * 60, timestamp=1_700_000_000_000))
    size = (len(batch) - 61) // 60  # 60 records of one size (offset deltas of one byte)
    assert (len(batch) - 61) % 60 == 0
    batch[61 + 40 * size + size - 1] = 2  # record 40's header count: 1, with no header
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecord):
        batch_rows(bytes(batch), 1, "t", 0)
    with pytest.raises(InvalidRecord):
        decode_batch(bytes(batch))
