# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The master's per-message loops, compiled: a produce batch split into entries and the
entries laid out as commit-log records.

Same results as the pure-Python :func:`habroker.wire.split_batch_py` and
:func:`habroker.store.commit_log.encode_records_py` (tests/habroker/test_record_codec.py holds
them side by side); those stay the fallback where this module was not built. Measured in
bench/analysis.md ("compiled record codec").
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy
from habroker.message import body_crc32 as crc32

# ENTRY: totalSize, magic, bodyCRC, flag, bodyLength (5 x int32), body, propertiesLength (int16)
cdef enum:
    ENTRY_HEAD = 20
    ENTRY_OVERHEAD = 22
    RECORD_FIXED_HEAD = 36  # TOTALSIZE .. PHYSICALOFFSET


cdef inline int _i32(const uint8_t* p) noexcept nogil:
    return <int>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int _i16(const uint8_t* p) noexcept nogil:
    return <short>((p[0] << 8) | p[1])


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put64(uint8_t* p, int64_t v) noexcept nogil:
    _put32(p, <uint32_t>(<unsigned long long>v >> 32))
    _put32(p + 4, <uint32_t>v)


def split_batch(data, Py_ssize_t max_entries, entry_type):
    """``(entries, None)``, or ``(None, (message, index))`` for the first bad entry: the
    caller raises its own error type (this module knows none of the faces)."""
    cdef const uint8_t[::1] buf = memoryview(data).cast("B")
    view = memoryview(data)
    cdef Py_ssize_t end = buf.shape[0]
    cdef Py_ssize_t pos = 0, body_start, props_at
    # 64-bit: a body length near 2**31 must not wrap the checks below (the fuzzer found it)
    cdef Py_ssize_t total, body_len, props_len
    cdef int flag
    cdef list out = []
    cdef const uint8_t* base
    if end == 0:
        return None, ("empty batch: at least one message is required", None)
    base = &buf[0]
    while pos < end:
        if end - pos < ENTRY_OVERHEAD:
            return None, (f"truncated entry header ({end - pos} bytes left)", len(out))
        total = _i32(base + pos)
        flag = _i32(base + pos + 12)
        body_len = _i32(base + pos + 16)
        if body_len < 0 or total < ENTRY_OVERHEAD + body_len:
            return None, (f"bad lengths (totalSize={total}, bodyLength={body_len})", len(out))
        if total > end - pos:
            return None, (f"totalSize={total} runs past the end of the request", len(out))
        body_start = pos + ENTRY_HEAD
        props_at = body_start + body_len
        props_len = _i16(base + props_at)
        if props_len < 0 or total != ENTRY_OVERHEAD + body_len + props_len:
            return None, (
                f"totalSize={total} does not match bodyLength={body_len} + "
                f"propertiesLength={props_len}",
                len(out),
            )
        props = (
            PyBytes_FromStringAndSize(<const char*>(base + props_at + 2), props_len)
            if props_len
            else b""
        )
        out.append(entry_type(flag, view[body_start:props_at], props))
        pos += total
        if len(out) > max_entries:
            return None, (f"more than {max_entries} messages in one request", max_entries)
    return out, None


cdef Py_ssize_t _put_record(
    uint8_t* p,
    entry,
    int queue_id,
    int64_t queue_offset,
    int64_t phys,
    const char* block,
    Py_ssize_t n_shared,
    const char* tail,
    Py_ssize_t n_tail,
    Py_ssize_t record_base,
) except -1:
    """One commit-log record at ``p`` (the buffer was sized for it); its size."""
    cdef const uint8_t[::1] body
    cdef const uint8_t[::1] props
    cdef Py_ssize_t at, body_len, props_len, size
    body_obj = entry.body
    props_obj = entry.properties
    body = body_obj
    props = props_obj
    body_len = body.shape[0]
    props_len = props.shape[0]
    size = record_base + body_len + props_len
    _put32(p, <uint32_t>size)
    _put32(p + 4, 0xDAA320A7)  # MAGIC_V1
    _put32(p + 8, <uint32_t>crc32(body_obj) & 0x7FFFFFFF)
    _put32(p + 12, <uint32_t>queue_id)
    _put32(p + 16, <uint32_t><int>entry.flag)
    _put64(p + 20, queue_offset)
    _put64(p + 28, phys)
    memcpy(p + RECORD_FIXED_HEAD, block, n_shared)
    at = RECORD_FIXED_HEAD + n_shared
    _put32(p + at, <uint32_t>body_len)
    at += 4
    if body_len:
        memcpy(p + at, &body[0], body_len)
    at += body_len
    memcpy(p + at, tail, n_tail)
    at += n_tail
    p[at] = <uint8_t>(props_len >> 8)
    p[at + 1] = <uint8_t>props_len
    at += 2
    if props_len:
        memcpy(p + at, &props[0], props_len)
    return at + props_len


