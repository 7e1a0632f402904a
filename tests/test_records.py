"""Tests for kafkaesque.records.batch (Kafka RecordBatch v2), with its record_body and
compression modules.

Batches are also assembled by hand here (struct + crc32c + a local varint
encoder) so the module is checked against the spec, not only against itself.
"""

from __future__ import annotations

import dataclasses
import io
import random
import struct
import time

import cramjam
import pytest
from crc32c import crc32c

import kafkaesque.records.batch as records_module
from kafkaesque.errors import InvalidRecord
from kafkaesque.records.batch import (
    HEADER_SIZE,
    MAX_CLIENT_RECORDS_BYTES,
    BatchHeader,
    CorruptBatch,
    TimestampType,
    base_offset,
    check_batch,
    check_client_batch,
    decode_batch,
    decode_batch_and_header,
    decode_values,
    iter_records,
    next_offset,
    offset_count,
    producer_fields,
    read_header,
    record_count,
    record_keys,
    split_batches,
    with_base_offset,
)
from kafkaesque.records.body import (
    Record,
    encode_varint,
    parse_record,
    read_varint,
)
from kafkaesque.records.build import build_batch, rebuild_batch, rewrite_batch
from kafkaesque.records.check import check_plain_records
from kafkaesque.records.compression import Compression, DecompressionError, compress, decompress

TS = 1_700_000_000_000
ALL_CODECS = list(Compression)


# --- independent spec helpers ---------------------------------------------------


def zigzag(n: int) -> bytes:
    """Reference zigzag varint encoder, written straight from the protobuf spec."""
    v = (n << 1) if n >= 0 else ((-n) << 1) - 1
    out = b""
    while True:
        if v < 0x80:
            return out + bytes([v])
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7


def field(b: bytes | None) -> bytes:
    return zigzag(-1) if b is None else zigzag(len(b)) + b


def record(offset_delta, value, key=None, ts_delta=0, headers=()) -> bytes:
    body = b"\x00" + zigzag(ts_delta) + zigzag(offset_delta) + field(key) + field(value)
    body += zigzag(len(headers))
    for hkey, hvalue in headers:
        body += field(hkey.encode()) + field(hvalue)
    return zigzag(len(body)) + body


