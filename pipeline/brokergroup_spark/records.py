"""Commit-log records (spec §1.1) straight into Arrow record batches.

A pull response is RocketMQ commit-log records back to back. The hot path makes no Python
object per row except one ``struct.unpack_from`` to find where each record starts (records are
variable-length): everything else is numpy over the header bytes and Arrow ``take`` over
"piece" arrays — binary arrays whose offsets cut the one response buffer into header, body,
topic and properties pieces without copying it. Properties are split with vectorized searches
for the ``\\x01``/``\\x02`` separators (spec §1.6.2 rules, duplicate keys resolved last-wins).

Records with IPv6 hosts (other fixed offsets) or that fail the length check go through
:func:`decode_slow`, a plain per-row decoder that is also the reference the tests compare with.

A body the producer compressed (sysFlag COMPRESSED: the Java client does so above 4 KiB) is
decompressed (:mod:`habroker.compression`); only those rows leave the zero-copy path.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from habroker.compression import COMPRESSED_FLAG, decompress

from brokergroup_spark.schema import ARROW_SCHEMA, PROPERTIES, TIMESTAMP

Int64s = npt.NDArray[np.int64]

MAGIC_V1 = -626843481  # 0xDAA320A7: topic length is one signed byte
MAGIC_V2 = -626843477  # 0xDAA320AB: topic length is two bytes
BORNHOST_V6 = 0x10
STOREHOST_V6 = 0x20
HEADER_V4 = 88  # every fixed field, up to and including BODYLENGTH, for IPv4 hosts
MIN_RECORD = 91

_TOTAL = struct.Struct(">i")
# Fixed fields at their IPv4 offsets, read as one structured view over the gathered headers.
_HEADER = np.dtype(
    {
        "names": [
            "total",
            "magic",
            "queueId",
            "queueOffset",
            "commitLogOffset",
            "sysflag",
            "born",
            "store",
            "bodyLength",
        ],
        "formats": [">i4", ">i4", ">i4", ">i8", ">i8", ">i4", ">i8", ">i8", ">i4"],
        "offsets": [0, 4, 12, 20, 28, 36, 40, 56, 84],
        "itemsize": HEADER_V4,
    }
)
_MAGIC_HEAD = (0xDA, 0xA3, 0x20)
_MAGIC_TAIL = (0xA7, 0xAB)  # V1, V2
_FOUR = np.arange(4, dtype=np.int64)
_SHIFTS = np.array([24, 16, 8, 0], dtype=np.int64)
_TAGS = "TAGS"
_KEYS = "KEYS"


class RecordError(ValueError):
    """A pull response that is not a sequence of well-formed commit-log records."""


def record_starts(buf: bytes | memoryview) -> Int64s:
    """Byte position of every record.

    Vectorized guess first: every record carries a magic code at byte 4, so the positions four
    bytes before each magic-code match are the starts if they chain (each start plus its
    TOTALSIZE is the next start, the last one ends the buffer). A body that happens to hold a
    magic code breaks the chain and the exact walk below decides.
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    hits = np.flatnonzero(arr[4:-3] == _MAGIC_HEAD[0]) if len(arr) >= MIN_RECORD else None
    if hits is not None and len(hits):
        for i in (1, 2):
            hits = hits[arr[hits + 4 + i] == _MAGIC_HEAD[i]]
        last = arr[hits + 7]
        starts: Int64s = hits[(last == _MAGIC_TAIL[0]) | (last == _MAGIC_TAIL[1])].astype(np.int64)
        if len(starts) and starts[0] == 0 and starts[-1] <= len(arr) - MIN_RECORD:
            at = starts[:, None] + _FOUR
            sizes = (arr[at].astype(np.int64) << _SHIFTS).sum(axis=1)
            ends = starts + sizes
            if ends[-1] == len(arr) and np.array_equal(ends[:-1], starts[1:]):
                return starts
    return _walk(buf)


def _walk(buf: bytes | memoryview) -> Int64s:
    """The exact record walk, one ``struct.unpack_from`` a record; names the first bad one."""
    unpack = _TOTAL.unpack_from
    end = len(buf)
    pos = 0
    starts: list[int] = []
    append = starts.append
    while pos < end:
        if end - pos < 4:
            raise RecordError(f"truncated record at byte {pos}: {end - pos} bytes left")
        (size,) = unpack(buf, pos)
        if size < MIN_RECORD or size > end - pos:
            raise RecordError(f"record at byte {pos} has TOTALSIZE={size} ({end - pos} bytes left)")
        append(pos)
        pos += size
    return np.array(starts, dtype=np.int64)


