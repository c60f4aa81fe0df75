"""RocketMQ commit-log record codec (spec §1): encode V1 records, read V1 and V2.

Byte compatibility is the point: a Java slave must accept what we write and we must accept what
a Java master writes.  The reader side is split in two: :func:`check_record` is the lean parse
the dispatcher and recovery run over every record (no body copy, no property dict), and
:func:`decode_record` builds a full :class:`MessageExt` for clients and tests, with the body
decompressed when the producer compressed it (:mod:`habroker.compression`), as RocketMQ's
client decoder does.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from habroker.compression import CompressionType, compression_of, decompress

body_crc32: Callable[[bytes | bytearray | memoryview], int] = zlib.crc32
"""CRC-32 of a body (java.util.zip.CRC32's polynomial): ISA-L's where installed (a dependency
of habroker), ~6x zlib's speed on a 1 KiB body."""
try:
    from isal import isal_zlib

    body_crc32 = isal_zlib.crc32
except ImportError:  # pragma: no cover - isal has wheels for every platform habroker runs on
    pass

# -- constants (spec §1.3, §1.4, §1.8, §6) ------------------------------------------------------
MAGIC_V1 = -626843481  # 0xDAA320A7: topic length is one signed byte
MAGIC_V2 = -626843477  # 0xDAA320AB: topic length is a signed short (5.1+)
BLANK_MAGIC = -875286124  # 0xCBD43194: end-of-file filler
END_FILE_MIN_BLANK_LENGTH = 8

COMPRESSED_FLAG = 0x001
MULTI_TAGS_FLAG = 0x002
TRANSACTION_NOT_TYPE = 0x000
TRANSACTION_PREPARED_TYPE = 0x004
TRANSACTION_COMMIT_TYPE = 0x008
TRANSACTION_ROLLBACK_TYPE = 0x00C
TRANSACTION_TYPE_MASK = 0x00C
BORNHOST_V6_FLAG = 0x010
STOREHOSTADDRESS_V6_FLAG = 0x020
NEED_UNWRAP_FLAG = 0x040
INNER_BATCH_FLAG = 0x080

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_LENGTH = 32767
MAX_TOPIC_LENGTH_V1 = 127

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# RocketMQ's default messageDelayLevel, in ms (spec §2.3)
DELAY_LEVELS_MS = (
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    180_000,
    240_000,
    300_000,
    360_000,
    420_000,
    480_000,
    540_000,
    600_000,
    1_200_000,
    1_800_000,
    3_600_000,
    7_200_000,
)

# Smallest possible record: V1, IPv4 hosts, empty body, topic and properties.
MIN_RECORD_SIZE = 91
# Fixed positions (spec §1.1)
POS_MAGIC = 4
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYSFLAG = 36
POS_BORN_HOST = 48

_SIZE_MAGIC = struct.Struct(">ii")
# BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
_MIDDLE = struct.Struct(">iiiqqiq")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
# RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH
_TAIL = struct.Struct(">iqi")
# TOTALSIZE .. BODYLENGTH of a record with IPv4 born and store hosts (hosts skipped)
_FIXED_V4 = struct.Struct(">iiiiiqqiq8xq8x12xi")


def record_length(
    body_len: int, topic_len: int, props_len: int, sys_flag: int = 0, magic: int = MAGIC_V1
) -> int:
    """TOTALSIZE per the spec §1.1 formula (negative lengths count as 0)."""
    bh = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    sh = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    tl = 2 if magic == MAGIC_V2 else 1
    return 72 + bh + sh + tl + 2 + max(body_len, 0) + topic_len + max(props_len, 0)


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """java.util.zip.CRC32 masked to a non-negative int32 (spec §1.5)."""
    return body_crc32(body) & 0x7FFFFFFF


# -- properties (spec §1.6) ---------------------------------------------------------------------
def encode_properties(props: Mapping[str, str]) -> bytes:
    """``key\\x01value\\x02`` for each entry, trailing separator included (5.2+ style)."""
    parts = []
    for key, value in props.items():
        if not key or "\x01" in key or "\x02" in key or "\x02" in value:
            raise ValueError(
                f"property {key!r}: keys must be non-empty; separators \\x01/\\x02 "
                "are not allowed in keys, \\x02 not in values"
            )
        parts.append(f"{key}\x01{value}\x02")
    return "".join(parts).encode()


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """The reader rule every RocketMQ version applies (spec §1.6.2).

    Splitting raw bytes is safe because 0x01/0x02 never occur inside a UTF-8 sequence; a
    segment with an empty key or empty value is skipped, and the last duplicate wins.
    """
    out: dict[str, str] = {}
    for seg in bytes(data).split(b"\x02"):
        if len(seg) < 3:
            continue
        sep = seg.find(b"\x01")
        if 0 < sep < len(seg) - 1:
            out[seg[:sep].decode("utf-8", "replace")] = seg[sep + 1 :].decode("utf-8", "replace")
    return out


def find_property(data: bytes, key: bytes) -> bytes | None:
    """One property's raw value without building a dict; same answer as decode_properties."""
    needle = key + b"\x01"
    end = len(data)
    while True:
        idx = data.rfind(needle, 0, end)
        if idx < 0:
            return None
        if idx == 0 or data[idx - 1] == 2:
            stop = data.find(b"\x02", idx)
            if stop < 0:
                stop = len(data)
            value_start = idx + len(needle)
            if stop > value_start:
                return data[value_start:stop]
        end = idx + len(needle) - 1  # keep looking at earlier occurrences


# -- tags code (spec §2.3) ----------------------------------------------------------------------
def tags_code(tags: str | None) -> int:
    """Java ``String.hashCode`` over UTF-16 code units, sign-extended; 0 for None or ''."""
    if not tags:
        return 0
    return _tags_code_utf8(tags.encode("utf-8", "surrogatepass"))


@functools.lru_cache(maxsize=4096)
def _tags_code_utf8(raw: bytes) -> int:
    h = 0
    if raw.isascii():
        for c in raw:
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        units = raw.decode("utf-8", "replace").encode("utf-16-be", "surrogatepass")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _delay_tags_code(
    props: bytes, store_timestamp: int, tags: int, levels: Sequence[int] = DELAY_LEVELS_MS
) -> int:
    """A SCHEDULE_TOPIC_XXXX unit's tagsCode: when its message is due (store time + the
    level's delay, the level capped at the highest); ``tags`` unless DELAY is a positive level."""
    raw = find_property(props, b"DELAY")
    try:
        level = int(raw) if raw is not None else 0
    except ValueError:
        return tags
    if level <= 0:
        return tags
    return store_timestamp + levels[min(level, len(levels)) - 1]


# -- hosts and message ids (spec §1.1, §1.7) ----------------------------------------------------
@functools.lru_cache(maxsize=1024)
def host_bytes(host: str) -> bytes:
    """4 or 16 address bytes; IPv4-mapped IPv6 is written as IPv4 (as Java does).

    A host name (not a literal) is resolved once and cached: records carry addresses only.
    """
    text = host.strip("[]")
    try:
        addr = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        try:
            return socket.inet_aton(socket.gethostbyname(text))
        except OSError as exc:
            raise ValueError(f"cannot resolve host {host!r} to an address: {exc}") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.packed
    return addr.packed


def host_block(host: tuple[str, int]) -> bytes:
    """Address bytes followed by the port as a full int32."""
    return host_bytes(host[0]) + _I32.pack(host[1])


def _host_from(buf: bytes | memoryview, pos: int, v6: bool) -> tuple[str, int]:
    n = 16 if v6 else 4
    raw = bytes(buf[pos : pos + n])
    ip = str(ipaddress.IPv6Address(raw)) if v6 else socket.inet_ntoa(raw)
    return ip, _I32.unpack_from(buf, pos + n)[0]


@functools.lru_cache(maxsize=256)
def _host_block_hex(host: tuple[str, int]) -> str:
    return host_block(host).hex().upper()


def offset_msg_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    """Upper-case hex of store IP, int32 port, int64 physical offset (32 or 56 chars)."""
    return _host_block_hex(store_host) + _I64.pack(commit_log_offset).hex().upper()


def joined_offset_msg_ids(store_host: tuple[str, int], commit_log_offsets: Sequence[int]) -> str:
    """The :func:`offset_msg_id` of each offset joined by commas, as a batch send's answer
    carries them (the host's hex computed once; offsets are never negative).

    Built with C string operations only (one ``pack``, one ``hex`` with a separator, one
    ``replace``): a Python loop per message cost ~8 µs a 32-message answer on the client port.
    """
    if not commit_log_offsets:
        return ""
    prefix = _host_block_hex(store_host)
    packed = struct.pack(f">{len(commit_log_offsets)}Q", *commit_log_offsets)
    return prefix + packed.hex(",", 8).upper().replace(",", "," + prefix)


def decode_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """Inverse of offset_msg_id: (store host, commit-log offset)."""
    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"offset message id {msg_id!r}: expected 32 or 56 hex chars")
    host = _host_from(raw, 0, len(raw) == 28)
    return host, _I64.unpack_from(raw, len(raw) - 8)[0]