def assemble(
    records: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    base_ts: int = TS,
    max_ts: int | None = None,
    last_offset_delta: int | None = None,
    magic: int = 2,
) -> bytes:
    """A batch from an already encoded (and possibly compressed) records blob."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    max_ts = base_ts if max_ts is None else max_ts
    covered = struct.pack(">hiqqqhii", attributes, lod, base_ts, max_ts, -1, -1, -1, count)
    covered += records
    prefix = struct.pack(">qiibI", base_offset, len(covered) + 9, -1, magic, crc32c(covered))
    return prefix + covered


def records_blob(batch: bytes) -> bytes:
    return batch[HEADER_SIZE:]


# --- golden batches -------------------------------------------------------------


def test_golden_record_with_key_and_header():
    body = b"\x00" + b"\x00" + b"\x00" + b"\x02k" + b"\x0ahello" + b"\x02" + b"\x02h" + b"\x02v"
    records = bytes([len(body) * 2]) + body
    covered = struct.pack(">hiqqqhii", 0, 0, TS, TS, -1, -1, -1, 1) + records
    expected = struct.pack(">qiibI", 0, 9 + len(covered), -1, 2, crc32c(covered)) + covered

    built = build_batch([b"hello"], [b"k"], timestamp=TS, headers=[[("h", b"v")]])
    assert built == expected
    assert len(built) == HEADER_SIZE + len(records)


def test_golden_keyless_fast_path():
    records = (
        b"\x16" + b"\x00\x00\x00\x01\x0ahello\x00" + b"\x16" + b"\x00\x00\x02\x01\x0aworld\x00"
    )
    covered = struct.pack(">hiqqqhii", 0, 1, TS, TS, 7, 3, 42, 2) + records
    expected = struct.pack(">qiibI", 5, 9 + len(covered), -1, 2, crc32c(covered)) + covered

    built = build_batch(
        [b"hello", b"world"],
        timestamp=TS,
        base_offset=5,
        producer_id=7,
        producer_epoch=3,
        base_sequence=42,
    )
    assert built == expected


def test_hand_made_batch_decodes():
    blob = record(0, b"v0", key=b"k0", ts_delta=5) + record(1, None, headers=[("a", None)])
    batch = assemble(blob, 2, base_offset=100, max_ts=TS + 5)
    assert decode_batch(batch) == [
        Record(100, TS + 5, b"k0", b"v0", []),
        Record(101, TS, None, None, [("a", None)]),
    ]
    assert decode_values(batch) == [b"v0", None]


# --- round trips ----------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_all_fields(codec):
    values = [b"plain", None, b"", b"x" * 300, b"\x00\xff" * 40, b"last"]
    keys = [None, b"", b"key", b"k" * 200, None, b"\x80"]
    headers = [[], [("h", None)], [("h1", b"v1"), ("h2", b"")], [("\u00e9t\u00e9", b"x")], [], []]
    timestamps = [TS + 10, TS, TS + 5, TS - 3_600_000, TS + 99, TS + 1]
    batch = build_batch(
        values, keys, timestamps=timestamps, headers=headers, compression=codec, base_offset=7
    )

    header = check_batch(batch)
    assert header.compression == codec
    assert header.length == len(batch)
    assert header.record_count == len(values)
    assert header.last_offset_delta == len(values) - 1
    assert header.base_timestamp == timestamps[0]
    assert header.max_timestamp == max(timestamps)
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert not header.is_transactional and not header.is_control

    expected = [
        Record(7 + i, timestamps[i], keys[i], values[i], headers[i]) for i in range(len(values))
    ]
    assert decode_batch(batch) == expected
    assert decode_values(batch) == values


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip_keyless(codec):
    values = [b"line %d" % i for i in range(3000)]
    batch = build_batch(values, timestamp=TS, compression=codec)
    assert decode_values(batch) == values
    records = decode_batch(batch)
    assert [r.offset for r in records] == list(range(3000))
    assert {r.timestamp for r in records} == {TS}
    assert all(r.key is None and r.headers == [] for r in records)


def test_null_versus_empty_keys_and_values():
    batch = build_batch([None, b"", b"v", None], [b"", None, None, b"k"], timestamp=TS)
    records = decode_batch(batch)
    assert [(r.key, r.value) for r in records] == [
        (b"", None),
        (None, b""),
        (None, b"v"),
        (b"k", None),
    ]
    assert decode_values(build_batch([None, b""], timestamp=TS)) == [None, b""]


def test_default_timestamp_is_now():
    before = int(time.time() * 1000)
    header = read_header(build_batch([b"v"]))
    assert before <= header.base_timestamp <= int(time.time() * 1000)


def test_fast_and_general_encoders_agree():
    values = [b"a" * n for n in (0, 1, 57, 58, 63, 64, 200, 8191, 8192, 9000)] * 20
    fast = build_batch(values, timestamp=TS)
    general = build_batch(values, [None] * len(values), timestamp=TS)  # keys force the general path
    assert fast == general
    assert fast == assemble(b"".join(record(i, v) for i, v in enumerate(values)), len(values))


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD, Compression.LZ4])
def test_large_batch(codec):
    rng = random.Random(1)
    sizes = [rng.choice((0, 1, 10, 63, 64, 100, 1000)) for _ in range(10_000)]
    sizes[::1000] = [100_000] * 10
    values = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    batch = build_batch(values, timestamp=TS, compression=codec)
    assert check_batch(batch).record_count == 10_000
    assert decode_values(batch) == values
    assert [r.value for r in decode_batch(batch)] == values


# --- varints --------------------------------------------------------------------

VARINT_CASES = [0, 1, -1, 63, -64, 64, -65, 8191, 8192, -8193, 2**31 - 1, -(2**31), 2**63 - 1]


@pytest.mark.parametrize("n", VARINT_CASES)
def test_varint_matches_reference_and_round_trips(n):
    encoded = encode_varint(n)
    assert encoded == zigzag(n)
    assert read_varint(encoded + b"\xff", 0) == (n, len(encoded))


def test_varint_known_encodings():
    assert zigzag(-1) == encode_varint(-1) == b"\x01"
    assert encode_varint(63) == b"\x7e"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(8191) == b"\xfe\x7f"
    assert encode_varint(8192) == b"\x80\x80\x01"
    assert encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f"


@pytest.mark.parametrize("size", [0, 63, 64, 8191, 8192, 70_000])
def test_length_varint_boundaries(size):
    value = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for batch in (
        build_batch([value, b"x", value], timestamp=TS),
        build_batch([value, b"x"], [value, None], timestamp=TS),
        build_batch([b"x", value], timestamps=[TS, TS + 2**40], headers=[[(" ", value)], []]),
    ):
        records = decode_batch(batch)
        assert value in [r.value for r in records]
        assert decode_values(batch) == [r.value for r in records]


def test_decode_values_matches_decode_batch_on_odd_shapes():
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, 200)
        values = [
            rng.choice([None, b"", rng.randbytes(rng.choice((1, 60, 70, 9000)))]) for _ in range(n)
        ]
        keys = [rng.choice([None, b"", b"k" * rng.choice((1, 70))]) for _ in range(n)]
        timestamps = [TS + rng.choice((0, 1, -1, 10**6, -(10**9))) for _ in range(n)]
        headers = [rng.choice([[], [("h", None)]]) for _ in range(n)]
        batch = build_batch(values, keys, timestamps=timestamps, headers=headers)
        assert decode_values(batch) == [r.value for r in decode_batch(batch)] == values


# --- with_base_offset -----------------------------------------------------------


def test_with_base_offset_patches_only_offset_and_epoch():
    batch = build_batch([b"a", b"b"], timestamp=TS)
    patched = with_base_offset(batch, 1_000_000)
    assert patched[8:] == batch[8:]
    assert struct.unpack_from(">q", patched)[0] == 1_000_000
    assert check_batch(patched).crc == check_batch(batch).crc
    assert [r.offset for r in decode_batch(patched)] == [1_000_000, 1_000_001]

    with_epoch = with_base_offset(batch, 5, leader_epoch=9)
    assert with_epoch[8:12] == batch[8:12] and with_epoch[16:] == batch[16:]
    header = check_batch(with_epoch)
    assert (header.base_offset, header.partition_leader_epoch) == (5, 9)
    assert isinstance(with_epoch, bytes)


def test_with_base_offset_rejects_short_buffer():
    with pytest.raises(InvalidRecord):
        with_base_offset(b"\x00" * 20, 1)


# --- header field positions and accessors ---------------------------------------

# The v2 header as the Kafka protocol spec lists it: field, type, BatchHeader attribute.
SPEC_HEADER = [
    ("BASE_OFFSET", "q", "base_offset"),
    ("BATCH_LENGTH", "i", None),  # BatchHeader.length adds the 12 bytes before it
    ("PARTITION_LEADER_EPOCH", "i", "partition_leader_epoch"),
    ("MAGIC_FIELD", "b", "magic"),
    ("CRC", "I", "crc"),
    ("ATTRIBUTES", "h", "attributes"),
    ("LAST_OFFSET_DELTA", "i", "last_offset_delta"),
    ("BASE_TIMESTAMP", "q", "base_timestamp"),
    ("MAX_TIMESTAMP", "q", "max_timestamp"),
    ("PRODUCER_ID", "q", "producer_id"),
    ("PRODUCER_EPOCH", "h", "producer_epoch"),
    ("BASE_SEQUENCE", "i", "base_sequence"),
    ("RECORD_COUNT", "i", "record_count"),
]


def test_field_positions_follow_the_spec():
    pos = 0
    for name, code, _ in SPEC_HEADER:
        size = struct.calcsize(">" + code)
        assert getattr(records_module, name) == slice(pos, pos + size), name
        pos += size
    assert pos == HEADER_SIZE == 61


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_field_positions_read_what_read_header_reads(codec):
    batch = with_base_offset(
        build_batch(
            [b"a", None, b"c"],
            timestamps=[TS + 1, TS + 9, TS],
            compression=codec,
            producer_id=2**40 + 3,
            producer_epoch=12,
            base_sequence=77,
        ),
        2**33 + 1,
        leader_epoch=4,
    )
    header = read_header(batch)
    for name, code, attr in SPEC_HEADER:
        (value,) = struct.unpack(">" + code, batch[getattr(records_module, name)])
        assert value == (header.length - 12 if attr is None else getattr(header, attr)), name


def test_accessors_read_offsets_and_producer_fields():
    batch = build_batch(
        [b"x", b"y", b"z"],
        timestamp=TS,
        compression=Compression.ZSTD,
        base_offset=2**40 + 5,
        producer_id=2**50 + 1,
        producer_epoch=300,
        base_sequence=2**31 - 2,
    )
    assert base_offset(batch) == 2**40 + 5
    assert offset_count(batch) == 3
    assert next_offset(batch) == 2**40 + 8
    assert producer_fields(batch) == (2**50 + 1, 300, 2**31 - 2)
    # They read stored bytes as they are: memoryviews, patched offsets, no CRC check.
    moved = with_base_offset(batch, 7, leader_epoch=1)
    assert (base_offset(moved), next_offset(memoryview(moved))) == (7, 10)
    assert producer_fields(memoryview(moved)) == producer_fields(batch)


def test_accessors_of_a_plain_producer_and_an_offset_gap():
    assert producer_fields(build_batch([b"v"], timestamp=TS)) == (-1, -1, -1)
    # A compacted batch may span more offsets than it holds records: lastOffsetDelta counts.
    sparse = assemble(record(0, b"a"), 1, base_offset=10, last_offset_delta=4)
    assert (offset_count(sparse), next_offset(sparse)) == (5, 15)


# --- check_batch ----------------------------------------------------------------


def test_read_header_fields():
    batch = build_batch([b"v"] * 3, timestamp=TS, producer_id=11, producer_epoch=2, base_sequence=8)
    assert read_header(batch) == BatchHeader(
        base_offset=0,
        length=len(batch),
        partition_leader_epoch=-1,
        magic=2,
        crc=struct.unpack_from(">I", batch, 17)[0],
        attributes=0,
        last_offset_delta=2,
        base_timestamp=TS,
        max_timestamp=TS,
        producer_id=11,
        producer_epoch=2,
        base_sequence=8,
        record_count=3,
    )


def test_check_batch_rejects_flipped_bytes():
    batch = build_batch([b"hello", b"world"], [b"k", None], timestamp=TS)
    for pos in range(21, len(batch)):  # everything the CRC covers
        corrupt = bytearray(batch)
        corrupt[pos] ^= 0x01
        with pytest.raises(InvalidRecord):
            check_batch(bytes(corrupt))
    corrupt = bytearray(batch)
    corrupt[17] ^= 0xFF  # the stored CRC itself
    with pytest.raises(InvalidRecord, match="CRC"):
        check_batch(bytes(corrupt))


def test_check_batch_rejects_wrong_magic():
    batch = bytearray(build_batch([b"v"], timestamp=TS))
    batch[16] = 1
    with pytest.raises(InvalidRecord, match="magic"):
        check_batch(bytes(batch))
    with pytest.raises(InvalidRecord, match="magic"):
        check_batch(assemble(record(0, b"v"), 1, magic=0))


def test_check_batch_rejects_truncation():
    batch = build_batch([b"hello", b"world"], timestamp=TS)
    for n in range(len(batch)):
        with pytest.raises(InvalidRecord):
            check_batch(batch[:n])


def test_check_batch_rejects_bad_lengths():
    batch = build_batch([b"v"], timestamp=TS)
    too_long = batch[:8] + struct.pack(">i", len(batch)) + batch[12:]
    with pytest.raises(InvalidRecord, match="truncated"):
        check_batch(too_long)
    too_short = batch[:8] + struct.pack(">i", 30) + batch[12:]
    with pytest.raises(InvalidRecord, match="shorter"):
        check_batch(too_short)
    negative = batch[:8] + struct.pack(">i", -5) + batch[12:]
    with pytest.raises(InvalidRecord):
        check_batch(negative)


def test_check_batch_rejects_inconsistent_counts_and_codec():
    blob = record(0, b"a") + record(1, b"b")
    with pytest.raises(InvalidRecord, match="last offset delta"):
        check_batch(assemble(blob, 2, last_offset_delta=0))  # more records than offsets
    with pytest.raises(InvalidRecord, match="last offset delta"):
        check_batch(assemble(blob, -1))
    # A compacted batch spans more offsets than it holds records; a client may not send one.
    sparse = assemble(blob, 2, last_offset_delta=5)
    assert check_batch(sparse).record_count == 2
    with pytest.raises(InvalidRecord, match="last offset delta"):
        check_client_batch(sparse)
    with pytest.raises(InvalidRecord, match="compression"):
        check_batch(assemble(blob, 2, attributes=6))


# --- check_client_batch: what a producer may send -------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_client_batches_of_every_codec_pass(codec):
    batch = build_batch([b"a", b"", None], [None, b"k", b"k"], timestamp=TS, compression=codec)
    assert check_client_batch(batch).record_count == 3
    assert split_batches(batch + batch) == [batch, batch]


@pytest.mark.parametrize(
    ("blob", "count", "attributes", "message"),
    [
        (record(0, b"a"), 1, 0x20, "control"),  # only the broker writes markers
        (b"", 0, 0, "at least one record"),
        (record(0, b"a"), 5, 0, "record"),  # 5 announced, 1 present: an offset gap
        (record(0, b"a") + record(1, b"b"), 1, 0, "more data"),
        (record(0, b"a") + record(0, b"b"), 2, 0, "offset delta 0"),  # duplicate offset
        (record(1, b"a") + record(0, b"b"), 2, 0, "offset delta 1"),
        (b"\x7f" * 40, 2, 0, "bad record length"),  # garbage under a valid CRC
        # a header key that is not UTF-8
        (record(0, b"a", headers=[("h", b"v")]).replace(b"\x02h", b"\x02\xff"), 1, 0, "utf-8"),
    ],
)
def test_client_batch_rejects_what_kafka_rejects(blob, count, attributes, message):
    batch = assemble(blob, count, attributes=attributes)
    check_batch(batch)  # the bytes are intact: the content is wrong
    with pytest.raises(InvalidRecord, match=message) as caught:
        check_client_batch(batch)
    assert not isinstance(caught.value, CorruptBatch)
    with pytest.raises(InvalidRecord):
        split_batches(build_batch([b"ok"], timestamp=TS) + batch)


def test_damaged_bytes_are_corrupt_batches():
    batch = build_batch([b"hello"], timestamp=TS)
    flipped = batch[:-1] + bytes([batch[-1] ^ 1])
    for damaged in (flipped, batch[:-1], batch[:30]):
        with pytest.raises(CorruptBatch):
            check_client_batch(damaged)


def test_split_batches_says_of_a_view_what_it_says_of_the_bytes():
    """split_batches checks a copy of each batch (one copy of a request's view): whatever
    the damage, the error is the one check_client_batch gives for the buffer itself."""
    good = build_batch([b"ok"], timestamp=TS)
    batch = build_batch([b"hello", b"world"], timestamp=TS)
    longer = batch[:8] + (len(batch) - 11).to_bytes(4, "big") + batch[12:]
    shorter = batch[:8] + (40).to_bytes(4, "big") + batch[12:]
    wrong_magic = batch[:16] + b"\x01" + batch[17:]
    flipped = batch[:-1] + bytes([batch[-1] ^ 1])
    for damaged in (batch[:-1], batch[:30], batch[:10], longer, shorter, wrong_magic, flipped):
        with pytest.raises(InvalidRecord) as direct:
            check_client_batch(good + damaged, len(good))
        for buf in (
            good + damaged,
            memoryview(good + damaged),
            memoryview(b"x" + good + damaged)[1:],
        ):
            with pytest.raises(InvalidRecord) as split:
                split_batches(buf)
            assert (type(split.value), str(split.value)) == (type(direct.value), str(direct.value))


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"garbage",
        b"\x00" * 61,
        b"\xff" * 100,
        bytes(range(256)),
        random.Random(3).randbytes(500),
    ],
)
def test_check_batch_rejects_garbage(garbage):
    with pytest.raises(InvalidRecord):
        check_batch(garbage)
    with pytest.raises(InvalidRecord):
        decode_batch(garbage)
    with pytest.raises(InvalidRecord):
        decode_values(garbage)


def test_check_batch_at_position_and_memoryview():
    first, second = build_batch([b"a"], timestamp=TS), build_batch([b"b", b"c"], timestamp=TS)
    buf = first + second
    assert check_batch(buf, len(first)).record_count == 2
    assert decode_values(memoryview(buf), len(first)) == [b"b", b"c"]
    assert decode_batch(bytearray(buf), len(first))[1].value == b"c"


# --- split_batches / iter_records -----------------------------------------------


def test_split_batches():
    batches = [
        build_batch([b"a"], timestamp=TS),
        build_batch([b"b", b"c"], timestamp=TS, compression=Compression.GZIP),
        build_batch([b"d"], [b"k"], timestamp=TS),
    ]
    joined = b"".join(batches)
    assert split_batches(joined) == batches
    assert split_batches(memoryview(joined)) == batches
    assert split_batches(b"") == []
    assert [r.value for r in iter_records([joined, batches[0]])] == [b"a", b"b", b"c", b"d", b"a"]


@pytest.mark.parametrize("tail", [b"x", b"\x00" * 11, b"\x00" * 70])
def test_split_batches_rejects_trailing_garbage(tail):
    joined = build_batch([b"a"], timestamp=TS) + build_batch([b"b"], timestamp=TS)
    with pytest.raises(InvalidRecord):
        split_batches(joined + tail)
    with pytest.raises(InvalidRecord):
        split_batches(joined[:-1])  # partial last batch


# --- record-level validation ----------------------------------------------------


def test_record_count_disagreeing_with_content():
    blob = record(0, b"a") + record(1, b"b")
    for batch in (assemble(blob, 3), assemble(blob, 1), assemble(blob + b"\x00", 2)):
        with pytest.raises(InvalidRecord):
            decode_batch(batch)
        with pytest.raises(InvalidRecord):
            decode_values(batch)


def test_offset_deltas_must_be_within_batch():
    for delta in (-1, 2):
        batch = assemble(record(0, b"a") + record(delta, b"b"), 2)
        with pytest.raises(InvalidRecord, match="offset delta"):
            decode_batch(batch)


def test_bad_record_lengths_and_varints():
    cases = [
        zigzag(-5) + record(0, b"a")[1:],  # negative record length
        zigzag(8) + record(0, b"a")[1:],  # record length disagrees with content
        record(0, b"a")[:-1] + b"\x02",  # header count beyond the record
        b"\x0e\x00" + b"\xff" * 11 + b"\x00",  # overlong varint
        record(0, b"abc")[:5] + zigzag(-2) + b"abc\x00",  # key length -2
        record(0, None, headers=[("\xff", b"v")]).replace(b"\xc3\xbf", b"\xff\xfe"),
    ]
    for blob in cases:
        batch = assemble(blob, 1)
        with pytest.raises(InvalidRecord):
            decode_batch(batch)
        with pytest.raises(InvalidRecord):
            decode_values(batch)


def test_fuzzed_records_raise_only_invalid_record():
    rng = random.Random(11)
    values = [b"value %d" % i for i in range(20)] + [b"v" * 100, None]
    keys = [None] * 20 + [b"k", b""]
    blob = records_blob(build_batch(values, keys, timestamp=TS, headers=[[]] * 21 + [[("h", b"")]]))
    for _ in range(3000):
        mutated = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.choice(
                (0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256))
            )
        if rng.random() < 0.3:
            del mutated[rng.randrange(len(mutated)) :]
        batch = assemble(bytes(mutated), len(values))  # valid CRC over corrupt records
        for decode in (decode_batch, decode_values):
            try:
                decode(batch)
            except InvalidRecord:
                pass


# --- compression specifics ------------------------------------------------------


def test_snappy_raw_and_xerial_both_decode():
    blob = b"".join(record(i, b"value %d" % i) for i in range(100))
    raw = assemble(bytes(cramjam.snappy.compress_raw(blob)), 100, attributes=2)
    chunks = [blob[:1000], blob[1000:]]
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for chunk in chunks:
        block = bytes(cramjam.snappy.compress_raw(chunk))
        xerial += struct.pack(">i", len(block)) + block
    xerial_batch = assemble(xerial, 100, attributes=2)
    expected = [b"value %d" % i for i in range(100)]
    assert decode_values(raw) == decode_values(xerial_batch) == expected
    assert decode_batch(raw) == decode_batch(xerial_batch)


def test_snappy_builds_xerial_framing():
    batch = build_batch(
        [b"x" * 50_000, b"y" * 50_000], timestamp=TS, compression=Compression.SNAPPY
    )
    blob = records_blob(batch)
    assert blob.startswith(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    assert decode_values(batch) == [b"x" * 50_000, b"y" * 50_000]


def test_lz4_frame_has_independent_blocks():
    blob = records_blob(build_batch([b"v" * 1000], timestamp=TS, compression=Compression.LZ4))
    assert blob[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert blob[4] & 0x20  # the Java client only reads independent blocks


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c])
def test_undecompressable_payload(codec):
    batch = assemble(b"\x00not compressed at all" * 3, 1, attributes=int(codec))
    with pytest.raises(InvalidRecord):
        decode_batch(batch)
    with pytest.raises(InvalidRecord):
        decode_values(batch)


@pytest.mark.parametrize(
    ("codec", "raw_snappy"), [(c, False) for c in ALL_CODECS if c] + [(Compression.SNAPPY, True)]
)
def test_decompress_within_a_limit(codec, raw_snappy):
    data = bytes(range(256)) * 200  # several xerial blocks' worth
    blob = bytes(cramjam.snappy.compress_raw(data)) if raw_snappy else compress(codec, data)
    assert decompress(codec, blob, limit=len(data)) == data
    with pytest.raises(DecompressionError, match="at most"):
        decompress(codec, blob, limit=len(data) - 1)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_client_batch_decompressing_too_far_is_refused(codec):
    """A decompression bomb: kilobytes that expand to more than a client batch may hold
    are refused without being decompressed whole."""
    bomb = compress(codec, bytes(MAX_CLIENT_RECORDS_BYTES + 1))
    batch = assemble(bomb, 1, attributes=int(codec))
    with pytest.raises(InvalidRecord, match="at most"):
        check_client_batch(batch)


# --- attributes -----------------------------------------------------------------


def test_log_append_time_uses_max_timestamp():
    blob = record(0, b"a", ts_delta=1) + record(1, b"b", ts_delta=2)
    batch = assemble(blob, 2, attributes=0x08, max_ts=TS + 500)
    assert read_header(batch).timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decode_batch(batch)] == [TS + 500, TS + 500]


def test_control_batch():
    batch = assemble(
        record(0, b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x00"), 1, attributes=0x30
    )
    header = check_batch(batch)
    assert header.is_control and header.is_transactional
    assert decode_values(batch) == []  # transaction markers are not data
    assert len(decode_batch(batch)) == 1


# --- the broker's rewrites ---------------------------------------------------------


def _header_without(batch: bytes, *names: str) -> dict:
    """The batch's header fields, without those a rewrite may change."""
    return {k: v for k, v in dataclasses.asdict(read_header(batch)).items() if k not in names}


def test_rewrite_stamps_log_append_time_as_kafka_does():
    """Only the timestamp-type bit and maxTimestamp change (and the CRC they are under):
    records and baseTimestamp stay, readers take maxTimestamp for every record."""
    sent = build_batch(
        [b"a", b"b"], [b"k", None], timestamps=[TS, TS + 7], producer_id=9, base_sequence=4
    )
    sent = with_base_offset(sent, 40, leader_epoch=3)
    stamped = rewrite_batch(sent, log_append_time=TS + 1000)
    header = check_batch(stamped)  # the CRC is recomputed
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS + 1000)
    assert header.attributes == read_header(sent).attributes | 0x08
    assert _header_without(stamped, "crc", "attributes", "max_timestamp") == _header_without(
        sent, "crc", "attributes", "max_timestamp"
    )
    assert records_blob(stamped) == records_blob(sent)
    assert [r.timestamp for r in decode_batch(stamped)] == [TS + 1000, TS + 1000]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_rewrite_with_recompressed_records_keeps_every_other_field(codec):
    sent = build_batch(
        [b"v" * 50, None],
        [b"k", b""],
        headers=[[("h", b"1")], []],
        timestamps=[TS, TS + 3],
        compression=Compression.GZIP,
        producer_id=7,
        producer_epoch=2,
        base_sequence=11,
    )
    sent = with_base_offset(sent, 5, leader_epoch=1)
    plain = decompress(Compression.GZIP, records_blob(sent))
    rewritten = rewrite_batch(sent, records=compress(codec, plain), compression=codec)
    header = check_batch(rewritten)
    assert header.compression is codec
    assert header.length == HEADER_SIZE + len(compress(codec, plain))
    assert _header_without(rewritten, "crc", "attributes", "length") == _header_without(
        sent, "crc", "attributes", "length"
    )
    assert decode_batch(rewritten) == decode_batch(sent)
    stamped = rewrite_batch(sent, records=plain, compression=Compression.NONE, log_append_time=1)
    assert check_batch(stamped).attributes == 0x08


