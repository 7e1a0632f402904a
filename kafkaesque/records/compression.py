"""Compression of a record batch's records area: the codecs of its attributes' low bits.

Snappy is written in the xerial framing the Java client uses, which every client reads,
and read both framed and raw (librdkafka writes raw snappy).
"""

from __future__ import annotations

import enum
import mmap
import struct

import cramjam

_INT32 = struct.Struct(">i")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + _INT32.pack(1) + _INT32.pack(1)  # version, compatible
_XERIAL_BLOCK = 32 * 1024  # the Java client's SnappyOutputStream block size


class Compression(enum.IntEnum):
    """Codec ids stored in the low three attribute bits."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str) -> Compression:
        """Parse ``none|gzip|snappy|lz4|zstd`` (case-insensitive)."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            choices = "|".join(c.name.lower() for c in cls)
            raise ValueError(f"unknown compression {name!r} (expected {choices})") from None


class DecompressionError(ValueError):
    """Bytes that do not decompress with their batch's codec (the batch codec reports it
    as an invalid record)."""


def compress(codec: Compression, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` as Kafka clients expect to read it (NONE: as it
    is). ``level``: gzip 1-9, lz4 1-17, zstd -131072-22 (Kafka's compression.*.level);
    None is the codec's default; snappy has no levels."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == Compression.SNAPPY:
        # Xerial framing, as the Java client writes it; every client reads it.
        parts = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            parts += (_INT32.pack(len(block)), block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        # The Java client rejects linked-block LZ4 frames.
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"cannot compress with {codec!r}")


def decompress(codec: int, blob: bytes | memoryview, limit: int | None = None) -> bytes:
    """``blob`` decompressed with codec id ``codec``; raises DecompressionError, also when
    it holds more than ``limit`` bytes (of which no more are written)."""
    if limit is not None:
        return _decompress_within(codec, blob, limit)
    try:
        if codec == Compression.GZIP:
            return bytes(cramjam.gzip.decompress(blob))
        if codec == Compression.SNAPPY:
            if bytes(blob[:8]) != _XERIAL_MAGIC:
                return bytes(cramjam.snappy.decompress_raw(blob))  # librdkafka style
            return _xerial_decompress(bytes(blob))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(blob))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(blob))
    except DecompressionError:
        raise
    except Exception as exc:  # cramjam.DecompressionError, struct.error, ...
        raise DecompressionError(
            f"cannot decompress {Compression(codec).name} records: {exc}"
        ) from exc
    raise DecompressionError(f"unknown compression codec {codec}")


def _xerial_decompress(blob: bytes) -> bytes:
    """Blocks after the 16-byte xerial header, each an int32 size and raw snappy."""
    parts, pos = [], len(_XERIAL_HEADER)
    while pos < len(blob):
        (size,) = _INT32.unpack_from(blob, pos)
        if size < 0 or pos + 4 + size > len(blob):
            raise DecompressionError("truncated xerial snappy block")
        parts.append(bytes(cramjam.snappy.decompress_raw(blob[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    return b"".join(parts)


_DECOMPRESS_INTO = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}


def _decompress_within(codec: int, blob: bytes | memoryview, limit: int) -> bytes:
    """Decompress into a buffer of ``limit`` bytes, which fails when it is full. The buffer
    is an anonymous map: its pages take memory only once written, so a generous limit
    costs small batches nothing."""
    with mmap.mmap(-1, max(limit, 1)) as out:
        try:
            if codec == Compression.SNAPPY:
                if bytes(blob[:8]) != _XERIAL_MAGIC:
                    size = cramjam.snappy.decompress_raw_into(blob, out)
                else:
                    size = _xerial_decompress_into(bytes(blob), out)
            elif codec in _DECOMPRESS_INTO:
                size = _DECOMPRESS_INTO[Compression(codec)](blob, out)
            else:
                raise DecompressionError(f"unknown compression codec {codec}")
        except DecompressionError:
            raise
        except Exception as exc:  # corrupt, or more than the limit: the buffer is full
            raise DecompressionError(
                f"cannot decompress {Compression(codec).name} records into at most"
                f" {limit} bytes: {exc}"
            ) from exc
        return out[:size]


def _xerial_decompress_into(blob: bytes, out: mmap.mmap) -> int:
    """`_xerial_decompress` into ``out``; the bytes written."""
    written, pos = 0, len(_XERIAL_HEADER)
    with memoryview(out) as view:
        while pos < len(blob):
            (size,) = _INT32.unpack_from(blob, pos)
            if size < 0 or pos + 4 + size > len(blob):
                raise DecompressionError("truncated xerial snappy block")
            block = blob[pos + 4 : pos + 4 + size]
            written += cramjam.snappy.decompress_raw_into(block, view[written:])
            pos += 4 + size
    return written