def _pieces(buf: pa.Buffer, bounds: Int64s, kind: pa.DataType) -> pa.Array:
    """A binary/string array whose elements are ``buf[bounds[i]:bounds[i+1]]``, zero-copy."""
    offsets = pa.py_buffer(bounds.astype(np.int32))
    return pa.Array.from_buffers(kind, len(bounds) - 1, [None, offsets, buf])


def _every(count: int, step: int, first: int) -> pa.Array:
    return pa.array(np.arange(first, count * step, step, dtype=np.int32))


def _constant_strings(text: str, count: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)]
    )


def _timestamps(millis: np.ndarray[Any, np.dtype[Any]]) -> pa.Array:
    return pa.array(millis.astype(np.int64) * 1000, type=TIMESTAMP)


def decode(buf: bytes, *, topic: str, broker_id: int, limit: int | None = None) -> pa.RecordBatch:
    """One pull response as a batch of :data:`ARROW_SCHEMA`; ``limit`` keeps the first rows."""
    starts = record_starts(buf)
    count = len(starts)
    if limit is not None and limit < count:
        starts, count = starts[:limit], limit
    if count == 0:
        return _empty()
    end = int(starts[-1]) + _TOTAL.unpack_from(buf, int(starts[-1]))[0]
    data = pa.py_buffer(buf)
    arr = np.frombuffer(buf, dtype=np.uint8)

    # Header | rest of record: the headers gathered into one contiguous (count, 88) block.
    halves = np.empty(2 * count + 1, dtype=np.int64)
    halves[0:-1:2] = starts
    halves[1:-1:2] = starts + HEADER_V4
    halves[-1] = end
    headers = _pieces(data, halves, pa.binary()).take(_every(count, 2, 0))
    head = np.frombuffer(headers.buffers()[2], dtype=_HEADER, count=count)

    magic = head["magic"]
    sysflag = head["sysflag"]
    v2 = magic == MAGIC_V2
    if not np.all((magic == MAGIC_V1) | v2) or np.any(sysflag & (BORNHOST_V6 | STOREHOST_V6)):
        return decode_slow(buf, topic=topic, broker_id=broker_id, limit=limit)
    total = head["total"].astype(np.int64)
    body_len = head["bodyLength"].astype(np.int64)
    if np.any(body_len < 0) or np.any(body_len > total - MIN_RECORD):
        return decode_slow(buf, topic=topic, broker_id=broker_id, limit=limit)

    # Topic length (1 or 2 bytes) right after the body, then the 2-byte properties length.
    tl_at = starts + HEADER_V4 + body_len
    topic_len = np.where(
        v2,
        (arr[tl_at].astype(np.int16) << 8 | arr[np.minimum(tl_at + 1, len(arr) - 1)]).astype(
            np.int16
        ),
        arr[tl_at].view(np.int8),
    ).astype(np.int64)
    pl_at = tl_at + np.where(v2, 2, 1) + topic_len
    if np.any(topic_len < 0) or np.any(pl_at + 2 > starts + total):
        return decode_slow(buf, topic=topic, broker_id=broker_id, limit=limit)
    props_len = (arr[pl_at].astype(np.int16) << 8 | arr[pl_at + 1]).astype(np.int16)
    props_at = pl_at + 2
    if np.any(props_len < 0) or not np.array_equal(props_at + props_len, starts + total):
        return decode_slow(buf, topic=topic, broker_id=broker_id, limit=limit)

    # Record = header | body | topic block | properties: four contiguous pieces each.
    bounds = np.empty(4 * count + 1, dtype=np.int64)
    bounds[0:-1:4] = starts
    bounds[1:-1:4] = starts + HEADER_V4
    bounds[2:-1:4] = tl_at
    bounds[3:-1:4] = props_at
    bounds[-1] = end
    body = _pieces(data, bounds, pa.binary()).take(_every(count, 4, 1))
    compressed = (sysflag & COMPRESSED_FLAG) != 0
    if compressed.any():
        body = _decompressed(body, sysflag, compressed, starts)
    props = _pieces(data, bounds, pa.string()).take(_every(count, 4, 3))
    topic_bytes = topic.encode()
    if topic and not np.all(topic_len == len(topic_bytes)):
        return decode_slow(buf, topic=topic, broker_id=broker_id, limit=limit)

    properties, tags, keys = parse_properties(props)
    return pa.RecordBatch.from_arrays(
        [
            keys,
            body,
            _constant_strings(topic, count),
            pa.array(head["queueId"].astype(np.int32)),
            pa.array(head["queueOffset"].astype(np.int64)),
            pa.array(head["commitLogOffset"].astype(np.int64)),
            _timestamps(head["born"]),
            _timestamps(head["store"]),
            tags,
            properties,
            pa.array(np.full(count, broker_id, dtype=np.int32)),
        ],
        schema=ARROW_SCHEMA,
    )


