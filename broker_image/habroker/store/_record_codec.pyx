# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The master's per-message loops, compiled: a produce batch split into entries and the
entries laid out as commit-log records.

Same results as the pure-Python :func:`habroker.wire.split_batch_py` and
:func:`habroker.store.commit_log.encode_records_py` (tests/habroker/test_record_codec.py holds
them side by side); those stay the fallback where this module was not built. Measured in
bench/analysis.md ("compiled record codec").
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from habroker.message import body_crc32 as crc32


# -- the body CRC without a Python call a message ----------------------------------------------
# ISA-L's gzip CRC-32 (what ``isal_zlib.crc32`` calls, and zlib's crc32 bit for bit) is
# exported by the isal package's own extension: taken from there with dlsym when that module
# is what habroker.message uses, else every body goes through the Python function as before.
cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char* filename, int flags)
    void* dlsym(void* handle, const char* symbol)
    int RTLD_NOW
    int RTLD_NOLOAD

ctypedef uint32_t (*_crc_fn)(uint32_t, const uint8_t*, uint64_t) noexcept nogil
cdef _crc_fn _c_crc = NULL


cdef _crc_fn _find_isal_crc():
    try:
        from isal import isal_zlib
    except ImportError:
        return NULL
    if crc32 is not isal_zlib.crc32:
        return NULL
    handle = dlopen(isal_zlib.__file__.encode(), RTLD_NOW | RTLD_NOLOAD)
    if handle == NULL:
        return NULL
    cdef _crc_fn fn = <_crc_fn>dlsym(handle, b"crc32_gzip_refl")
    if fn == NULL:
        return NULL
    probe = b"123456789" * 200
    if fn(0, <const uint8_t*>PyBytes_AS_STRING(probe), len(probe)) != <uint32_t>crc32(probe):
        return NULL
    return fn


_c_crc = _find_isal_crc()
C_CRC = _c_crc != NULL
"""Whether bodies' CRCs are computed without a Python call (ISA-L's C entry point)."""


cdef inline uint32_t _body_crc(const uint8_t* p, Py_ssize_t n, object data, Py_ssize_t at) except? 0xFFFFFFFF:
    """CRC-32 of ``n`` bytes at ``p`` (``data[at:at + n]``, for the Python function)."""
    if _c_crc != NULL:
        return _c_crc(0, p, <uint64_t>n)
    return <uint32_t>crc32(memoryview(data)[at : at + n])

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


cdef struct _Packed:
    Py_ssize_t body_at  # where the body starts in the request
    Py_ssize_t body_len
    Py_ssize_t props_at  # where the properties start (after their int16 length)
    Py_ssize_t props_len
    int flag


cdef class PackedBatch:
    """A produce batch as the request carried it: the messages' places in its bytes, read
    once by :func:`split_batch`. A sequence of ``entry_type`` made on demand (a view of the
    body, the properties' bytes), while the compiled put loops (:func:`record_sizes`,
    :func:`encode_records`, :func:`encode_entries`, :func:`put_cq_units`) read the bytes
    themselves: no object a message on the master's hot path."""

    cdef readonly object data
    cdef const uint8_t[::1] buf
    cdef _Packed* items
    cdef Py_ssize_t n, cap
    cdef object entry_type
    cdef object view

    def __cinit__(self):
        self.items = NULL
        self.n = self.cap = 0

    def __dealloc__(self):
        PyMem_Free(self.items)

    cdef int _add(self, Py_ssize_t body_at, Py_ssize_t body_len, Py_ssize_t props_at,
                  Py_ssize_t props_len, int flag) except -1:
        cdef _Packed* grown
        if self.n == self.cap:
            self.cap = self.cap * 2 if self.cap else 32
            grown = <_Packed*>PyMem_Malloc(self.cap * sizeof(_Packed))
            if grown == NULL:
                raise MemoryError()
            if self.n:
                memcpy(grown, self.items, self.n * sizeof(_Packed))
            PyMem_Free(self.items)
            self.items = grown
        self.items[self.n] = _Packed(body_at, body_len, props_at, props_len, flag)
        self.n += 1
        return 0

    def __len__(self):
        return self.n

    cdef object _entry(self, Py_ssize_t i):
        cdef _Packed* e = &self.items[i]
        props = (
            PyBytes_FromStringAndSize(<const char*>(&self.buf[0] + e.props_at), e.props_len)
            if e.props_len
            else b""
        )
        return self.entry_type(e.flag, self.view[e.body_at : e.body_at + e.body_len], props)

    def __getitem__(self, i):
        cdef Py_ssize_t k
        if isinstance(i, slice):
            return [self._entry(k) for k in range(*i.indices(self.n))]
        k = i
        if k < 0:
            k += self.n
        if not 0 <= k < self.n:
            raise IndexError("batch index out of range")
        return self._entry(k)

    def __iter__(self):
        cdef Py_ssize_t k
        for k in range(self.n):
            yield self._entry(k)

    def __repr__(self):
        return f"PackedBatch({self.n} messages, {self.buf.shape[0]} bytes)"