def test_rewrite_keeps_the_transactional_bit():
    sent = build_batch([b"x"], compression=Compression.LZ4)
    attributes = struct.unpack_from(">h", sent, 21)[0] | 0x10
    covered = struct.pack(">h", attributes) + sent[23:]
    sent = sent[:17] + struct.pack(">I", crc32c(covered)) + covered
    plain = decompress(Compression.LZ4, records_blob(sent))
    rewritten = rewrite_batch(sent, records=plain, compression=Compression.NONE)
    assert check_batch(rewritten).attributes == 0x10


def test_rewrite_needs_new_records_and_their_codec_together():
    sent = build_batch([b"x"])
    with pytest.raises(ValueError, match="together"):
        rewrite_batch(sent, records=records_blob(sent))
    with pytest.raises(ValueError, match="together"):
        rewrite_batch(sent, compression=Compression.GZIP)


def test_compress_levels():
    """compression.*.level reach the codecs: a higher level packs text tighter."""
    text = b" ".join(
        b"record %d of a log of words, some repeated: %d" % (i, i % 7) for i in range(2000)
    )
    for codec, fast, small in (
        (Compression.GZIP, 1, 9),
        (Compression.ZSTD, -5, 19),
        (Compression.LZ4, 1, 17),
    ):
        assert len(compress(codec, text, fast)) > len(compress(codec, text, small)), codec
        assert decompress(codec, compress(codec, text, small)) == text
    assert compress(Compression.NONE, text) == text


