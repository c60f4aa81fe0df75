"""DLedgerEntry: one entry of the replicated log, on disk and in PUSH requests.

On disk (DLedgerEntryCoder, big-endian) an entry is a 48-byte header then the body:
magic int, size int (header + body), index long, term long, pos long (the entry's own offset in
the data files), channel int, chainCrc int, bodyCrc int, body length int.  DLedger 0.3.1.2
writes both CRCs as 0 and never checks them; we do the same so Java peers compare entries
equal.  In PUSH requests an entry travels as fastjson writes the Java bean: its fields by name,
the body as base64.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
#: the header before the body length field ends at 44; the body starts at 48
HEADER_SIZE = 44
BODY_OFFSET = 48
POS_OFFSET = 24  # magic + size + index + term
INDEX_UNIT_SIZE = 32

#: the entry header's struct format (a writer may pack a body's own header after it at once)
HEADER_FORMAT = ">iiqqqiiii"
_HEADER = struct.Struct(HEADER_FORMAT)
_INDEX_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term
assert _HEADER.size == BODY_OFFSET and _INDEX_UNIT.size == INDEX_UNIT_SIZE


@dataclass(slots=True)
class DLedgerEntry:
    index: int
    term: int
    body: bytes
    pos: int = -1
    magic: int = CURRENT_MAGIC
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0
    size: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = BODY_OFFSET + len(self.body)

    def header(self) -> bytes:
        """The 48-byte header alone (the body follows it on disk)."""
        return _HEADER.pack(
            self.magic,
            self.size,
            self.index,
            self.term,
            self.pos,
            self.channel,
            self.chain_crc,
            self.body_crc,
            len(self.body),
        )

    def encode(self) -> bytearray:
        """Header and body, ready to write at ``pos``."""
        out = bytearray(BODY_OFFSET + len(self.body))
        _HEADER.pack_into(
            out,
            0,
            self.magic,
            self.size,
            self.index,
            self.term,
            self.pos,
            self.channel,
            self.chain_crc,
            self.body_crc,
            len(self.body),
        )
        out[BODY_OFFSET:] = self.body
        return out


def same_entry(a: DLedgerEntry, b: DLedgerEntry | None) -> bool:
    """DLedgerEntry.equals: header fields and body, not the CRCs."""
    return (
        b is not None
        and (a.size, a.magic, a.index, a.term, a.channel, a.pos)
        == (b.size, b.magic, b.index, b.term, b.channel, b.pos)
        and bytes(a.body) == bytes(b.body)
    )


def decode_header(data: bytes | bytearray | memoryview, at: int = 0) -> tuple[int, ...]:
    """(magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodyLen) at ``at``."""
    return _HEADER.unpack_from(data, at)


def decode(data: bytes | bytearray | memoryview) -> DLedgerEntry:
    """One entry from its bytes; ValueError if they are not one."""
    if len(data) < BODY_OFFSET:
        raise ValueError(f"an entry needs a {BODY_OFFSET}-byte header, got {len(data)} bytes")
    magic, size, index, term, pos, channel, chain_crc, body_crc, body_len = _HEADER.unpack_from(
        data, 0
    )
    body = bytes(data[BODY_OFFSET : BODY_OFFSET + body_len])
    if len(body) != body_len:
        raise ValueError(f"entry {index} at {pos}: body of {body_len} bytes is cut short")
    return DLedgerEntry(index, term, body, pos, magic, channel, chain_crc, body_crc, size)


def encode_index(entry_pos: int, size: int, magic: int, index: int, term: int) -> bytes:
    return _INDEX_UNIT.pack(magic, entry_pos, size, index, term)


def decode_index(
    data: bytes | bytearray | memoryview, at: int = 0
) -> tuple[int, int, int, int, int]:
    """(magic, pos, size, index, term) of one 32-byte index unit."""
    magic, pos, size, index, term = _INDEX_UNIT.unpack_from(data, at)
    return magic, pos, size, index, term


def pack_index_units_py(
    positions: Sequence[int], sizes: Sequence[int], first: int, term: int, magic: int
) -> bytes:
    """The index units of entries ``first``, ``first + 1``, ... of ``term`` at ``positions``
    (the compiled ``pack_index_units`` is the fast one; both give the same bytes)."""
    if len(positions) != len(sizes):
        raise ValueError(f"{len(positions)} positions, {len(sizes)} sizes")
    out = bytearray(len(positions) * INDEX_UNIT_SIZE)
    for i, (pos, size) in enumerate(zip(positions, sizes, strict=True)):
        _INDEX_UNIT.pack_into(out, i * INDEX_UNIT_SIZE, magic, pos, size, first + i, term)
    return bytes(out)


def units_match_entries_py(
    units: bytes | bytearray | memoryview, entries: bytes | bytearray | memoryview, magic: int
) -> bool:
    """Whether ``entries`` are exactly the entries ``units`` index, back to back: each unit's
    magic, size, index and term in its entry's header, each entry where its unit says, the
    indexes consecutive, the terms never falling, each size 48 bytes plus the header's body
    length, nothing after the last (the compiled ``units_match_entries`` is the fast one)."""
    if not units or len(units) % INDEX_UNIT_SIZE:
        return False
    _m, pos0, _s, index0, _t = _INDEX_UNIT.unpack_from(units, 0)
    at = term = 0
    for i, (u_magic, pos, size, index, u_term) in enumerate(_INDEX_UNIT.iter_unpack(units)):
        if (
            u_magic != magic
            or size < BODY_OFFSET
            or pos != pos0 + at
            or index != index0 + i
            or u_term < term
            or at + size > len(entries)
        ):
            return False
        e_magic, e_size, e_index, e_term, e_pos, _c, _cc, _bc, body_len = _HEADER.unpack_from(
            entries, at
        )
        if (e_magic, e_size, e_index, e_term, e_pos, body_len) != (
            magic,
            size,
            index,
            u_term,
            pos,
            size - BODY_OFFSET,
        ):
            return False
        term = u_term
        at += size
    return at == len(entries)


def to_json_dict(entry: DLedgerEntry) -> dict[str, Any]:
    """The entry as fastjson writes the Java bean (every getter, the body in base64)."""
    return {
        "body": base64.b64encode(entry.body).decode("ascii"),
        "bodyCrc": entry.body_crc,
        "chainCrc": entry.chain_crc,
        "channel": entry.channel,
        "index": entry.index,
        "magic": entry.magic,
        "pos": entry.pos,
        "size": entry.size,
        "term": entry.term,
    }


class RawJSON(str):
    """JSON text already encoded (entries of a push, built from the files without decoding
    them); :func:`habroker.dledger.protocol.encode` writes it as it is."""


class WireEntry(msgspec.Struct):
    """An entry in a PUSH as fastjson writes the Java bean: its getters in name order, the
    body in base64 (msgspec encodes and decodes ``bytes`` that way, in C)."""

    body: bytes = b""
    bodyCrc: int = 0
    chainCrc: int = 0
    channel: int = 0
    index: int = -1
    magic: int = CURRENT_MAGIC
    pos: int = -1
    size: int = -1
    term: int = -1

    def entry(self) -> DLedgerEntry:
        return DLedgerEntry(
            self.index,
            self.term,
            bytes(self.body),
            self.pos,
            self.magic,
            self.channel,
            self.chainCrc,
            self.bodyCrc,
            self.size,
        )


class _WireEntryOut(msgspec.Struct):
    """:class:`WireEntry` for encoding only: the body is a view of the data files (msgspec
    writes any buffer as base64), not a copy."""

    body: memoryview
    bodyCrc: int
    chainCrc: int
    channel: int
    index: int
    magic: int
    pos: int
    size: int
    term: int


_ENCODER = msgspec.json.Encoder()


def entries_json(raw_entries: list[memoryview]) -> RawJSON:
    """A JSON array of entries, as :func:`to_json_dict` would encode them, straight from
    their bytes in the data files."""
    return RawJSON(bytes(entries_raw(raw_entries)).decode("ascii"))


def entries_raw(raw_entries: list[memoryview]) -> msgspec.Raw:
    """:func:`entries_json` as bytes, ready to go into an encoded body."""
    wire = []
    for raw in raw_entries:
        magic, size, index, term, pos, channel, chain_crc, body_crc, body_len = _HEADER.unpack_from(
            raw, 0
        )
        body = raw[BODY_OFFSET : BODY_OFFSET + body_len]
        wire.append(
            _WireEntryOut(body, body_crc, chain_crc, channel, index, magic, pos, size, term)
        )
    return msgspec.Raw(_ENCODER.encode(wire))


def from_json_dict(data: Any) -> DLedgerEntry:
    """An entry as a peer sent it; ValueError if ``data`` is not one (a PUSH from the network)."""
    if not isinstance(data, dict):
        raise ValueError(f"an entry is a JSON object, not {type(data).__name__}")
    body_text = data.get("body")
    if body_text and not isinstance(body_text, str):
        raise ValueError(f"entry body is base64 text, not {type(body_text).__name__}")
    body = binascii.a2b_base64(body_text) if body_text else b""  # binascii.Error: a ValueError
    values = [data.get(key, default) for key, default in _JSON_FIELDS]
    if not all(type(v) is int for v in values):  # fastjson may quote a number: the slow path
        values = [json_int(data, key, default) for key, default in _JSON_FIELDS]
    index, term, pos, magic, channel, chain_crc, body_crc, size = values
    return DLedgerEntry(index, term, body, pos, magic, channel, chain_crc, body_crc, size)


_JSON_FIELDS = (
    ("index", -1),
    ("term", -1),
    ("pos", -1),
    ("magic", CURRENT_MAGIC),
    ("channel", 0),
    ("chainCrc", 0),
    ("bodyCrc", 0),
    ("size", -1),
)


def json_int(data: dict[str, Any], key: str, default: int) -> int:
    """An integer field of a peer's JSON (fastjson may quote it); ValueError if it is none."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"field {key} is not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"field {key} is not an integer: {value!r}") from None