def encode_records(
    bytes topic_tail,
    int queue_id,
    entries,
    int64_t first_queue_offset,
    bytes shared,
    Py_ssize_t record_base,
    int64_t phys,
):
    """The batch's records in one buffer, and the offset after them."""
    cdef Py_ssize_t n_tail = len(topic_tail), n_shared = len(shared)
    cdef Py_ssize_t total = 0, size, at = 0
    cdef int64_t queue_offset = first_queue_offset
    if record_base != RECORD_FIXED_HEAD + n_shared + 4 + n_tail + 2:
        # the buffer is sized from record_base: a wrong one must not write past it
        raise ValueError(
            f"record_base {record_base} does not match the layout "
            f"({RECORD_FIXED_HEAD + n_shared + 4 + n_tail + 2} for these blocks)"
        )
    for entry in entries:
        total += record_base + len(entry.body) + len(entry.properties)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef const char* tail = PyBytes_AS_STRING(topic_tail)
    cdef const char* block = PyBytes_AS_STRING(shared)
    for entry in entries:
        size = _put_record(
            p + at, entry, queue_id, queue_offset, phys, block, n_shared, tail, n_tail, record_base
        )
        at += size
        phys += size
        queue_offset += 1
    if at != total:
        raise ValueError(f"records laid out {at} bytes, planned {total}")
    return [out], phys


# -- DLedger: one entry per record (habroker.dledger.commit_log.encode_entries_py) ----------------
cdef enum:
    DLEDGER_HEAD = 48  # magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodyLen


def encode_entries(
    bytes topic_tail,
    int queue_id,
    entries,
    record_sizes,
    int64_t first_queue_offset,
    bytes shared,
    int64_t term,
    int64_t first_index,
    positions,
):
    """A batch's DLedger entries in one buffer, one memoryview of it per entry: the entry
    header (magic 1, no CRCs) and the record whose PHYSICALOFFSET is the entry's position + 48."""
    cdef Py_ssize_t n_tail = len(topic_tail), n_shared = len(shared)
    cdef Py_ssize_t record_base = RECORD_FIXED_HEAD + n_shared + 4 + n_tail + 2
    cdef Py_ssize_t n = len(entries), i, total = 0, size, at = 0
    cdef int64_t queue_offset = first_queue_offset, index = first_index, pos
    if len(record_sizes) != n or len(positions) != n:
        raise ValueError(f"{n} entries, {len(record_sizes)} sizes, {len(positions)} positions")
    for i in range(n):
        entry = entries[i]
        size = record_base + len(entry.body) + len(entry.properties)
        if size != <Py_ssize_t>record_sizes[i]:
            raise ValueError(f"entry {i}: a record of {size} bytes, planned {record_sizes[i]}")
        total += DLEDGER_HEAD + size
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef const char* tail = PyBytes_AS_STRING(topic_tail)
    cdef const char* block = PyBytes_AS_STRING(shared)
    starts = []
    for i in range(n):
        pos = positions[i]
        size = <Py_ssize_t>record_sizes[i]
        starts.append(at)
        _put32(p + at, 1)  # CURRENT_MAGIC (DLedger 0.2+: MAGIC_1)
        _put32(p + at + 4, <uint32_t>(DLEDGER_HEAD + size))
        _put64(p + at + 8, index)
        _put64(p + at + 16, term)
        _put64(p + at + 24, pos)
        _put32(p + at + 32, 0)
        _put32(p + at + 36, 0)
        _put32(p + at + 40, 0)
        _put32(p + at + 44, <uint32_t>size)
        at += DLEDGER_HEAD
        at += _put_record(
            p + at,
            entries[i],
            queue_id,
            queue_offset,
            pos + DLEDGER_HEAD,
            block,
            n_shared,
            tail,
            n_tail,
            record_base,
        )
        queue_offset += 1
        index += 1
    if at != total:
        raise ValueError(f"entries laid out {at} bytes, planned {total}")
    view = memoryview(out)
    starts.append(total)
    return [view[starts[i] : starts[i + 1]] for i in range(n)]


# -- dispatch: a record's DispatchRequest fields (habroker.message.parse_record) -----------------
from habroker.message import (
    DELAY_LEVELS_MS as _DELAY_LEVELS_MS,
    SCHEDULE_TOPIC as _SCHEDULE_TOPIC,
    _topic_cache,
    unit_tags_code as _unit_tags_code_py,
)


cdef Py_ssize_t _find_tags(const uint8_t* b, Py_ssize_t n, Py_ssize_t start) noexcept nogil:
    """Where ``TAGS\\x01`` starts in ``b[start:n]``, or -1."""
    cdef Py_ssize_t i = start
    while i + 5 <= n:
        if (
            b[i] == 84 and b[i + 1] == 65 and b[i + 2] == 71 and b[i + 3] == 83
            and b[i + 4] == 1
        ):  # T A G S \x01
            return i
        i += 1
    return -1