def split_batch(data, Py_ssize_t max_entries, entry_type):
    """``(entries, None)``, or ``(None, (message, index))`` for the first bad entry: the
    caller raises its own error type (this module knows none of the faces). The entries are
    a :class:`PackedBatch` of ``entry_type``."""
    cdef const uint8_t[::1] buf = memoryview(data).cast("B")
    view = memoryview(data)
    cdef Py_ssize_t end = buf.shape[0]
    cdef Py_ssize_t pos = 0, body_start, props_at
    # 64-bit: a body length near 2**31 must not wrap the checks below (the fuzzer found it)
    cdef Py_ssize_t total, body_len, props_len
    cdef int flag
    cdef PackedBatch out = PackedBatch()
    cdef const uint8_t* base
    if end == 0:
        return None, ("empty batch: at least one message is required", None)
    base = &buf[0]
    while pos < end:
        if end - pos < ENTRY_OVERHEAD:
            return None, (f"truncated entry header ({end - pos} bytes left)", out.n)
        total = _i32(base + pos)
        flag = _i32(base + pos + 12)
        body_len = _i32(base + pos + 16)
        if body_len < 0 or total < ENTRY_OVERHEAD + body_len:
            return None, (f"bad lengths (totalSize={total}, bodyLength={body_len})", out.n)
        if total > end - pos:
            return None, (f"totalSize={total} runs past the end of the request", out.n)
        body_start = pos + ENTRY_HEAD
        props_at = body_start + body_len
        props_len = _i16(base + props_at)
        if props_len < 0 or total != ENTRY_OVERHEAD + body_len + props_len:
            return None, (
                f"totalSize={total} does not match bodyLength={body_len} + "
                f"propertiesLength={props_len}",
                out.n,
            )
        out._add(body_start, body_len, props_at + 2, props_len, flag)
        pos += total
        if out.n > max_entries:
            return None, (f"more than {max_entries} messages in one request", max_entries)
    out.data = data
    out.buf = buf
    out.view = view
    out.entry_type = entry_type
    return out, None


# what every record of a batch shares: its queue, the block from SYSFLAG to
# PREPAREDTRANSACTIONOFFSET, the topic (length byte + topic), a record's size without body and
# properties
cdef struct _Layout:
    int queue_id
    const char* block
    Py_ssize_t n_shared
    const char* tail
    Py_ssize_t n_tail
    Py_ssize_t record_base


cdef int _layout(_Layout* lay, int queue_id, bytes topic_tail, bytes shared) except -1:
    lay.queue_id = queue_id
    lay.block = PyBytes_AS_STRING(shared)
    lay.n_shared = len(shared)
    lay.tail = PyBytes_AS_STRING(topic_tail)
    lay.n_tail = len(topic_tail)
    lay.record_base = RECORD_FIXED_HEAD + lay.n_shared + 4 + lay.n_tail + 2
    return 0


