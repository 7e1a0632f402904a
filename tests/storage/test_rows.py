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