def unit_tags_code(topic, props, int64_t store_timestamp, delay_levels=_DELAY_LEVELS_MS):
    """:func:`habroker.message.unit_tags_code`, compiled for the common case (one TAGS
    property of ASCII text, not SCHEDULE_TOPIC_XXXX); anything else is the Python function's."""
    cdef const uint8_t[::1] view = props
    cdef Py_ssize_t n = view.shape[0], i, j, stop
    cdef const uint8_t* b
    cdef uint32_t h = 0
    if n == 0:
        return 0
    if topic == _SCHEDULE_TOPIC:
        return _unit_tags_code_py(topic, props, store_timestamp, delay_levels)
    b = &view[0]
    i = _find_tags(b, n, 0)
    if i < 0:
        return 0
    if (i != 0 and b[i - 1] != 2) or _find_tags(b, n, i + 5) >= 0:
        return _unit_tags_code_py(topic, props, store_timestamp, delay_levels)
    stop = i + 5
    while stop < n and b[stop] != 2:
        stop += 1
    for j in range(i + 5, stop):
        if b[j] >= 128:  # UTF-16 code units: the Python function's
            return _unit_tags_code_py(topic, props, store_timestamp, delay_levels)
        h = 31 * h + b[j]
    return <int32_t>h

cdef enum:
    MIN_RECORD_SIZE = 91
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20

cdef int MAGIC_V1 = <int>0xDAA320A7
cdef int MAGIC_V2 = <int>0xDAA320AB
cdef int BLANK_MAGIC = <int>0xCBD43194


cdef inline int64_t _i64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<unsigned long long><uint32_t>_i32(p) << 32) | <uint32_t>_i32(p + 4))


def parse_record(buf, Py_ssize_t pos, bint check_crc, delay_levels=_DELAY_LEVELS_MS):
    """:func:`habroker.message.parse_record`, compiled: the same tuple or the same size outcome
    (0 BLANK, -1 failure, TOTALSIZE on a length mismatch) for every input."""
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t left = n - pos
    cdef const uint8_t* b
    cdef int magic, crc, queue_id, sys_flag, tl
    cdef int64_t queue_offset, phys, store_ts
    # 64-bit: sums of lengths read from the record must not wrap
    cdef Py_ssize_t total, body_len, topic_len, props_len, p, q, end, tail_len
    if pos < 0 or left < 8:
        return -1
    b = &view[0]
    total = _i32(b + pos)
    magic = _i32(b + pos + 4)
    if magic == MAGIC_V1:
        tl = 1
    elif magic == BLANK_MAGIC:
        return 0
    elif magic == MAGIC_V2:
        tl = 2
    else:
        return -1
    if total < MIN_RECORD_SIZE or total > left:
        return -1
    crc = _i32(b + pos + 8)
    queue_id = _i32(b + pos + 12)
    queue_offset = _i64(b + pos + 20)
    phys = _i64(b + pos + 28)
    sys_flag = _i32(b + pos + 36)
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        p = pos + (68 if sys_flag & BORNHOST_V6_FLAG else 56)
        if p + 8 > n:
            return -1
        store_ts = _i64(b + p)
        p += 40 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 28
        if p + 4 > n:
            return -1
        body_len = _i32(b + p)
        p += 4
    else:
        store_ts = _i64(b + pos + 56)
        body_len = _i32(b + pos + 84)
        p = pos + 88
    if body_len > 0:
        if p + body_len > pos + total:
            return total if p + body_len <= n else -1
        if check_crc and (crc32(memoryview(buf)[p : p + body_len]) & 0x7FFFFFFF) != crc:
            return -1
        p += body_len
    end = pos + total
    if p + tl + 2 > end:
        return total if p + tl + 2 <= n else -1
    tail_len = end - p
    if tl == 1:
        topic_len = b[p]
        if topic_len > 127:
            return -1  # a negative signed byte: Java fails reading it
    else:
        topic_len = (b[p] << 8) | b[p + 1]
        if topic_len > 32767:
            return -1
    q = tl + topic_len
    if q + 2 > tail_len:
        return total
    props_len = (b[p + q] << 8) | b[p + q + 1]
    if props_len > 32767:
        props_len -= 65536
    if q + 2 + (props_len if props_len > 0 else 0) != tail_len:
        return total
    raw_topic = PyBytes_FromStringAndSize(<const char*>(b + p + tl), topic_len)
    topic = _topic_cache.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8", "replace")
        if len(_topic_cache) > 10_000:
            _topic_cache.clear()
        _topic_cache[raw_topic] = topic
    code = 0
    if props_len > 0:
        props = PyBytes_FromStringAndSize(<const char*>(b + p + q + 2), props_len)
        code = unit_tags_code(topic, props, store_ts, delay_levels)
    return (topic, queue_id, phys, total, code, store_ts, queue_offset, sys_flag)