cdef Py_ssize_t _put_raw(
    uint8_t* p,
    const _Layout* lay,
    const uint8_t* body,
    Py_ssize_t body_len,
    const uint8_t* props,
    Py_ssize_t props_len,
    uint32_t body_crc,
    int flag,
    int64_t queue_offset,
    int64_t phys,
) noexcept nogil:
    """One commit-log record at ``p`` (the buffer was sized for it); its size."""
    cdef Py_ssize_t at, size = lay.record_base + body_len + props_len
    _put32(p, <uint32_t>size)
    _put32(p + 4, 0xDAA320A7)  # MAGIC_V1
    _put32(p + 8, body_crc & 0x7FFFFFFF)
    _put32(p + 12, <uint32_t>lay.queue_id)
    _put32(p + 16, <uint32_t>flag)
    _put64(p + 20, queue_offset)
    _put64(p + 28, phys)
    memcpy(p + RECORD_FIXED_HEAD, lay.block, lay.n_shared)
    at = RECORD_FIXED_HEAD + lay.n_shared
    _put32(p + at, <uint32_t>body_len)
    at += 4
    if body_len:
        memcpy(p + at, body, body_len)
    at += body_len
    memcpy(p + at, lay.tail, lay.n_tail)
    at += lay.n_tail
    p[at] = <uint8_t>(props_len >> 8)
    p[at + 1] = <uint8_t>props_len
    at += 2
    if props_len:
        memcpy(p + at, props, props_len)
    return at + props_len


cdef Py_ssize_t _put_message(
    uint8_t* p,
    const _Layout* lay,
    entries,
    PackedBatch packed,
    Py_ssize_t i,
    int64_t queue_offset,
    int64_t phys,
) except -1:
    """:func:`_put_raw` of message ``i``: read from a :class:`PackedBatch`'s bytes when
    ``packed`` is the batch, else from the entry object (``flag``, ``body``, ``properties``)."""
    cdef _Packed* e
    cdef const uint8_t* base
    cdef const uint8_t[::1] body
    cdef const uint8_t[::1] props
    cdef Py_ssize_t body_len, props_len
    if packed is not None:
        e = &packed.items[i]
        base = &packed.buf[0]
        return _put_raw(
            p,
            lay,
            base + e.body_at,
            e.body_len,
            base + e.props_at,
            e.props_len,
            _body_crc(base + e.body_at, e.body_len, packed.data, e.body_at),
            e.flag,
            queue_offset,
            phys,
        )
    entry = entries[i]
    body_obj = entry.body
    body = body_obj
    props = entry.properties
    body_len = body.shape[0]
    props_len = props.shape[0]
    return _put_raw(
        p,
        lay,
        &body[0] if body_len else NULL,
        body_len,
        &props[0] if props_len else NULL,
        props_len,
        <uint32_t>crc32(body_obj),
        <int>entry.flag,
        queue_offset,
        phys,
    )