def test_compression_parse():
    assert Compression.parse("zstd") is Compression.ZSTD
    assert Compression.parse(" LZ4 ") is Compression.LZ4
    assert Compression.parse("none") is Compression.NONE
    with pytest.raises(ValueError, match="gzip"):
        Compression.parse("brotli")


def test_build_batch_argument_errors():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError, match="keys"):
        build_batch([b"a", b"b"], [b"k"])
    with pytest.raises(ValueError, match="headers"):
        build_batch([b"a"], headers=[[], []])
    with pytest.raises(ValueError, match="either"):
        build_batch([b"a"], timestamp=1, timestamps=[1])


# --- rebuilding: what the compactor writes ---------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_rebuilt_batch_keeps_offsets_producer_and_codec(codec):
    batch = build_batch(
        [b"a", None, b"c", b"d"],
        [b"k1", b"k2", b"k1", b"k3"],
        timestamps=[TS + 30, TS + 10, TS + 20, TS + 5],
        headers=[[], [("h", b"x")], [], []],
        compression=codec,
        base_offset=100,
        producer_id=5,
        producer_epoch=1,
        base_sequence=7,
    )
    batch = with_base_offset(batch, 100, leader_epoch=3)
    header, kept = decode_batch_and_header(batch)
    rebuilt = rebuild_batch(header, [kept[1], kept[2]])
    new = check_batch(rebuilt)  # a valid batch: lengths and CRC recomputed
    # Still spans offsets 100..103 (a reader moves past its end); two records left.
    assert (new.base_offset, new.last_offset_delta, new.record_count) == (100, 3, 2)
    assert (offset_count(rebuilt), record_count(rebuilt), next_offset(rebuilt)) == (4, 2, 104)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (5, 1, 7)
    assert (new.partition_leader_epoch, new.compression) == (3, codec)
    assert (new.base_timestamp, new.max_timestamp) == (TS + 10, TS + 20)
    assert decode_batch(rebuilt) == [kept[1], kept[2]]
    assert decode_values(rebuilt) == [None, b"c"]


