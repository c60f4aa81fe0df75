"""RemotingCommand and its frame: what travels on RocketMQ's client port.

A frame is ``[int32 length][int32 serializeType<<24 | headerLength][header][body]`` where
``length`` counts everything after itself.  The header is either JSON (RocketMQ's default) or
the ROCKETMQ binary layout; an answer is written in the serialization of its request.  Header
fields beyond the fixed ones travel as ``extFields`` — string to string — which is where every
request's custom header lives.  Layout and pointers: ``docs/wire-layouts.md``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Annotated, Any, BinaryIO

import msgspec

from habroker.remoting.codes import LanguageCode, ResponseCode

# Netty's LengthFieldBasedFrameDecoder limit in RocketMQ (com.rocketmq.remoting.frameMaxLength)
FRAME_MAX_LENGTH = 16 * 1024 * 1024
RPC_RESPONSE = 1  # flag bit 0: a response
RPC_ONEWAY = 2  # flag bit 1: the requester wants no answer
# RocketMQ 4.9.7's MQVersion ordinal (V4_9_7); clients only log it
CURRENT_VERSION = 407

_I32 = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">ii")
_RMQ_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_U16 = struct.Struct(">H")
_LANGUAGE_BY_NAME = {m.name: m for m in LanguageCode}
_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode

_Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), lt=2**31)]


class _TypedHeader(msgspec.Struct):
    """The JSON header as RocketMQ's clients write it, typed for msgspec's decoder: anything
    else (a null or a number among extFields, a bool for an int) takes the checked path."""

    code: _Int32 = 0
    opaque: _Int32 = 0
    flag: _Int32 = 0
    remark: str | None = None
    extFields: dict[str, str] | None = None
    language: str = "JAVA"
    version: _Int32 = 0


_typed_header = msgspec.json.Decoder(_TypedHeader).decode


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class BadFrame(ValueError):
    """Bytes that are not a RemotingCommand: the connection that sent them is closed."""


Body = bytes | bytearray | memoryview


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: Body | None = None
    # a body made of several buffers (commit-log runs of a pull), written without joining
    body_parts: Sequence[Body] | None = None
    # where each of body_parts lies in a file (file, position): the channel may send a large
    # body from there with sendfile instead of from memory
    body_files: Sequence[tuple[BinaryIO, int]] | None = None
    language: LanguageCode = LanguageCode.PYTHON
    version: int = CURRENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    # -- construction ------------------------------------------------------------------
    @classmethod
    def request(
        cls,
        code: int,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
        *,
        oneway: bool = False,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        return cls(
            code,
            flag=RPC_ONEWAY if oneway else 0,
            ext_fields=ext_fields(header),
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
    ) -> RemotingCommand:
        """The answer to this request: same opaque, same serialization, the response bit."""
        return RemotingCommand(
            int(code),
            opaque=self.opaque,
            flag=RPC_RESPONSE,
            remark=remark,
            ext_fields=ext_fields(header),
            body=body,
            serialize_type=self.serialize_type,
        )

    # -- flags -------------------------------------------------------------------------
    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    @property
    def body_bytes(self) -> bytes:
        if self.body_parts is not None:
            return b"".join(self.body_parts)
        return bytes(self.body) if self.body is not None else b""

    # -- encoding ----------------------------------------------------------------------
    def encode(self) -> list[Body]:
        """The frame as buffers to write in order (the body is never copied)."""
        header = (
            self._encode_rocketmq_header()
            if self.serialize_type is SerializeType.ROCKETMQ
            else self._encode_json_header()
        )
        parts: list[Body] = []
        body_len = 0
        if self.body_parts is not None:
            parts.extend(self.body_parts)
            body_len = sum(len(p) for p in self.body_parts)
        elif self.body is not None:
            parts.append(self.body)
            body_len = len(self.body)
        head = _FRAME_HEAD.pack(
            4 + len(header) + body_len, (self.serialize_type << 24) | len(header)
        )
        return [head + header, *parts]

    def encode_bytes(self) -> bytes:
        return b"".join(self.encode())

    def _encode_json_header(self) -> bytes:
        obj: dict[str, Any] = {
            "code": self.code,
            "extFields": self.ext_fields,
            "flag": self.flag,
            "language": self.language.name,
            "opaque": self.opaque,
            "serializeTypeCurrentRPC": self.serialize_type.name,
            "version": self.version,
        }
        if self.remark is not None:
            obj["remark"] = self.remark
        # msgspec writes what json.dumps(separators=(",", ":"), ensure_ascii=False) does, byte
        # for byte (tests/habroker/remoting/test_command.py), at a fraction of the cost per frame
        return _json_encode(obj)

    def _encode_rocketmq_header(self) -> bytes:
        out = bytearray(
            _RMQ_FIXED.pack(self.code, self.language, self.version, self.opaque, self.flag)
        )
        remark = self.remark.encode() if self.remark else b""
        out += _I32.pack(len(remark)) + remark
        fields = bytearray()
        for key, value in self.ext_fields.items():
            k = key.encode()
            v = value.encode()
            fields += _U16.pack(len(k)) + k + _I32.pack(len(v)) + v
        out += _I32.pack(len(fields)) + fields
        return bytes(out)

    def __repr__(self) -> str:  # bodies can be megabytes: never print them
        kind = "response" if self.is_response else "request"
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"remark={self.remark!r} ext={self.ext_fields!r} body={len(self.body_bytes)}B)"
        )


def ext_fields(header: Mapping[str, Any] | None) -> dict[str, str]:
    """A custom header as RocketMQ puts it on the wire: non-null fields as strings."""
    if not header:
        return {}
    out: dict[str, str] = {}
    for key, value in header.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


# -- decoding ------------------------------------------------------------------------------
def decode_frame(frame: memoryview) -> RemotingCommand:
    """One frame without its length prefix: ``[headerLength|type][header][body]``."""
    if len(frame) < 4:
        raise BadFrame(f"frame of {len(frame)} bytes has no header length")
    (mark,) = _I32.unpack_from(frame, 0)
    kind = (mark >> 24) & 0xFF
    header_len = mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise BadFrame(f"header length {header_len} exceeds the frame ({len(frame) - 4} bytes)")
    header = frame[4 : 4 + header_len]
    if kind == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif kind == SerializeType.ROCKETMQ:
        cmd = _decode_rocketmq_header(header)
    else:
        raise BadFrame(f"unknown serialize type {kind}")
    body = frame[4 + header_len :]
    if len(body):
        cmd.body = bytes(body)  # a copy: FrameReader reuses the buffer for the next frame
    return cmd


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        typed = _typed_header(header)
    except (ValueError, RecursionError):  # msgspec's errors are ValueErrors: the checked path
        return _decode_json_header_checked(header)
    return RemotingCommand(
        typed.code,
        opaque=typed.opaque,
        flag=typed.flag,
        remark=typed.remark,
        ext_fields=typed.extFields or {},
        language=_LANGUAGE_BY_NAME.get(typed.language, LanguageCode.OTHER),
        version=typed.version,
        serialize_type=SerializeType.JSON,
    )


def _decode_json_header_checked(header: memoryview) -> RemotingCommand:
    """Any JSON object: fields checked one by one, extFields' values made text (null ones
    dropped), a :class:`BadFrame` that says what is wrong."""
    try:
        obj = _json_decode(header)
    except (ValueError, RecursionError) as exc:  # msgspec.DecodeError is a ValueError
        raise BadFrame(f"JSON header does not parse: {exc}") from None
    if not isinstance(obj, dict):
        raise BadFrame("JSON header is not an object")
    try:
        code = _int(obj.get("code"), "code", 0)
        ext = obj.get("extFields") or {}
        if not isinstance(ext, dict):
            raise BadFrame("extFields is not an object")
        fields = {str(k): _text(v) for k, v in ext.items() if v is not None}
        remark = obj.get("remark")
        language = _LANGUAGE_BY_NAME.get(str(obj.get("language", "JAVA")), LanguageCode.OTHER)
        return RemotingCommand(
            code,
            opaque=_int(obj.get("opaque"), "opaque", 0),
            flag=_int(obj.get("flag"), "flag", 0),
            remark=None if remark is None else str(remark),
            ext_fields=fields,
            language=language,
            version=_int(obj.get("version"), "version", 0),
            serialize_type=SerializeType.JSON,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, BadFrame):
            raise
        raise BadFrame(f"JSON header has a bad field: {exc}") from None


def _int(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadFrame(f"header field {name} is not an integer: {value!r}")
    if not -(2**31) <= value < 2**31:
        raise BadFrame(f"header field {name} is out of the int32 range: {value}")
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _decode_rocketmq_header(header: memoryview) -> RemotingCommand:
    size = len(header)
    if size < _RMQ_FIXED.size + 8:
        raise BadFrame(f"ROCKETMQ header of {size} bytes is shorter than its fixed part")
    code, language, version, opaque, flag = _RMQ_FIXED.unpack_from(header, 0)
    pos = _RMQ_FIXED.size
    (remark_len,) = _I32.unpack_from(header, pos)
    pos += 4
    if not 0 <= remark_len <= size - pos - 4:
        raise BadFrame(f"remark length {remark_len} exceeds the header")
    remark = _utf8(header[pos : pos + remark_len]) if remark_len else None
    pos += remark_len
    (ext_len,) = _I32.unpack_from(header, pos)
    pos += 4
    if not 0 <= ext_len <= size - pos:
        raise BadFrame(f"extFields length {ext_len} exceeds the header")
    end = pos + ext_len
    fields: dict[str, str] = {}
    while pos < end:
        if pos + 2 > end:
            raise BadFrame("extFields: truncated key length")
        (klen,) = _U16.unpack_from(header, pos)
        pos += 2
        if pos + klen + 4 > end:
            raise BadFrame("extFields: key runs past the header")
        key = _utf8(header[pos : pos + klen])
        pos += klen
        (vlen,) = _I32.unpack_from(header, pos)
        pos += 4
        if not 0 <= vlen <= end - pos:
            raise BadFrame("extFields: value runs past the header")
        fields[key] = _utf8(header[pos : pos + vlen])
        pos += vlen
    try:
        lang = LanguageCode(language)
    except ValueError:
        lang = LanguageCode.OTHER
    return RemotingCommand(
        code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=fields,
        language=lang,
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _utf8(raw: memoryview) -> str:
    try:
        return bytes(raw).decode()
    except UnicodeDecodeError as exc:
        raise BadFrame(f"a header string is not UTF-8: {exc}") from None


#: the receive buffer every connection reads into: headers and frames up to this size are cut
#: from it in place; a longer frame is read into a buffer of its own, of the frame's exact size
RECEIVE_BUFFER = 64 * 1024
#: a connection keeps the buffer of its last long frame up to this size for its next long frame:
#: a fresh buffer per frame costs a page fault per 4 KiB written (about as much as the rest of
#: the frame's decoding), a reused one none
LONG_FRAME_KEEP = 1024 * 1024


class FrameReader:
    """Cuts a byte stream into commands, reading straight into its own buffers.

    The reading side of ``asyncio.BufferedProtocol``: :meth:`get_buffer` says where the next
    bytes go and :meth:`buffer_updated` cuts what arrived.  Small frames (the common case, many
    in one read) are decoded in place from one shared receive buffer; a frame longer than that
    buffer gets a buffer of its final size as soon as its length is known (the connection's
    last one, when that is big enough and up to :data:`LONG_FRAME_KEEP`), and the rest of it is
    read straight into it: no growing and no re-slicing.  :func:`decode_frame` copies what it
    keeps, so a buffer is free again as soon as its frame is decoded.  A frame over
    ``max_length`` is refused (:class:`BadFrame`) as soon as its length prefix arrives, before
    it is read.
    """

    __slots__ = (
        "_buf",
        "_end",
        "_filled",
        "_large",
        "_refused",
        "_spare",
        "_start",
        "_view",
        "max_length",
    )

    def __init__(
        self, max_length: int = FRAME_MAX_LENGTH, buffer_size: int = RECEIVE_BUFFER
    ) -> None:
        self._buf = bytearray(buffer_size)
        self._view = memoryview(self._buf)
        self._start = 0  # the first byte not yet cut
        self._end = 0  # the end of what arrived
        self._large: memoryview | None = None  # a long frame (without its length prefix)
        self._filled = 0  # how much of the long frame arrived
        self._spare: memoryview | None = None  # the last long frame's buffer, for the next
        self._refused: BadFrame | None = None  # the stream is garbage from here on
        self.max_length = max_length

    @property
    def buffered(self) -> int:
        """Bytes received but not yet cut into a command."""
        if self._large is not None:
            return 4 + self._filled
        return self._end - self._start

    @property
    def refused(self) -> BadFrame | None:
        """Why the stream was refused (the first :class:`BadFrame`), or None."""
        return self._refused

    def get_buffer(self) -> memoryview:
        """Where the next bytes go: never empty."""
        if self._large is not None:
            return self._large[self._filled :]
        start = self._start
        if start:
            need = 4
            if self._end - start >= 4:  # a frame known to fit the buffer (see buffer_updated)
                need += _I32.unpack_from(self._buf, start)[0]
            if start + need > len(self._buf):  # move the partial frame to the front
                size = self._end - start
                self._view[:size] = self._view[start : self._end]
                self._start = 0
                self._end = size
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> list[RemotingCommand]:
        """``nbytes`` arrived in the last :meth:`get_buffer`: the commands they complete.

        After a :class:`BadFrame` the stream has no frame boundaries left: every later call
        raises it again (and the buffers only take bytes in, to be dropped)."""
        if self._refused is not None:
            raise self._refused
        try:
            return self._cut(nbytes)
        except BadFrame as exc:
            self._refused = exc
            self._large = None
            self._start = self._end = 0
            raise

    def _cut(self, nbytes: int) -> list[RemotingCommand]:
        large = self._large
        if large is not None:
            self._filled += nbytes
            if self._filled < len(large):
                return []
            self._large = None
            self._filled = 0
            return [decode_frame(large)]
        buf = self._buf
        view = self._view
        pos = self._start
        end = self._end = self._end + nbytes
        out: list[RemotingCommand] = []
        while end - pos >= 4:
            (length,) = _I32.unpack_from(buf, pos)
            if length < 4 or length + 4 > self.max_length:
                raise BadFrame(
                    f"frame length {length} is outside 4..{self.max_length - 4} "
                    "(com.rocketmq.remoting.frameMaxLength)"
                )
            if end - pos - 4 >= length:
                out.append(decode_frame(view[pos + 4 : pos + 4 + length]))
                pos += 4 + length
                continue
            if length + 4 > len(buf):  # longer than the shared buffer: a buffer of its own
                have = end - pos - 4
                spare = self._spare
                if spare is not None and len(spare) >= length:
                    frame = spare[:length]
                else:
                    frame = memoryview(bytearray(length))
                    if length <= LONG_FRAME_KEEP:
                        self._spare = frame
                frame[:have] = view[pos + 4 : end]
                self._large = frame
                self._filled = have
                pos = end
            break
        if pos == end:
            self._start = self._end = 0
        else:
            self._start = pos
        return out


class FrameDecoder(FrameReader):
    """A :class:`FrameReader` fed with bytes already read (clients of plain sockets, tools)."""

    __slots__ = ()

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        src = memoryview(data).cast("B")
        out: list[RemotingCommand] = []
        pos = 0
        while pos < len(src):
            dest = self.get_buffer()
            n = min(len(dest), len(src) - pos)
            dest[:n] = src[pos : pos + n]
            out.extend(self.buffer_updated(n))
            pos += n
        return out


def iter_frames(data: bytes) -> Iterable[RemotingCommand]:
    """Every command of a complete byte string (tests, tools)."""
    decoder = FrameDecoder()
    commands = decoder.feed(data)
    if decoder.buffered:
        raise BadFrame(f"{decoder.buffered} trailing bytes are not a whole frame")
    return commands