cdef Py_ssize_t _message_size(entries, PackedBatch packed, Py_ssize_t i, Py_ssize_t record_base):
    if packed is not None:
        return record_base + packed.items[i].body_len + packed.items[i].props_len
    entry = entries[i]
    return record_base + len(entry.body) + len(entry.properties)


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
    cdef _Layout lay
    _layout(&lay, queue_id, topic_tail, shared)
    if record_base != lay.record_base:
        # the buffer is sized from record_base: a wrong one must not write past it
        raise ValueError(
            f"record_base {record_base} does not match the layout "
            f"({lay.record_base} for these blocks)"
        )
    cdef PackedBatch packed = entries if type(entries) is PackedBatch else None
    cdef Py_ssize_t n = len(entries), i, total = 0, size, at = 0
    for i in range(n):
        total += _message_size(entries, packed, i, record_base)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(n):
        size = _put_message(p + at, &lay, entries, packed, i, first_queue_offset + i, phys)
        at += size
        phys += size
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
    cdef _Layout lay
    _layout(&lay, queue_id, topic_tail, shared)
    cdef Py_ssize_t n = len(entries), i, total = 0, size, at = 0
    cdef int64_t pos
    cdef PackedBatch packed = entries if type(entries) is PackedBatch else None
    if len(record_sizes) != n or len(positions) != n:
        raise ValueError(f"{n} entries, {len(record_sizes)} sizes, {len(positions)} positions")
    for i in range(n):
        size = _message_size(entries, packed, i, lay.record_base)
        if size != <Py_ssize_t>record_sizes[i]:
            raise ValueError(f"entry {i}: a record of {size} bytes, planned {record_sizes[i]}")
        total += DLEDGER_HEAD + size
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    starts = []
    for i in range(n):
        pos = positions[i]
        size = <Py_ssize_t>record_sizes[i]
        starts.append(at)
        _put32(p + at, 1)  # CURRENT_MAGIC (DLedger 0.2+: MAGIC_1)
        _put32(p + at + 4, <uint32_t>(DLEDGER_HEAD + size))
        _put64(p + at + 8, first_index + i)
        _put64(p + at + 16, term)
        _put64(p + at + 24, pos)
        _put32(p + at + 32, 0)
        _put32(p + at + 36, 0)
        _put32(p + at + 40, 0)
        _put32(p + at + 44, <uint32_t>size)
        at += DLEDGER_HEAD
        at += _put_message(
            p + at, &lay, entries, packed, i, first_queue_offset + i, pos + DLEDGER_HEAD
        )
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


cdef object _tags_code_at(
    topic, const uint8_t* b, Py_ssize_t n, int64_t store_timestamp, delay_levels, props
):
    """tagsCode of the properties ``b[:n]`` (``props``: the same bytes as an object, or None to
    make one only if the Python function is needed)."""
    cdef Py_ssize_t i, j, stop
    cdef uint32_t h = 0
    if n == 0:
        return 0
    if topic == _SCHEDULE_TOPIC:
        return _tags_code_py(topic, b, n, store_timestamp, delay_levels, props)
    i = _find_tags(b, n, 0)
    if i < 0:
        return 0
    if (i != 0 and b[i - 1] != 2) or _find_tags(b, n, i + 5) >= 0:
        return _tags_code_py(topic, b, n, store_timestamp, delay_levels, props)
    stop = i + 5
    while stop < n and b[stop] != 2:
        stop += 1
    for j in range(i + 5, stop):
        if b[j] >= 128:  # UTF-16 code units: the Python function's
            return _tags_code_py(topic, b, n, store_timestamp, delay_levels, props)
        h = 31 * h + b[j]
    return <int32_t>h


cdef object _tags_code_py(
    topic, const uint8_t* b, Py_ssize_t n, int64_t store_timestamp, delay_levels, props
):
    if props is None:
        props = PyBytes_FromStringAndSize(<const char*>b, n)
    return _unit_tags_code_py(topic, props, store_timestamp, delay_levels)


def unit_tags_code(topic, props, int64_t store_timestamp, delay_levels=_DELAY_LEVELS_MS):
    """:func:`habroker.message.unit_tags_code`, compiled for the common case (one TAGS
    property of ASCII text, not SCHEDULE_TOPIC_XXXX); anything else is the Python function's."""
    cdef const uint8_t[::1] view = props
    cdef Py_ssize_t n = view.shape[0]
    if n == 0:
        return 0
    return _tags_code_at(topic, &view[0], n, store_timestamp, delay_levels, props)


cdef enum:
    MIN_RECORD_SIZE = 91
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20

cdef int MAGIC_V1 = <int>0xDAA320A7
cdef int MAGIC_V2 = <int>0xDAA320AB
cdef int BLANK_MAGIC = <int>0xCBD43194


cdef inline int64_t _i64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<unsigned long long><uint32_t>_i32(p) << 32) | <uint32_t>_i32(p + 4))