def test_rebuilt_log_append_time_batch_keeps_its_time():
    blob = record(0, b"a", key=b"k") + record(1, b"b", key=b"j") + record(2, b"c", key=b"k")
    batch = assemble(blob, 3, attributes=0x08, max_ts=TS + 500)
    header, kept = decode_batch_and_header(batch)
    rebuilt = rebuild_batch(header, kept[1:])
    assert read_header(rebuilt).timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [(r.offset, r.timestamp) for r in decode_batch(rebuilt)] == [
        (1, TS + 500),
        (2, TS + 500),
    ]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_record_keys_agree_with_decoding(codec):
    rng = random.Random(3)
    n = 300  # offset deltas past one varint byte
    keys = [None if i % 7 == 0 else b"" if i % 11 == 0 else b"k%d" % i for i in range(n)]
    values = [
        None if i % 5 == 0 else rng.randbytes(rng.choice([0, 10, 100, 9000])) for i in range(n)
    ]
    headers = [[("h", b"x" * (i % 3))] * (i % 2) for i in range(n)]
    timestamps = [TS + rng.randint(-(10**6), 10**6) for _ in range(n)]
    batch = build_batch(
        values, keys, timestamps=timestamps, headers=headers, compression=codec, base_offset=50
    )
    header, found = record_keys(batch)
    assert header == read_header(batch)
    assert found == [(r.offset, r.key, r.value is None) for r in decode_batch(batch)]
    damaged = assemble(zigzag(50) + record(0, b"a", key=b"k")[1:], 1)  # overlong record
    with pytest.raises(InvalidRecord):
        record_keys(damaged)