def _decompressed(
    body: pa.Array,
    sysflag: npt.NDArray[np.int32],
    compressed: npt.NDArray[np.bool_],
    starts: Int64s,
) -> pa.Array:
    """``body`` with the compressed rows replaced by what the producer sent (row by row: the
    rare path, one decompression call each)."""
    rows = np.flatnonzero(compressed)
    stored = body.take(pa.array(rows.astype(np.int32))).to_pylist()
    plain = []
    for row, raw in zip(rows.tolist(), stored, strict=True):
        try:
            plain.append(decompress(raw, int(sysflag[row])))
        except ValueError as exc:
            raise RecordError(f"record at byte {int(starts[row])}: {exc}") from None
    return pc.replace_with_mask(body, pa.array(compressed), pa.array(plain, type=pa.binary()))


def _empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([], type=f.type) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA
    )


def parse_properties(props: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``name\\x01value\\x02`` strings → (map column, TAGS column, KEYS column), vectorized.

    Segments end at each ``\\x02`` and at the end of a row's properties; a segment is a pair when
    its first ``\\x01`` leaves a non-empty name and a non-empty value (the value may hold more
    ``\\x01``). Anything else is skipped, as RocketMQ's reader does.
    """
    count = len(props)
    if props.offset:
        props = pc.take(props, pa.array(np.arange(count, dtype=np.int32)))
    row_bounds = np.frombuffer(props.buffers()[1], dtype=np.int32, count=count + 1).astype(np.int64)
    base = int(row_bounds[0])
    raw = props.buffers()[2]
    text = (
        np.frombuffer(raw, dtype=np.uint8)[base : int(row_bounds[-1])]
        if raw is not None
        else np.empty(0, dtype=np.uint8)
    )
    row_bounds -= base
    twos = np.flatnonzero(text == 2)
    ones = np.flatnonzero(text == 1)
    # Cuts: every \x02 (the next segment starts one byte later) and every row end (it starts
    # right there). At equal positions a row end sorts first: a \x02 there opens the next row.
    # Both inputs are sorted, so the stable sort is a linear merge (timsort finds the runs).
    cuts = np.sort(np.concatenate([row_bounds[1:] * 2, twos * 2 + 1]), kind="stable")
    seg_end = cuts >> 1
    seg_start = np.empty_like(seg_end)
    seg_start[0] = 0
    seg_start[1:] = seg_end[:-1] + (cuts[:-1] & 1)
    where = np.searchsorted(ones, seg_start)
    sep = np.append(ones, len(text))[where]
    valid = (sep > seg_start) & (sep < seg_end - 1)
    key_start, sep, value_end = seg_start[valid], sep[valid], seg_end[valid]
    pairs = len(key_start)
    row = np.searchsorted(row_bounds, key_start, side="right") - 1

    # Key | \x01 | value | the rest up to the next key: four pieces a pair over ``text``.
    bounds = np.empty(4 * pairs + 1, dtype=np.int64)
    bounds[0:-1:4] = key_start
    bounds[1:-1:4] = sep
    bounds[2:-1:4] = sep + 1
    bounds[3:-1:4] = value_end
    bounds[-1] = value_end[-1] if pairs else 0
    pieces = _pieces(pa.py_buffer(text), bounds, pa.string())
    names = pieces.take(_every(pairs, 4, 0))
    values = pieces.take(_every(pairs, 4, 2))

    coded = pc.dictionary_encode(names)
    code = np.asarray(coded.indices, dtype=np.int64)
    if _has_duplicates(row, code):
        keep = _last_wins(row, code)
        row, code = row[keep], code[keep]
        kept = pa.array(np.flatnonzero(keep).astype(np.int32))
        names, values = names.take(kept), values.take(kept)
        pairs = len(row)
    map_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.bincount(row, minlength=count), out=map_offsets[1:])
    properties = pa.MapArray.from_arrays(pa.array(map_offsets), names, values, type=PROPERTIES)
    dictionary = coded.dictionary.to_pylist()
    return (
        properties,
        _pick(values, row, code, dictionary, _TAGS, count),
        _pick(values, row, code, dictionary, _KEYS, count),
    )


def _has_duplicates(row: Int64s, code: Int64s) -> bool:
    """Any name twice in one row? Pairs of a row are adjacent, so compare at growing shifts."""
    shift = 1
    while shift < len(row):
        same_row = row[shift:] == row[:-shift]
        if not same_row.any():
            return False
        if (same_row & (code[shift:] == code[:-shift])).any():
            return True
        shift += 1
    return False


def _last_wins(row: Int64s, code: Int64s) -> npt.NDArray[np.bool_]:
    """Keep the last pair of each (row, name): the rare path, so plain Python is fine."""
    keep = np.zeros(len(row), dtype=bool)
    seen: set[tuple[int, int]] = set()
    for i in range(len(row) - 1, -1, -1):
        ident = (int(row[i]), int(code[i]))
        if ident not in seen:
            seen.add(ident)
            keep[i] = True
    return keep


def _pick(
    values: pa.Array,
    row: Int64s,
    code: Int64s,
    dictionary: Sequence[str],
    name: str,
    count: int,
) -> pa.Array:
    """The value of property ``name`` for every row, null where a row lacks it."""
    if name not in dictionary:
        return pa.nulls(count, type=pa.string())
    index = np.full(count, -1, dtype=np.int64)
    hits = np.flatnonzero(code == dictionary.index(name))
    index[row[hits]] = hits
    return values.take(pa.array(index, mask=index < 0))


# -- reference decoder: any host family, plain Python, one row at a time ---------------------


def _split_properties(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for segment in raw.split(b"\x02"):
        sep = segment.find(b"\x01")
        if 0 < sep < len(segment) - 1:
            out[segment[:sep].decode()] = segment[sep + 1 :].decode()
    return out


def _slow_fields(buf: bytes, start: int) -> tuple[bytes, str, int, int, int, int, int, bytes]:
    """The row's fields; the body as the producer sent it (decompressed if flagged)."""
    total, magic = struct.unpack_from(">ii", buf, start)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise RecordError(f"record at byte {start}: bad MAGICCODE {magic:#x}")
    queue_id, _flag, queue_offset, phys, sysflag, born = struct.unpack_from(
        ">iiqqiq", buf, start + 12
    )
    pos = start + 48 + (20 if sysflag & BORNHOST_V6 else 8)
    (stored,) = struct.unpack_from(">q", buf, pos)
    pos += 8 + (20 if sysflag & STOREHOST_V6 else 8) + 12
    (body_len,) = struct.unpack_from(">i", buf, pos)
    end = start + total
    mismatch = RecordError(
        f"record at byte {start}: TOTALSIZE={total} does not match its field lengths"
    )
    if not 0 <= body_len <= end - pos - 4:
        raise mismatch
    body = bytes(buf[pos + 4 : pos + 4 + body_len])
    if sysflag & COMPRESSED_FLAG:
        try:
            body = decompress(body, sysflag)
        except ValueError as exc:
            raise RecordError(f"record at byte {start}: {exc}") from None
    pos += 4 + body_len
    (topic_len,) = struct.unpack_from(">h" if magic == MAGIC_V2 else ">b", buf, pos)
    pos += 2 if magic == MAGIC_V2 else 1
    if not 0 <= topic_len <= end - pos - 2:
        raise mismatch
    record_topic = bytes(buf[pos : pos + topic_len]).decode()
    pos += topic_len
    (props_len,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    if props_len < 0 or pos + props_len != end:
        raise mismatch
    return body, record_topic, queue_id, queue_offset, phys, born, stored, buf[pos:end]


def decode_slow(
    buf: bytes, *, topic: str, broker_id: int, limit: int | None = None
) -> pa.RecordBatch:
    """Per-row decoding of any valid record (IPv6 hosts, V2 magic); raises on corrupt ones."""
    rows: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
    for start in record_starts(buf).tolist()[:limit]:
        try:
            fields = _slow_fields(buf, start)
            props = _split_properties(fields[-1])
        except (struct.error, UnicodeDecodeError) as exc:
            raise RecordError(f"record at byte {start}: {exc}") from None
        body, record_topic, queue_id, queue_offset, phys, born, stored, _ = fields
        for name, value in (
            ("key", props.get(_KEYS)),
            ("body", body),
            ("topic", record_topic or topic),
            ("queueId", queue_id),
            ("queueOffset", queue_offset),
            ("commitLogOffset", phys),
            ("bornTimestamp", born * 1000),
            ("storeTimestamp", stored * 1000),
            ("tags", props.get(_TAGS)),
            ("properties", list(props.items())),
            ("brokerId", broker_id),
        ):
            rows[name].append(value)
    return pa.RecordBatch.from_arrays(
        [pa.array(rows[f.name], type=f.type) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA
    )
