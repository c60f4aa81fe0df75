"""Commit-log records built field by field from the spec's §1.1 table (independent of habroker)."""

from __future__ import annotations

import struct
import zlib

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477


def props_bytes(props: dict[str, str] | None, trailing: bool = True) -> bytes:
    if not props:
        return b""
    text = "\x02".join(f"{k}\x01{v}" for k, v in props.items())
    return (text + ("\x02" if trailing else "")).encode()


def record(
    body: bytes,
    *,
    topic: str = "t",
    queue_id: int = 0,
    queue_offset: int = 0,
    phys: int = 0,
    properties: bytes = b"",
    born: int = 1_700_000_000_000,
    stored: int = 1_700_000_000_500,
    flag: int = 0,
    v6_born: bool = False,
    v6_store: bool = False,
    v2: bool = False,
    sysflag: int = 0,
) -> bytes:
    """``body`` as stored; ``sysflag`` adds producer bits (0x1 COMPRESSED, 0x700 the type)."""
    sysflag |= (0x10 if v6_born else 0) | (0x20 if v6_store else 0)
    born_host = (b"\0" * 15 + b"\1" if v6_born else b"\x7f\0\0\1") + struct.pack(">i", 5555)
    store_host = (b"\0" * 15 + b"\1" if v6_store else b"\x7f\0\0\1") + struct.pack(">i", 10911)
    topic_raw = topic.encode()
    tail = (
        struct.pack(">h" if v2 else ">b", len(topic_raw))
        + topic_raw
        + struct.pack(">h", len(properties))
        + properties
    )
    middle = (
        struct.pack(">iiqqiq", queue_id, flag, queue_offset, phys, sysflag, born)
        + born_host
        + struct.pack(">q", stored)
        + store_host
        + struct.pack(">iqi", 0, 0, len(body))
        + body
        + tail
    )
    total = 12 + len(middle)
    crc = zlib.crc32(body) & 0x7FFFFFFF
    return struct.pack(">iii", total, MAGIC_V2 if v2 else MAGIC_V1, crc) + middle


def records(count: int, *, topic: str = "t", queue_id: int = 0, first: int = 0, **kw) -> bytes:
    out = []
    phys = 0
    for i in range(count):
        rec = record(
            b"body-%d" % (first + i),
            topic=topic,
            queue_id=queue_id,
            queue_offset=first + i,
            phys=phys,
            properties=props_bytes({"TAGS": f"tag{i % 3}", "KEYS": f"k{i}", "UNIQ_KEY": str(i)}),
            **kw,
        )
        phys += len(rec)
        out.append(rec)
    return b"".join(out)