def test_batch_with_offset_gaps():
    sparse = build_batch([b"x", b"y"], offset_deltas=[0, 5], base_offset=3, timestamp=TS)
    assert check_batch(sparse).last_offset_delta == 5
    assert [r.offset for r in decode_batch(sparse)] == [3, 8]
    with pytest.raises(ValueError, match="offset_deltas"):
        build_batch([b"x"], offset_deltas=[0, 1])


# --- interoperability with kio's independent implementation -----------------------


def test_interop_with_kio():
    readers = pytest.importorskip("kio.records.readers")
    writers = pytest.importorskip("kio.records.writers")
    schema = pytest.importorskip("kio.records.schema")

    ours = build_batch(
        [b"v1", None, b"v" * 100],
        [None, b"k", b""],
        timestamps=[TS, TS + 1000, TS + 2000],
        headers=[[("a", b"1")], [], [("b", None)]],
        base_offset=40,
    )
    theirs, size = readers.read_batch(ours, 0)
    assert size == len(ours)
    assert [(r.offset, r.key, r.value) for r in theirs.records] == [
        (40, None, b"v1"),
        (41, b"k", None),
        (42, b"", b"v" * 100),
    ]
    assert [len(r.headers) for r in theirs.records] == [1, 0, 1]

    buf = io.BytesIO()
    writers.write_new_batch(
        buf,
        schema.NewRecordBatch(
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            attributes=0,
            records=tuple(
                schema.Record(
                    attributes=0,
                    timestamp=r.timestamp,
                    offset=r.offset,
                    key=r.key,
                    value=r.value,
                    headers=r.headers,
                )
                for r in theirs.records
            ),
        ),
    )
    decoded = decode_batch(buf.getvalue())
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (40, TS, None, b"v1"),
        (41, TS + 1000, b"k", None),
        (42, TS + 2000, b"", b"v" * 100),
    ]


