"""Checking a batch's records area without building an object per record: runs of
equal-sized records by strided slices, the rest one at a time (kafkaesque.records.batch'
check of what clients send). kafkaesque.records.body's parse_record says what is wrong
with a record this stops at."""

from __future__ import annotations


def check_plain_records(
    data: bytes, pos: int, end: int, count: int, first: int = 0
) -> tuple[int, int]:
    """Check records ``first``, ``first`` + 1, ... of a batch's records area (the one at
    ``pos`` first) while they have the common shape, without building an object per
    record: the index of the first record not checked (``count`` if none is left), and
    where it starts. The caller checks that one with ``parse_record``, which also says
    what is wrong with a bad one (this only stops at it), and may call again after it.

    A record checked here is one ``parse_record`` accepts with offset delta = its index:
    a length of 1 or 2 varint bytes, at least 6 and within ``end``; any attributes byte;
    a timestamp delta of at most 10 varint bytes; the offset delta; a null key or one
    shorter than 64 bytes; a value (not null) of 1 or 2 length bytes running exactly up to
    a header count of 0 ending the record. Nothing else is read.

    Consecutive records of one length and layout (fixed-size values: most of what
    producers send) are checked a run at a time, by comparing strided slices (one byte
    position of every record of the run) with what each position must hold; other
    records one at a time."""
    i = first
    window = _FIRST_WINDOW
    while i < count:
        if i + _MIN_RUN <= min(count, _RUN_LIMIT):
            layout = _plain_layout(data, pos, end, i)
            if layout is None:
                return i, pos
            size, checks, limit = layout
            run = min(count - i, (end - pos) // size, window, limit - i)
            matched = _run_length(data, pos, size, run, i, checks)
            i += matched
            pos += matched * size
            window = window * 4 if matched == run else _FIRST_WINDOW
            if matched >= _MIN_RUN:
                continue
        # Short runs: record by record for a while.
        stop = min(count, i + _FIRST_WINDOW)
        i, pos = _check_one_by_one(data, pos, end, i, stop)
        if i < stop:
            return i, pos
    return i, pos


_FIRST_WINDOW = 64  # records looked at for a run; grows while runs fill it
_MIN_RUN = 8  # runs shorter than this: the next records one at a time
_RUN_LIMIT = 1 << 17  # offset deltas the run check has tables for
_HIGH = bytes(int(b > 0x7F) for b in range(256))  # translate: 1 for a continued varint byte


def _plain_layout(
    data: bytes, pos: int, end: int, index: int
) -> tuple[int, list[tuple[int, int, int]], int] | None:
    """The size of the plain record at ``pos`` (checked as one record by
    ``_check_one_by_one``); what each byte position of a record of the same layout must
    hold: (offset in the record, kind, byte), kind 0 that byte, 1 a continued varint byte
    (bit 7 set), 2 a last varint byte, 3 the offset delta's byte ``byte`` (of the index's
    varint); and the index a run of this layout must stay below. None if the record is
    not plain."""
    if _check_one_by_one(data, pos, end, index, index + 1)[0] != index + 1:
        return None
    b = data[pos]
    q = pos + 1 if b < 0x80 else pos + 2  # past the length
    checks = [(k, 0, data[pos + k]) for k in range(q - pos)]
    q += 1  # the attributes: any
    while data[q] > 0x7F:  # the timestamp delta
        checks.append((q - pos, 1, 0))
        q += 1
    checks.append((q - pos, 2, 0))
    q += 1
    for k in range(3):  # the offset delta: the index's, in as many bytes as the first's
        checks.append((q - pos, 3, k))
        q += 1
        if data[q - 1] < 0x80:
            break
    # A run stays within the indexes whose varint has that many bytes: the table's byte
    # then has bit 7 clear exactly at the varint's last byte, so the width is checked too.
    limit = min(_RUN_LIMIT, 1 << (6 + 7 * k))
    checks.append((q - pos, 0, data[q]))  # the key's length
    if data[q] != 1:
        q += data[q] >> 1
    q += 1
    checks.append((q - pos, 0, data[q]))  # the value's length
    if data[q] > 0x7F:
        checks.append((q + 1 - pos, 0, data[q + 1]))
    size = _record_end(data, pos) - pos
    checks.append((size - 1, 0, 0))  # no headers
    return size, checks, limit


def _record_end(data: bytes, pos: int) -> int:
    b = data[pos]
    if b < 0x80:
        return pos + 1 + (b >> 1)
    return pos + 2 + ((b & 0x7F | data[pos + 1] << 7) >> 1)


def _run_length(
    data: bytes, pos: int, size: int, run: int, index: int, checks: list[tuple[int, int, int]]
) -> int:
    """How many of the ``run`` records of ``size`` bytes from ``pos`` (indexes from
    ``index``) hold what ``checks`` asks of their bytes, counting from the first (which
    was checked alone)."""
    stop = pos + run * size
    matched = run
    for offset, kind, byte in checks:
        column = data[pos + offset : stop : size]  # that byte of every record
        # Each kind is first compared whole (memcmp, isascii: a few ns per record, where
        # lstrip and translate cost ~5): a column that holds what it must, as nearly all
        # do, is done; one that does not is then measured to its first wrong byte.
        if kind == 0:
            same = bytes((byte,))
            if column != same * run:
                matched = min(matched, run - len(column.lstrip(same)))
        elif kind == 3:
            want = _offset_delta_bytes(byte)[index : index + run]
            if column != want:
                matched = min(matched, _common_prefix(column, want))
        elif kind == 2:
            if not column.isascii():  # every byte's bit 7 clear: a varint's last byte
                matched = min(matched, run - len(column.translate(_HIGH).lstrip(b"\x00")))
        else:
            column = column.translate(_HIGH)
            matched = min(matched, run - len(column.lstrip(b"\x01")))
        if matched <= 1:
            break
    return max(matched, 1)


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of two equally long byte strings."""
    if a == b:
        return len(a)
    lo, hi = 0, len(a)  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


_OFFSET_DELTA_BYTES: list[bytes] = []


def _offset_delta_bytes(k: int) -> bytes:
    """Byte ``k`` of the zigzag varint of every offset delta 0 .. _RUN_LIMIT - 1 (built on
    first use); 0 where that varint is shorter. The varint of i is 2i in 7-bit groups:
    byte 0 is 2i mod 128 (bit 7 set from i = 64), byte 1 i // 64 mod 128 (bit 7 set from
    i = 8192), byte 2 i // 8192."""
    if not _OFFSET_DELTA_BYTES:
        n = _RUN_LIMIT
        first = bytes(range(0, 128, 2)) + bytes(range(128, 256, 2)) * (n // 64 - 1)
        second = b"\0" * 64 + b"".join(bytes((v,)) * 64 for v in range(1, 128))
        second += b"".join(bytes((128 | v % 128,)) * 64 for v in range(128, n // 64))
        third = b"\0" * 8192 + b"".join(bytes((v,)) * 8192 for v in range(1, n // 8192))
        _OFFSET_DELTA_BYTES.extend((first, second, third))
    return _OFFSET_DELTA_BYTES[k]


def _check_one_by_one(data: bytes, pos: int, end: int, i: int, count: int) -> tuple[int, int]:
    """Records ``i`` .. ``count`` - 1 from ``pos`` one at a time, while they are plain (see
    check_plain_records): the index of the first that is not (or ``count``), and its
    position."""
    try:
        while i < count:
            b = data[pos]
            if b < 0x80:
                if b & 1:
                    break
                q = pos + 1
                rec_end = q + (b >> 1)
            else:
                c = data[pos + 1]
                if c > 0x7F or b & 1:
                    break
                q = pos + 2
                rec_end = q + ((b & 0x7F | c << 7) >> 1)
            if rec_end > end or rec_end - q < 6:
                break
            q += 1  # the attributes
            t = q
            while data[q] > 0x7F:  # the timestamp delta
                q += 1
            if q - t > 9:
                break
            d = data[q + 1]  # the offset delta: zigzag, so 2 * i
            if d < 0x80:
                q += 2
            else:
                e = data[q + 2]
                if e < 0x80:
                    d = d & 0x7F | e << 7
                    q += 3
                else:
                    f = data[q + 3]
                    if f > 0x7F:
                        break
                    d = d & 0x7F | (e & 0x7F) << 7 | f << 14
                    q += 4
            if d != i << 1:
                break
            k = data[q]  # the key: null (varint -1) or short
            if k == 1:
                q += 1
            elif k < 0x80 and not k & 1:
                q += 1 + (k >> 1)
            else:
                break
            last = rec_end - 1  # the header count: none
            if data[last]:
                break
            size = last - q - 1  # the value's bytes after a one-byte length
            if not (size < 0x40 and data[q] == size << 1):
                size -= 1  # after a two-byte length
                if not (
                    0x40 <= size < 0x2000
                    and data[q] == (size << 1) & 0x7F | 0x80
                    and data[q + 1] == size >> 6
                ):
                    break
            pos = rec_end
            i += 1
    except IndexError:
        pass  # parse_record says what is wrong
    return i, pos
