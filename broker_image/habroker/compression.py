"""Message bodies a producer compressed: the sysFlag bits that say so, and decompression.

A Java RocketMQ client compresses a body over ``compressMsgBodyOverHowmuch`` (4 KiB) and sets
sysFlag bit ``COMPRESSED`` (0x1); 5.x clients also put the algorithm in bits 8-10
(``MessageSysFlag.COMPRESSION_*_TYPE``: 1 LZ4 frame, 2 ZSTD, 3 ZLIB; 0 from a 4.x client also
means ZLIB). The broker stores the bytes as sent, so every reader (client decode, CLI, Spark
connector) decompresses, as RocketMQ's consumers do, and keeps the sysFlag as stored.
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.frame
import zstandard

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_TYPE_SHIFT = 8


class CompressionType(IntEnum):
    """RocketMQ's ``CompressionType`` values, as stored in sysFlag bits 8-10."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3

    @property
    def sys_flag(self) -> int:
        """The sysFlag bits a 5.x producer sets for a body compressed this way."""
        return COMPRESSED_FLAG | (self.value << COMPRESSION_TYPE_SHIFT)


class CompressionError(ValueError):
    """A body flagged compressed that does not decompress (or names no known algorithm)."""


def compression_of(sys_flag: int) -> CompressionType | None:
    """The algorithm of a record's body, or None when it is stored uncompressed."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    value = (sys_flag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT
    if value == 0:  # a 4.x producer: ZLIB is the only algorithm it has
        return CompressionType.ZLIB
    try:
        return CompressionType(value)
    except ValueError:
        raise CompressionError(f"sysFlag {sys_flag:#x}: unknown compression type {value}") from None


def decompress(body: bytes | bytearray | memoryview, sys_flag: int) -> bytes:
    """The body as the producer gave it (``body`` itself when not flagged compressed)."""
    kind = compression_of(sys_flag)
    if kind is None:
        return bytes(body)
    try:
        if kind is CompressionType.ZLIB:
            return zlib.decompress(body)
        if kind is CompressionType.LZ4:
            out: bytes = lz4.frame.decompress(bytes(body))
            return out
        # frames from a streaming writer (Java's ZstdOutputStream) need not state their size
        reader = zstandard.ZstdDecompressor().decompressobj()
        data: bytes = reader.decompress(bytes(body))
        if not reader.eof:
            raise ValueError("the frame is truncated")
        return data
    except Exception as exc:  # zlib.error, RuntimeError (lz4), ZstdError: all mean bad bytes
        raise CompressionError(f"{kind.name}-compressed body does not decompress: {exc}") from None


def compress(body: bytes, kind: CompressionType = CompressionType.ZLIB, level: int = 5) -> bytes:
    """Compress as a RocketMQ producer would (for tests and for a producer that wants to)."""
    if kind is CompressionType.ZLIB:
        return zlib.compress(body, level)
    if kind is CompressionType.LZ4:
        out: bytes = lz4.frame.compress(body)
        return out
    return zstandard.ZstdCompressor(level=level).compress(body)
