import struct

import pytest
from habroker.wire import (
    BadBatch,
    OutgoingMessage,
    decode_batch,
    encode_batch,
    encode_entry,
    encode_properties,
)


def test_entry_layout_is_rocketmq_client_batch_format():
    entry = encode_entry(b"hello", b"TAGS\x01a\x02", flag=7)
    total, magic, crc, flag, body_len = struct.unpack_from(">iiiii", entry)
    assert (total, magic, crc, flag, body_len) == (len(entry), 0, 0, 7, 5)
    assert entry[20:25] == b"hello"
    (props_len,) = struct.unpack_from(">h", entry, 25)
    assert props_len == 7 and entry[27:] == b"TAGS\x01a\x02"


def test_round_trip_many():
    msgs = [
        OutgoingMessage(bytes([i]) * i, tags=f"t{i}" if i % 2 else None, keys=["k", str(i)])
        for i in range(50)
    ]
    decoded = decode_batch(encode_batch(msgs))
    assert [bytes(d.body) for d in decoded] == [m.body for m in msgs]
    assert decoded[3].properties == b"TAGS\x01t3\x02KEYS\x01k 3\x02"
    assert decoded[2].properties == b"KEYS\x01k 2\x02"


def test_plain_bytes_are_bodies():
    assert [bytes(d.body) for d in decode_batch(encode_batch([b"a", b"bc"]))] == [b"a", b"bc"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "empty batch"),
        (b"\x00\x00", "truncated entry header"),
        (encode_entry(b"abc")[:-1], "runs past the end"),
        (struct.pack(">iiiii", 30, 0, 0, 0, -1) + b"\x00" * 10, "bad lengths"),
        (encode_entry(b"abc") + encode_entry(b"x")[:10], "entry 1: truncated"),
    ],
)
def test_malformed_batches_are_refused(data, fragment):
    with pytest.raises(BadBatch, match=fragment):
        decode_batch(data)


def test_mismatched_total_size():
    entry = bytearray(encode_entry(b"abc", b"K\x01v\x02"))
    struct.pack_into(">h", entry, 23, 2)  # properties length lies
    with pytest.raises(BadBatch, match="does not match"):
        decode_batch(bytes(entry))


def test_too_many_entries():
    with pytest.raises(BadBatch, match="more than 3"):
        decode_batch(encode_batch([b"x"] * 4), max_entries=3)


def test_properties_refuse_separators():
    with pytest.raises(ValueError, match="may not contain"):
        encode_properties({"a\x01": "b"})
    with pytest.raises(ValueError, match="non-empty"):
        encode_properties({"a": ""})