# --- the fast check of plain records ----------------------------------------------


def reference_check(data: bytes, count: int) -> None:
    """What check_client_batch demanded of the records before check_plain_records: each
    parses (parse_record), with offset delta = its index, and they fill the area."""
    pos = 0
    for expected in range(count):
        pos, delta, *_ = parse_record(data, pos, len(data), count - 1)
        if delta != expected:
            raise InvalidRecord(f"record {expected} has offset delta {delta}")
    if pos != len(data):
        raise InvalidRecord("more data")


def verdict(check, data: bytes, count: int) -> str:
    try:
        check(data, count)
    except (InvalidRecord, IndexError, UnicodeDecodeError):
        return "refused"
    return "accepted"


def client_check(data: bytes, count: int) -> None:
    check_client_batch(assemble(data, count))


def shaped_records(rng: random.Random, count: int, big: bool) -> bytes:
    """Records of every shape the fast check takes or must leave to parse_record."""
    parts = []
    sizes = (0, 1, 62, 63, 64, 65, 100) + ((8190, 8191, 8192) if big else ())
    for i in range(count):
        size = rng.choice((*sizes, rng.randrange(300)))
        value = None if rng.random() < 0.03 else rng.randbytes(size)
        key = rng.choice((None, None, b"", b"k", b"k" * 63, b"k" * 64))
        headers = [("h", b"v")] if rng.random() < 0.03 else ()
        ts = rng.choice((0, 5, 63, 64, 1 << 20, -1, 1 << 62))
        parts.append(record(i, value, key, ts, headers))
    return b"".join(parts)