# -- records ------------------------------------------------------------------------------------
@dataclass(slots=True)
class MessageExt:
    """A decoded commit-log record: every field of spec §1.1.

    ``body`` is what the producer sent before compressing; ``sys_flag`` stays as stored (its
    COMPRESSED bit and :attr:`compression` say the stored bytes were compressed).
    """

    topic: str
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    store_size: int = 0
    body_crc: int = 0
    magic: int = MAGIC_V1

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def compression(self) -> CompressionType | None:
        """How the stored body is compressed (sysFlag), or None."""
        return compression_of(self.sys_flag)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def msg_id(self) -> str:
        """The offsetMsgId (store host + commit-log offset), as the broker-side decoder sets it."""
        return offset_msg_id(self.store_host, self.commit_log_offset)

    @property
    def uniq_key(self) -> str | None:
        """The client-generated id (what a RocketMQ client calls msgId), if the producer set one."""
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


def encode_record(
    *,
    topic: str,
    queue_id: int,
    body: bytes | bytearray | memoryview,
    properties: bytes | Mapping[str, str] = b"",
    flag: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: tuple[str, int] = ("127.0.0.1", 0),
    store_timestamp: int = 0,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    magic: int = MAGIC_V1,
) -> bytes:
    """One complete record.  The V6 sysflag bits follow the hosts given (callers need not set
    them); BODYCRC is computed here, as the broker does on receipt."""
    props = properties if isinstance(properties, bytes) else encode_properties(properties)
    topic_raw = topic.encode()
    if magic == MAGIC_V1 and len(topic_raw) > MAX_TOPIC_LENGTH_V1:
        raise ValueError(f"topic is {len(topic_raw)} bytes; a V1 record holds at most 127")
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"magic {magic:#x}: only V1 and V2 records exist")
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties are {len(props)} bytes; at most {MAX_PROPERTIES_LENGTH}")
    born = host_block(born_host)
    store = host_block(store_host)
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if len(born) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store) == 20:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    total = record_length(len(body), len(topic_raw), len(props), sys_flag, magic)
    topic_len = _I16.pack(len(topic_raw)) if magic == MAGIC_V2 else bytes((len(topic_raw),))
    return b"".join(
        (
            _SIZE_MAGIC.pack(total, magic),
            _MIDDLE.pack(
                body_crc(body),
                queue_id,
                flag,
                queue_offset,
                commit_log_offset,
                sys_flag,
                born_timestamp,
            ),
            born,
            _I64.pack(store_timestamp),
            store,
            _TAIL.pack(reconsume_times, prepared_transaction_offset, len(body)),
            body,
            topic_len,
            topic_raw,
            _I16.pack(len(props)),
            props,
        )
    )


