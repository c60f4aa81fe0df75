"""Binary encodings on the HTTP API's hot path.

Produce requests carry RocketMQ's own client batch encoding (``MessageBatch``: spec §1.9), so a
body is never base64-encoded and a RocketMQ-literate reader recognises every byte. Pull
responses carry commit-log records verbatim (spec §1.1); :mod:`habroker.message` decodes them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from habroker.store import native
from habroker.store.values import BatchEntry

_split_batch: (
    Callable[
        [bytes | memoryview, int, type[BatchEntry]],
        tuple[Sequence[BatchEntry] | None, tuple[str, int | None] | None],
    ]
    | None
) = native.codec.split_batch if native.codec is not None else None

BATCH_CONTENT_TYPE = "application/vnd.rocketmq.batch"
RECORDS_CONTENT_TYPE = "application/vnd.rocketmq.records"

_ENTRY_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLength
_PROPS_LEN = struct.Struct(">h")
ENTRY_OVERHEAD = _ENTRY_HEAD.size + _PROPS_LEN.size  # 22 bytes around body and properties
MAX_PROPERTIES_SIZE = 32767
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class BadBatch(ValueError):
    """A produce body that is not a well-formed batch; ``index`` is the entry at fault."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message if index is None else f"entry {index}: {message}")
        self.index = index


@dataclass(slots=True)
class OutgoingMessage:
    """What a producer sends: a body, an optional tag and keys, and free-form properties."""

    body: bytes
    tags: str | None = None
    keys: str | Iterable[str] | None = None
    properties: Mapping[str, str] | None = None
    flag: int = 0

    def encoded_properties(self) -> bytes:
        props: dict[str, str] = dict(self.properties or {})
        if self.tags:
            props["TAGS"] = self.tags
        if self.keys:
            props["KEYS"] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        return encode_properties(props)


def encode_properties(props: Mapping[str, str]) -> bytes:
    """RocketMQ's ``name\\x01value\\x02`` encoding (5.2+ style: trailing separator kept)."""
    if not props:
        return b""
    for name, value in props.items():
        for text in (name, value):
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                raise ValueError(
                    f"property {name!r}: names and values may not contain \\x01 or \\x02"
                )
        if not name or not value:
            raise ValueError(f"property {name!r}: names and values must be non-empty")
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def encode_entry(body: bytes, properties: bytes = b"", flag: int = 0) -> bytes:
    total = ENTRY_OVERHEAD + len(body) + len(properties)
    return b"".join(
        (
            _ENTRY_HEAD.pack(total, 0, 0, flag, len(body)),
            body,
            _PROPS_LEN.pack(len(properties)),
            properties,
        )
    )


def encode_batch(messages: Iterable[OutgoingMessage | bytes]) -> bytes:
    """One request body for any number of messages (a plain ``bytes`` is a body alone)."""
    parts: list[bytes] = []
    for msg in messages:
        if isinstance(msg, bytes | bytearray | memoryview):
            parts.append(encode_entry(bytes(msg)))
        else:
            parts.append(encode_entry(msg.body, msg.encoded_properties(), msg.flag))
    return b"".join(parts)


DecodedEntry = BatchEntry  # what the store appends: (flag, body view, encoded properties)


def decode_batch(data: bytes | memoryview, *, max_entries: int = 4096) -> Sequence[BatchEntry]:
    """Split a batch into entries, or raise :class:`BadBatch` naming the first bad one.

    Bodies stay views into ``data``: the store copies them once, into the commit log. The
    entries are the store's own :class:`BatchEntry`, so the server hands them on as they are.
    The compiled record codec does the split where it was built, into a ``PackedBatch`` (the
    messages' places in ``data``, entries made only when asked for: the compiled put loops
    read the bytes); :func:`decode_batch_py` is the same in Python, as a list.
    """
    if _split_batch is None:
        return decode_batch_py(data, max_entries=max_entries)
    entries, error = _split_batch(data, max_entries, BatchEntry)
    if entries is None:
        assert error is not None
        raise BadBatch(*error)
    return entries


def decode_batch_py(data: bytes | memoryview, *, max_entries: int = 4096) -> list[BatchEntry]:
    """:func:`decode_batch` in pure Python (the fallback, and the reference in tests)."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    out: list[BatchEntry] = []
    append = out.append
    unpack_head = _ENTRY_HEAD.unpack_from
    unpack_props = _PROPS_LEN.unpack_from
    overhead = ENTRY_OVERHEAD
    head_size = _ENTRY_HEAD.size
    while pos < end:
        if end - pos < overhead:
            raise BadBatch(f"truncated entry header ({end - pos} bytes left)", len(out))
        total, _magic, _crc, flag, body_len = unpack_head(view, pos)
        if body_len < 0 or total < overhead + body_len:
            raise BadBatch(f"bad lengths (totalSize={total}, bodyLength={body_len})", len(out))
        if total > end - pos:
            raise BadBatch(f"totalSize={total} runs past the end of the request", len(out))
        body_start = pos + head_size
        props_at = body_start + body_len
        (props_len,) = unpack_props(view, props_at)
        if props_len < 0 or total != overhead + body_len + props_len:
            raise BadBatch(
                f"totalSize={total} does not match bodyLength={body_len} + propertiesLength={props_len}",
                len(out),
            )
        props = bytes(view[props_at + 2 : props_at + 2 + props_len]) if props_len else b""
        append(BatchEntry(flag, view[body_start:props_at], props))
        pos += total
        if len(out) > max_entries:
            raise BadBatch(f"more than {max_entries} messages in one request", max_entries)
    if not out:
        raise BadBatch("empty batch: at least one message is required")
    return out