def test_plain_record_check_takes_the_common_shape_whole():
    for count in (1, 64, 65, 8192, 8193, 9000):  # offset deltas of 1, 2 and 3 bytes
        values = [b"v" * (i % 150) for i in range(count)]
        data = records_blob(build_batch(values, timestamp=TS))
        assert check_plain_records(data, 0, len(data), count) == (count, len(data))
    data = b"".join(record(i, b"x" * 100, ts_delta=i * 1000) for i in range(100))
    assert check_plain_records(data, 0, len(data), 100) == (100, len(data))
    # A header, a null value, a long key: left to parse_record, from that record on.
    for odd in (record(1, b"a", headers=[("h", b"")]), record(1, None), record(1, b"a", b"k" * 64)):
        data = record(0, b"a") + odd + record(2, b"b")
        assert check_plain_records(data, 0, len(data), 3) == (1, len(record(0, b"a")))
        assert verdict(client_check, data, 3) == "accepted"


def test_plain_record_check_agrees_with_parse_record():
    rng = random.Random(5)
    for round_ in range(1000):
        count = rng.choice((1, 2, 3, 70))
        data = bytearray(shaped_records(rng, count, big=round_ % 4 == 0))
        for _ in range(rng.choice((0, 1, 1, 2, 4))):
            data[rng.randrange(len(data))] = rng.choice(
                (0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF, rng.randrange(256))
            )
        if rng.random() < 0.1:
            del data[rng.randrange(len(data)) :]
        if rng.random() < 0.05:
            data += b"\x00"
        claimed = count + rng.choice((0, 0, 0, 1, -1)) if count > 1 else count
        blob = bytes(data)
        assert verdict(client_check, blob, claimed) == verdict(reference_check, blob, claimed), (
            round_,
            blob.hex(),
        )


def test_plain_record_runs_agree_with_parse_record():
    """Runs of records of one size, damaged where their layout is: the run check takes no
    record that parse_record refuses, and refuses none it takes."""
    rng = random.Random(7)
    for round_ in range(300):
        count = rng.choice((9, 20, 63, 64, 65, 70, 200, 8200))
        size = rng.choice((0, 1, 10, 63, 64, 100))
        key = rng.choice((None, b"", b"key"))
        ts = rng.choice((0, 3, 100))
        data = bytearray(
            b"".join(record(i, b"v" * size, key, ts_delta=ts + i % 3) for i in range(count))
        )
        record_size = len(data) // count if ts < 64 else 0
        for _ in range(rng.choice((0, 1, 1, 2))):
            at = rng.randrange(len(data))
            if record_size and rng.random() < 0.8:  # in the first bytes or the last of one
                at = rng.randrange(count) * record_size + rng.choice((0, 1, 2, 3, 4, 5, 6, -1))
            data[at % len(data)] = rng.choice((0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF))
        blob = bytes(data)
        want = verdict(reference_check, blob, count)
        assert verdict(client_check, blob, count) == want, (round_, count, size, key, ts)
        if want == "accepted":
            assert check_plain_records(blob, 0, len(blob), count)[0] <= count


def test_plain_record_run_checks_the_offset_delta_width():
    """Record 8192's offset delta takes 3 bytes where the run before it had 2. A record of
    the run's size whose delta is 8192 in 3 bytes, its third byte (0x01) where the run has
    its null key, matches every byte the run checks at its positions; as parsed, its key
    is the run's value length (100) and the rest is garbage: refused."""
    records = [record(i, b"v" * 100) for i in range(8192)]
    forged = records[-1][:2] + b"\x00\x00" + zigzag(8192) + b"\xc8\x01" + b"v" * 100 + b"\x00"
    assert len(forged) == len(records[-1])
    data = b"".join(records) + forged
    assert check_plain_records(data, 0, len(data), 8193)[0] == 8192
    assert verdict(reference_check, data, 8193) == "refused"
    assert verdict(client_check, data, 8193) == "refused"


def test_offset_delta_tables_hold_the_varints():
    from kafkaesque.records.check import _RUN_LIMIT, _offset_delta_bytes

    for i in (*range(0, 9000, 7), 16383, 16384, _RUN_LIMIT - 1):
        varint = encode_varint(i)
        assert bytes(_offset_delta_bytes(k)[i] for k in range(len(varint))) == varint
        assert all(_offset_delta_bytes(k)[i] == 0 for k in range(len(varint), 3))