cdef struct Record:
    Py_ssize_t total
    int queue_id
    int sys_flag
    int64_t queue_offset
    int64_t phys
    int64_t store_ts
    Py_ssize_t topic_at
    Py_ssize_t topic_len
    Py_ssize_t props_at
    Py_ssize_t props_len


cdef enum:
    PARSED = -2  # _parse filled its Record


cdef Py_ssize_t _parse(
    object buf, const uint8_t* b, Py_ssize_t n, Py_ssize_t pos, bint check_crc, Record* r
) except -3:
    """The record at ``b[pos:n]``: PARSED with ``r`` filled, or the outcome parse_record
    returns (0 BLANK, -1 failure, TOTALSIZE on a length mismatch)."""
    cdef Py_ssize_t left = n - pos
    cdef int magic, crc, tl
    # 64-bit: sums of lengths read from the record must not wrap
    cdef Py_ssize_t total, body_len, topic_len, props_len, p, q, end, tail_len
    if pos < 0 or left < 8:
        return -1
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
    r.queue_id = _i32(b + pos + 12)
    r.queue_offset = _i64(b + pos + 20)
    r.phys = _i64(b + pos + 28)
    r.sys_flag = _i32(b + pos + 36)
    if r.sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        p = pos + (68 if r.sys_flag & BORNHOST_V6_FLAG else 56)
        if p + 8 > n:
            return -1
        r.store_ts = _i64(b + p)
        p += 40 if r.sys_flag & STOREHOSTADDRESS_V6_FLAG else 28
        if p + 4 > n:
            return -1
        body_len = _i32(b + p)
        p += 4
    else:
        r.store_ts = _i64(b + pos + 56)
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
    r.total = total
    r.topic_at = p + tl
    r.topic_len = topic_len
    r.props_at = p + q + 2
    r.props_len = props_len if props_len > 0 else 0
    return PARSED


cdef object _topic(const uint8_t* b, Record* r):
    raw_topic = PyBytes_FromStringAndSize(<const char*>(b + r.topic_at), r.topic_len)
    topic = _topic_cache.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8", "replace")
        if len(_topic_cache) > 10_000:
            _topic_cache.clear()
        _topic_cache[raw_topic] = topic
    return topic


def parse_record(buf, Py_ssize_t pos, bint check_crc, delay_levels=_DELAY_LEVELS_MS):
    """:func:`habroker.message.parse_record`, compiled: the same tuple or the same size outcome
    (0 BLANK, -1 failure, TOTALSIZE on a length mismatch) for every input."""
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0]
    cdef Record r
    if pos < 0 or n - pos < 8:
        return -1
    cdef const uint8_t* b = &view[0]
    cdef Py_ssize_t outcome = _parse(buf, b, n, pos, check_crc, &r)
    if outcome != PARSED:
        return outcome
    topic = _topic(b, &r)
    code = _tags_code_at(topic, b + r.props_at, r.props_len, r.store_ts, delay_levels, None)
    return (topic, r.queue_id, r.phys, r.total, code, r.store_ts, r.queue_offset, r.sys_flag)


# -- dispatch walks: records (a classic commit log) or DLedger entries into consume-queue units --
cdef enum:
    CQ_UNIT = 20  # phys (8), size (4), tagsCode (8)
    TRANSACTION_TYPE_MASK = 0x00C
    TRANSACTION_COMMIT_TYPE = 0x008


