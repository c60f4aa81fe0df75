"""The frame codec against layouts assembled by hand from the spec (§7), and its refusals."""

from __future__ import annotations

import json
import struct

import pytest
from habroker.remoting import BadFrame, FrameDecoder, RemotingCommand, SerializeType
from habroker.remoting.codes import LanguageCode
from habroker.remoting.command import iter_frames
from hypothesis import given, settings
from hypothesis import strategies as st


def rocketmq_header(code, lang, version, opaque, flag, remark, fields):
    ext = b"".join(
        struct.pack(">H", len(k.encode()))
        + k.encode()
        + struct.pack(">i", len(v.encode()))
        + v.encode()
        for k, v in fields.items()
    )
    r = remark.encode() if remark else b""
    return (
        struct.pack(">hbhii", code, lang, version, opaque, flag)
        + struct.pack(">i", len(r))
        + r
        + struct.pack(">i", len(ext))
        + ext
    )


def frame(kind: int, header: bytes, body: bytes = b"") -> bytes:
    return (
        struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body
    )


def test_rocketmq_binary_header_decodes_field_by_field():
    header = rocketmq_header(310, 0, 435, 77, 0, "hi é", {"b": "TopicA", "e": "3"})
    (cmd,) = iter_frames(frame(1, header, b"payload"))
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (
        310,
        LanguageCode.JAVA,
        435,
        77,
        0,
    )
    assert cmd.remark == "hi é"
    assert cmd.ext_fields == {"b": "TopicA", "e": "3"}
    assert cmd.body == b"payload"
    assert cmd.serialize_type is SerializeType.ROCKETMQ


def test_rocketmq_binary_header_encodes_byte_identical():
    cmd = RemotingCommand(
        11,
        opaque=9,
        flag=1,
        remark="r",
        ext_fields={"k": "v"},
        body=b"xy",
        language=LanguageCode.JAVA,
        version=435,
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert cmd.encode_bytes() == frame(1, rocketmq_header(11, 0, 435, 9, 1, "r", {"k": "v"}), b"xy")


def test_json_header_as_java_writes_it():
    header = json.dumps(
        {
            "code": 105,
            "extFields": {"topic": "T"},
            "flag": 0,
            "language": "JAVA",
            "opaque": 5,
            "serializeTypeCurrentRPC": "JSON",
            "version": 435,
        }
    ).encode()
    (cmd,) = iter_frames(frame(0, header))
    assert cmd.code == 105 and cmd.ext_fields == {"topic": "T"} and cmd.opaque == 5
    answer = cmd.response(17, "no route", {"x": 1})
    (back,) = iter_frames(answer.encode_bytes())
    assert back.is_response and back.opaque == 5 and back.code == 17
    assert back.remark == "no route" and back.ext_fields == {"x": "1"}
    assert back.serialize_type is SerializeType.JSON


@given(
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    remark=st.none() | st.text(),
    fields=st.dictionaries(st.text(), st.text(), max_size=6),
)
def test_json_header_bytes_are_compact_utf8_json(code, opaque, remark, fields):
    """The JSON header is exactly what a compact, non-ASCII-escaping ``json.dumps`` gives (the
    layout earlier releases wrote and Java's fastjson reads), whatever the text holds."""
    cmd = RemotingCommand(code, opaque=opaque, remark=remark, ext_fields=fields)
    obj = {
        "code": code,
        "extFields": fields,
        "flag": 0,
        "language": cmd.language.name,
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if remark is not None:
        obj["remark"] = remark
    try:
        want = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: refused either way
        with pytest.raises((UnicodeEncodeError, ValueError)):
            cmd.encode_bytes()
        return
    header = cmd.encode_bytes()[8:]
    assert header == want
    (back,) = iter_frames(cmd.encode_bytes())
    assert (back.code, back.opaque, back.remark, back.ext_fields) == (code, opaque, remark, fields)


def test_body_parts_are_written_without_joining():
    cmd = RemotingCommand(0, body_parts=[b"ab", memoryview(b"cd")])
    parts = cmd.encode()
    assert parts[1:] == [b"ab", memoryview(b"cd")]
    (back,) = iter_frames(cmd.encode_bytes())
    assert back.body == b"abcd"


def test_decoder_reassembles_frames_split_anywhere():
    stream = b"".join(
        RemotingCommand.request(34, {"i": str(i)}, b"z" * i).encode_bytes() for i in range(20)
    )
    decoder = FrameDecoder()
    got = []
    for i in range(0, len(stream), 7):
        got.extend(decoder.feed(stream[i : i + 7]))
    assert [c.ext_fields["i"] for c in got] == [str(i) for i in range(20)]
    assert [len(c.body or b"") for c in got] == list(range(20))
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">i", 16 * 1024 * 1024), "frame length"),
        (struct.pack(">i", -5), "frame length"),
        (struct.pack(">i", 2), "frame length"),
        (frame(2, b"{}"), "unknown serialize type"),
        (frame(0, b"{not json"), "does not parse"),
        (frame(0, b"[1,2]"), "not an object"),
        (frame(0, b'{"code":"x"}'), "not an integer"),
        (frame(0, b'{"code":1,"extFields":[1]}'), "extFields"),
        (frame(0, b'{"code":1,"opaque":99999999999}'), "int32"),
        (frame(0, b"[" * 100000 + b"]" * 100000), "does not parse"),
        (struct.pack(">ii", 8, 100) + b"abcd", "header length"),
        (frame(1, b"\x00" * 5), "shorter than its fixed part"),
        (
            frame(1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 1000) + b"\x00" * 8),
            "remark length",
        ),
        (
            frame(1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">ii", 0, 50)),
            "extFields length",
        ),
        (
            frame(
                1, struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">ii", 0, 3) + b"\x00\x09k"
            ),
            "key runs past",
        ),
        (
            frame(
                1, rocketmq_header(1, 0, 0, 0, 0, "", {})[:-4] + struct.pack(">i", 2) + b"\xff\xff"
            ),
            "key runs past",
        ),
        (
            frame(
                1,
                struct.pack(">hbhii", 1, 0, 0, 0, 0)
                + struct.pack(">ii", 0, 9)
                + b"\x00\x01\xff"
                + struct.pack(">i", 0)
                + b"\x00\x00",
            ),
            "UTF-8",
        ),
    ],
)
def test_garbage_is_refused_with_a_reason(data, message):
    with pytest.raises(BadFrame, match=message):
        FrameDecoder().feed(data)


