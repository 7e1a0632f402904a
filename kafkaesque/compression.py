"""Compression of a record batch's records area: the codecs of its attributes' low bits.

Snappy is written in the xerial framing the Java client uses, which every client reads,
and read both framed and raw (librdkafka writes raw snappy).
"""

from __future__ import annotations

import enum
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


def compress(codec: Compression, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` as Kafka clients expect to read it."""
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        # Xerial framing, as the Java client writes it; every client reads it.
        parts = [_XERIAL_HEADER]
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            parts += (_INT32.pack(len(block)), block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        # The Java client rejects linked-block LZ4 frames.
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"cannot compress with {codec!r}")


def decompress(codec: int, blob: bytes | memoryview) -> bytes:
    """``blob`` decompressed with codec id ``codec``; raises DecompressionError."""
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