cdef tuple _walk(
    buf,
    Py_ssize_t rel,
    Py_ssize_t wrote,
    bint entries,
    int64_t pos,
    int64_t index,
    int64_t target,
    delay_levels,
):
    """The records back to back in ``buf`` from ``rel``, each behind a DLedger entry header when
    ``entries`` (entry ``index`` at log position ``pos``, up to entry ``target``), as runs of
    consume-queue units; see :func:`walk_entries` and :func:`walk_records`."""
    cdef const uint8_t[::1] view = buf
    cdef Py_ssize_t n = view.shape[0], size, start = rel, cap, k = 0, run_start = 0, head
    cdef const uint8_t* b
    cdef uint8_t* u
    cdef Record r
    cdef int tran, run_queue = 0
    cdef int64_t last_ts = 0, next_offset = 0, run_end = 0, code
    cdef Py_ssize_t run_topic_at = 0, run_topic_len = -1
    head = DLEDGER_HEAD if entries else 0
    if wrote > n:
        wrote = n
    if rel < 0 or index > target or rel + head + 8 > wrote:
        return 0, 0, None, []
    b = &view[0]
    cap = min(target - index + 1, (wrote - rel) // (head + MIN_RECORD_SIZE) + 1)
    units = PyBytes_FromStringAndSize(NULL, cap * CQ_UNIT)
    u = <uint8_t*>PyBytes_AS_STRING(units)
    runs = []
    run = None
    while k < cap and index <= target and rel + head + 8 <= wrote:
        if entries:
            if rel + DLEDGER_HEAD > wrote:
                break
            size = _i32(b + rel + 4)
            if (
                _i64(b + rel + 8) != index
                or _i64(b + rel + 24) != pos
                or size < DLEDGER_HEAD
                or rel + size > wrote
            ):
                break
            if _parse(buf, b, rel + size, rel + DLEDGER_HEAD, False, &r) != PARSED:
                break
        else:
            if _parse(buf, b, n, rel, False, &r) != PARSED:
                break
            size = r.total
        tran = r.sys_flag & TRANSACTION_TYPE_MASK
        if tran and tran != TRANSACTION_COMMIT_TYPE:
            break
        if (
            run is None
            or r.queue_id != run_queue
            or r.queue_offset != next_offset
            or r.phys + r.total <= run_end
            or r.topic_len != run_topic_len
            or memcmp(b + r.topic_at, b + run_topic_at, r.topic_len) != 0
        ):
            if run is not None:
                run[3] = PyBytes_FromStringAndSize(
                    <const char*>(u + run_start), k * CQ_UNIT - run_start
                )
                run[4] = run_end
                runs.append(tuple(run))
            run = [_topic(b, &r), r.queue_id, r.queue_offset, None, 0]
            run_start = k * CQ_UNIT
            run_queue = r.queue_id
            run_topic_at = r.topic_at
            run_topic_len = r.topic_len
        code = _tags_code_at(run[0], b + r.props_at, r.props_len, r.store_ts, delay_levels, None)
        _put64(u + k * CQ_UNIT, r.phys)
        _put32(u + k * CQ_UNIT + 8, <uint32_t>r.total)
        _put64(u + k * CQ_UNIT + 12, code)
        k += 1
        next_offset = r.queue_offset + 1
        run_end = r.phys + r.total
        last_ts = r.store_ts
        index += 1
        pos += size
        rel += size
    if run is not None:
        run[3] = PyBytes_FromStringAndSize(<const char*>(u + run_start), k * CQ_UNIT - run_start)
        run[4] = run_end
        runs.append(tuple(run))
    return k, rel - start, (last_ts if k else None), runs


def walk_entries(
    buf,
    Py_ssize_t rel,
    Py_ssize_t wrote,
    int64_t pos,
    int64_t index,
    int64_t target,
    delay_levels=_DELAY_LEVELS_MS,
):
    """The DLedger entries back to back in ``buf`` from ``rel`` (entry ``index`` at log position
    ``pos``) up to entry ``target`` and byte ``wrote``, as consume-queue units.

    Returns ``(entries walked, bytes walked, store time of the last, runs)``; a run is
    ``(topic, queue id, first queue offset, units, end)``: the 20-byte units of consecutive
    queue offsets of one queue, ``end`` the commit-log offset past its last record. Stops before
    an entry that is not where expected, holds no message record, or is a prepared or rolled-back
    transaction half: the caller's entry-by-entry path (and its logs) takes that one."""
    return _walk(buf, rel, wrote, True, pos, index, target, delay_levels)


def walk_records(buf, Py_ssize_t rel, Py_ssize_t stop, delay_levels=_DELAY_LEVELS_MS):
    """The commit-log records in ``buf`` from ``rel`` while they start before ``stop`` (and
    end inside ``buf``), as consume-queue units: :func:`walk_entries`' answer for a classic
    commit log. Stops before a BLANK, a record cut short or damaged, or a prepared or
    rolled-back transaction half: the caller's record-by-record path takes that one."""
    # a record may end past ``stop`` (a slice's budget) but not past the buffer
    return _walk(buf, rel, stop, False, 0, 0, (stop - rel) if stop > rel else -1, delay_levels)


# -- DLedger: a raw push's index units against the entries they index ------------------------
cdef enum:
    DLEDGER_UNIT = 32  # magic int32, pos int64, size int32, index int64, term int64


def units_match_entries(units, entries, int magic):
    """Whether ``entries`` are exactly the DLedger entries ``units`` index, back to back: every
    unit's magic, size, index and term in its entry's header, each entry at the position its
    unit gives, the indexes consecutive, the terms never falling, each size its header's
    48 bytes plus its body length, and nothing after the last."""
    cdef const uint8_t[::1] u = memoryview(units).cast("B")
    cdef const uint8_t[::1] e = memoryview(entries).cast("B")
    cdef Py_ssize_t n_units = u.shape[0], n_bytes = e.shape[0], i, at = 0
    cdef const uint8_t* up
    cdef const uint8_t* ep
    cdef int size
    cdef int64_t pos0, index0, term = 0, t
    if n_units == 0 or n_units % DLEDGER_UNIT:
        return False
    up = &u[0]
    pos0 = _i64(up + 4)
    index0 = _i64(up + 16)
    for i in range(n_units // DLEDGER_UNIT):
        up = &u[0] + i * DLEDGER_UNIT
        size = _i32(up + 12)
        t = _i64(up + 24)
        if (
            _i32(up) != magic
            or size < DLEDGER_HEAD
            or _i64(up + 4) != pos0 + at
            or _i64(up + 16) != index0 + i
            or t < term
            or at + size > n_bytes
        ):
            return False
        ep = &e[0] + at
        if (
            _i32(ep) != magic
            or _i32(ep + 4) != size
            or _i64(ep + 8) != index0 + i
            or _i64(ep + 16) != t
            or _i64(ep + 24) != pos0 + at
            or _i32(ep + 44) != size - DLEDGER_HEAD
        ):
            return False
        term = t
        at += size
    return at == n_bytes


def pack_index_units(positions, sizes, int64_t first, int64_t term, int magic):
    """The index units of entries ``first``, ``first + 1``, ... of ``term`` at ``positions``:
    :func:`habroker.dledger.entry.pack_index_units_py`, the leader's per-entry loop compiled."""
    cdef Py_ssize_t n = len(positions), i
    if len(sizes) != n:
        raise ValueError(f"{n} positions, {len(sizes)} sizes")
    out = PyBytes_FromStringAndSize(NULL, n * DLEDGER_UNIT)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef int64_t pos
    cdef int size
    for i in range(n):
        pos = positions[i]
        size = sizes[i]
        _put32(p, <uint32_t>magic)
        _put64(p + 4, pos)
        _put32(p + 12, <uint32_t>size)
        _put64(p + 16, first + i)
        _put64(p + 24, term)
        p += DLEDGER_UNIT
    return out


# -- the master's consume-queue units from its put (MessageStore._dispatch_put) -------------------
def put_cq_units(topic, entries, sizes, int64_t phys, int64_t store_timestamp, delay_levels):
    """The consume-queue units of a batch whose records lie back to back from ``phys`` (one
    per entry: offset, size, tagsCode), in one buffer for ``ConsumeQueue.put_units``; the same
    units as the Python loop's ``put_unit`` calls."""
    cdef Py_ssize_t n = len(entries), i, size, n_props
    if len(sizes) != n:
        raise ValueError(f"{n} entries, {len(sizes)} sizes")
    out = PyBytes_FromStringAndSize(NULL, n * CQ_UNIT)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
    cdef const uint8_t[::1] view
    cdef int64_t tags
    cdef PackedBatch packed = entries if type(entries) is PackedBatch else None
    for i in range(n):
        size = <Py_ssize_t>sizes[i]
        if packed is not None:
            n_props = packed.items[i].props_len
            tags = _tags_code_at(
                topic, &packed.buf[0] + packed.items[i].props_at, n_props, store_timestamp,
                delay_levels, None,
            ) if n_props else 0
        else:
            props = entries[i].properties
            n_props = len(props)
            if n_props:
                view = props
                tags = _tags_code_at(
                    topic, &view[0], n_props, store_timestamp, delay_levels, props
                )
            else:
                tags = 0
        _put64(p, phys)
        _put32(p + 8, <uint32_t>size)
        _put64(p + 12, tags)
        p += CQ_UNIT
        phys += size
    return out


# -- a batch's record sizes (MessageStore.plan_put) ----------------------------------------------
def record_sizes(
    entries,
    Py_ssize_t record_base,
    Py_ssize_t max_body,
    Py_ssize_t max_props,
    Py_ssize_t room,
):
    """(total, sizes) of the records a batch encodes to, each ``record_base`` plus its body
    and properties; None when any entry breaks a limit (``plan_put``'s Python loop then says
    which and why)."""
    cdef Py_ssize_t n = len(entries), i, body_len, props_len, record_len, total = 0
    cdef PackedBatch packed = entries if type(entries) is PackedBatch else None
    sizes = [0] * n
    for i in range(n):
        if packed is not None:
            body_len = packed.items[i].body_len
            props_len = packed.items[i].props_len
        else:
            entry = entries[i]
            body_len = len(entry.body)
            props_len = len(entry.properties)
        if body_len > max_body or props_len > max_props:
            return None
        record_len = record_base + body_len + props_len
        if record_len > room:
            return None
        total += record_len
        sizes[i] = record_len
    return total, sizes


# -- a pull's walk over consume-queue units (MessageStore.get_messages) --------------------------
cdef enum:
    BLANK_UNIT_SIZE = 0x7FFFFFFF


def walk_units(
    units,
    tuple state,
    int64_t examine_limit,
    int64_t max_msgs,
    int64_t max_bytes,
    int64_t min_phy,
    int64_t file_size,
    tags_codes,
    list runs,
):
    """:func:`habroker.store.consume_queue.walk_units_py`, compiled: the units a pull takes,
    gathered into commit-log runs; (full, state to go on from)."""
    cdef const uint8_t[::1] u = memoryview(units).cast("B")
    cdef Py_ssize_t n = u.shape[0] // CQ_UNIT, i
    cdef int64_t index, max_phy, count, total, run_start, run_end, run_file_end, run_count
    cdef int64_t phys, taken
    cdef int size
    cdef bint full = False, filtering = tags_codes is not None
    cdef const uint8_t* p
    index, max_phy, count, total, run_start, run_end, run_file_end, run_count = state
    for i in range(n):
        if index >= examine_limit:
            full = True
            break
        p = &u[0] + i * CQ_UNIT
        phys = _i64(p)
        size = _i32(p + 8)
        max_phy = phys
        taken = count + run_count
        if taken and (
            taken >= max_msgs or total + (run_end - run_start) + size > max_bytes
        ):
            full = True
            break
        index += 1
        if size == BLANK_UNIT_SIZE or phys < min_phy:
            continue
        if filtering and _i64(p + 12) not in tags_codes:
            continue
        if phys == run_end and phys + size <= run_file_end:
            run_end += size
            run_count += 1
            continue
        if run_count:
            runs.append((run_start, run_end, run_count))
            count += run_count
            total += run_end - run_start
        run_start = phys
        run_end = phys + size
        run_count = 1
        run_file_end = phys - phys % file_size + file_size
    return full, (index, max_phy, count, total, run_start, run_end, run_file_end, run_count)