def test_frame_limit_is_configurable():
    big = RemotingCommand.request(10, body=b"x" * 2000).encode_bytes()
    assert len(FrameDecoder(max_length=4096).feed(big)) == 1
    with pytest.raises(BadFrame):
        FrameDecoder(max_length=1024).feed(big)


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**33), 2**33),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)


_int32 = st.integers(-(2**31), 2**31 - 1)
#: mostly what a client writes (so the typed path is taken), sometimes anything
_field = st.one_of(_int32, _int32, _int32, _scalar)


@settings(max_examples=400)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "code": _field,
            "opaque": _field,
            "flag": _field,
            "version": _field,
            "remark": st.one_of(st.text(max_size=8), st.none(), _scalar),
            "language": st.one_of(st.sampled_from(["JAVA", "PYTHON", "GO", "COBOL"]), _scalar),
            "serializeTypeCurrentRPC": st.just("JSON"),
            "extFields": st.one_of(
                st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=4),
                st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=4),
                st.none(),
                st.dictionaries(st.text(max_size=6), _scalar, max_size=4),
                _scalar,
            ),
        },
    )
)
def test_the_typed_json_header_reads_as_the_checked_one_or_refuses_alike(header) -> None:
    """The fast path (msgspec decoding straight into typed fields) gives the command the
    field-by-field path gives, and whatever it cannot type goes that path: the same command
    or the same refusal, for any header."""
    from habroker.remoting.command import _decode_json_header, _decode_json_header_checked

    raw = memoryview(json.dumps(header).encode())
    try:
        expected: RemotingCommand | str = _decode_json_header_checked(raw)
    except BadFrame as exc:
        expected = str(exc)
    try:
        got: RemotingCommand | str = _decode_json_header(raw)
    except BadFrame as exc:
        got = str(exc)
    assert got == expected