def blank_record(length: int) -> bytes:
    """The 8-byte end-of-file marker declaring ``length`` bytes of filler (spec §1.8)."""
    return _SIZE_MAGIC.pack(length, BLANK_MAGIC)


def decode_record(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    check_crc: bool = False,
    *,
    decompress_body: bool = True,
) -> MessageExt:
    """A full record at ``pos``; ValueError (naming the position) if it is not one.

    The CRC covers the stored bytes; a compressed body is then decompressed unless
    ``decompress_body`` is false (a body that does not decompress is a ValueError too).
    """
    view = memoryview(buf)
    try:
        total, magic = _SIZE_MAGIC.unpack_from(view, pos)
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise ValueError(f"bad magic code {magic & 0xFFFFFFFF:#010x}")
        if total < MIN_RECORD_SIZE or pos + total > len(view):
            raise ValueError(f"record size {total} does not fit the {len(view) - pos} bytes left")
        crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = _MIDDLE.unpack_from(
            view, pos + 8
        )
        p = pos + POS_BORN_HOST
        born_v6 = bool(sys_flag & BORNHOST_V6_FLAG)
        born_host = _host_from(view, p, born_v6)
        p += 20 if born_v6 else 8
        store_ts = _I64.unpack_from(view, p)[0]
        p += 8
        store_v6 = bool(sys_flag & STOREHOSTADDRESS_V6_FLAG)
        store_host = _host_from(view, p, store_v6)
        p += 20 if store_v6 else 8
        reconsume, prepared, body_len = _TAIL.unpack_from(view, p)
        p += 16
        body = b""
        if body_len > 0:
            body = bytes(view[p : p + body_len])
            if len(body) != body_len:
                raise ValueError("body runs past the buffer")
            p += body_len
        if magic == MAGIC_V2:
            topic_len = _I16.unpack_from(view, p)[0]
            p += 2
        else:
            topic_len = _I8.unpack_from(view, p)[0]
            p += 1
        if topic_len < 0:
            raise ValueError(f"negative topic length {topic_len}")
        topic = bytes(view[p : p + topic_len]).decode("utf-8", "replace")
        p += topic_len
        props_len = _I16.unpack_from(view, p)[0]
        p += 2
        props: dict[str, str] = {}
        if props_len > 0:
            props = decode_properties(view[p : p + props_len])
        expected = record_length(body_len, topic_len, props_len, sys_flag, magic)
    except struct.error as exc:
        raise ValueError(f"record at {pos}: truncated ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"record at {pos}: {exc}") from None
    if expected != total:
        raise ValueError(f"record at {pos}: TOTALSIZE {total} but fields add up to {expected}")
    if check_crc and body_crc(body) != crc:
        raise ValueError(f"record at {pos}: body CRC mismatch")
    if decompress_body and sys_flag & COMPRESSED_FLAG:
        try:
            body = decompress(body, sys_flag)
        except ValueError as exc:
            raise ValueError(f"record at {pos}: {exc}") from None
    return MessageExt(
        topic=topic,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        properties=props,
        store_size=total,
        body_crc=crc,
        magic=magic,
    )


def decode_records(
    buf: bytes | bytearray | memoryview, *, decompress_body: bool = True
) -> list[MessageExt]:
    """Back-to-back records, as a pull response carries them; ValueError on anything else."""
    view = memoryview(buf)
    out: list[MessageExt] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < 8:
            raise ValueError(f"record at {pos}: {len(view) - pos} trailing bytes are not a record")
        msg = decode_record(view, pos, decompress_body=decompress_body)
        out.append(msg)
        pos += msg.store_size
    return out


# -- the dispatcher's parse (spec §1.10) --------------------------------------------------------
@dataclass(slots=True)
class DispatchRequest:
    """What a ConsumeQueue unit and the dispatcher need from one record."""

    topic: str
    queue_id: int
    commit_log_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    sys_flag: int


_topic_cache: dict[bytes, str] = {}


def check_record(
    buf: bytes | bytearray | memoryview, pos: int, check_crc: bool
) -> tuple[DispatchRequest | None, int]:
    """Parse the record at ``pos`` the way RocketMQ's checkMessageAndReturnSize does.

    Returns (request, TOTALSIZE) for a valid record, (None, 0) for the BLANK end-of-file
    marker, (None, -1) for garbage, a partial record or a CRC mismatch, and (None, TOTALSIZE)
    when the size disagrees with the fields.  ``buf`` ends at the readable end (a partial
    record at the tail is -1).  The body is never copied.
    """
    parsed = parse_record(buf, pos, check_crc)
    if isinstance(parsed, int):
        return None, parsed
    return DispatchRequest(*parsed), parsed[3]


# topic, queue_id, commit_log_offset, size, tags_code, store_timestamp, queue_offset, sys_flag
DispatchTuple = tuple[str, int, int, int, int, int, int, int]


def parse_record(
    buf: bytes | bytearray | memoryview,
    pos: int,
    check_crc: bool,
    delay_levels: Sequence[int] = DELAY_LEVELS_MS,
) -> DispatchTuple | int:
    """check_record without the object: the DispatchRequest fields as a tuple for a valid
    record, else the size outcome (0 BLANK, -1 failure, TOTALSIZE on a length mismatch).
    The dispatcher's hot loop uses this form; ``delay_levels`` (messageDelayLevel in ms) turn
    a SCHEDULE_TOPIC_XXXX record's tagsCode into its delivery time, as RocketMQ does."""
    n = len(buf)
    left = n - pos
    if left >= 88:
        # one unpack covers the fixed part of a V1/V2 record with IPv4 hosts (the usual case)
        (
            total,
            magic,
            crc,
            queue_id,
            _flag,
            queue_offset,
            phys,
            sys_flag,
            _born,
            store_ts,
            body_len,
        ) = _FIXED_V4.unpack_from(buf, pos)
    elif left >= 8:
        total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
        sys_flag = -1
    else:
        return -1
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
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):  # IPv6 host(s): general path
        try:
            crc, queue_id, _flag, queue_offset, phys, sys_flag, _born = _MIDDLE.unpack_from(
                buf, pos + 8
            )
            p = pos + (68 if sys_flag & BORNHOST_V6_FLAG else 56)
            store_ts = _I64.unpack_from(buf, p)[0]
            p += 40 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 28
            body_len = _I32.unpack_from(buf, p)[0]
            p += 4
        except struct.error:
            return -1
    else:
        p = pos + 88
    if body_len > 0:
        if p + body_len > pos + total:
            return total if p + body_len <= n else -1
        if check_crc and body_crc32(buf[p : p + body_len]) & 0x7FFFFFFF != crc:
            return -1
        p += body_len
    end = pos + total
    if p + tl + 2 > end:
        return total if p + tl + 2 <= n else -1
    tail = bytes(buf[p:end])  # topic length, topic, properties length, properties
    if tl == 1:
        topic_len = tail[0]
        if topic_len > 127:
            return -1  # a negative signed byte: Java fails reading it
    else:
        topic_len = (tail[0] << 8) | tail[1]
        if topic_len > 32767:
            return -1
    q = tl + topic_len
    if q + 2 > len(tail):
        return int(total)
    props_len = (tail[q] << 8) | tail[q + 1]
    if props_len > 32767:
        props_len -= 65536
    if q + 2 + (props_len if props_len > 0 else 0) != len(tail):
        return int(total)
    raw_topic = tail[tl:q]
    topic = _topic_cache.get(raw_topic)
    if topic is None:
        topic = raw_topic.decode("utf-8", "replace")
        if len(_topic_cache) > 10_000:
            _topic_cache.clear()
        _topic_cache[raw_topic] = topic
    code = 0
    if props_len > 0:
        props = tail[q + 2 :]
        code = unit_tags_code(topic, props, store_ts, delay_levels)
    return topic, queue_id, phys, total, code, store_ts, queue_offset, sys_flag


def unit_tags_code(
    topic: str, props: bytes, store_timestamp: int, delay_levels: Sequence[int] = DELAY_LEVELS_MS
) -> int:
    """A consume-queue unit's tagsCode from its record's raw properties: the TAGS hash, or for
    SCHEDULE_TOPIC_XXXX the delivery time.  The dispatcher (from a parsed record) and the
    master's put path (from the batch it just wrote) both ask here, so they cannot differ."""
    code = 0
    i = props.find(b"TAGS\x01")
    if i >= 0:
        if (i == 0 or props[i - 1] == 2) and props.find(b"TAGS\x01", i + 5) < 0:
            stop = props.find(b"\x02", i + 5)
            tags: bytes | None = props[i + 5 : stop] if stop >= 0 else props[i + 5 :]
        else:
            tags = find_property(props, b"TAGS")
        if tags:
            code = _tags_code_utf8(tags)
    if topic == SCHEDULE_TOPIC and b"DELAY\x01" in props:
        code = _delay_tags_code(props, store_timestamp, code, delay_levels)
    return code
