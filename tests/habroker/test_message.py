"""The record codec against the spec: worked example, reader outcomes, properties, tagsCode."""

from __future__ import annotations

import ipaddress
import random
import struct
import zlib

import pytest
from habroker.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    blank_record,
    check_record,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    decode_records,
    encode_properties,
    encode_record,
    host_block,
    joined_offset_msg_ids,
    offset_msg_id,
    tags_code,
)

# spec §1.11, copied byte for byte from the hex dump
WORKED_EXAMPLE = bytes.fromhex(
    "00 00 00 7b da a3 20 a7 77 d1 89 82 00 00 00 03 "
    "00 00 00 00 00 00 00 00 00 00 00 2a 00 00 00 00 "
    "40 00 10 00 00 00 00 00 00 00 01 8b cf e5 68 00 "
    "c0 a8 00 0a 00 00 d4 31 00 00 01 8b cf e5 68 05 "
    "c0 a8 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00 "
    "00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f "
    "70 69 63 54 65 73 74 00 12 4b 45 59 53 01 6b 31 "
    "02 54 41 47 53 01 54 61 67 41 02"
)
BORN_TS = 0x0000018BCFE56800
STORE_TS = 0x0000018BCFE56805


def _worked_example_record() -> bytes:
    return encode_record(
        topic="TopicTest",
        queue_id=3,
        body=b"Hello",
        properties=b"KEYS\x01k1\x02TAGS\x01TagA\x02",
        queue_offset=42,
        commit_log_offset=0x40001000,
        born_timestamp=BORN_TS,
        born_host=("192.168.0.10", 54321),
        store_timestamp=STORE_TS,
        store_host=("192.168.0.1", 10911),
    )


def test_worked_example_length_is_123() -> None:
    assert len(WORKED_EXAMPLE) == 123


def test_encode_matches_worked_example_byte_for_byte() -> None:
    assert _worked_example_record() == WORKED_EXAMPLE


def test_decode_worked_example_field_by_field() -> None:
    msg = decode_record(WORKED_EXAMPLE, check_crc=True)
    assert msg.store_size == 123
    assert msg.magic == MAGIC_V1
    assert msg.body_crc == 0x77D18982 == zlib.crc32(b"Hello") & 0x7FFFFFFF
    assert msg.queue_id == 3
    assert msg.flag == 0
    assert msg.queue_offset == 42
    assert msg.commit_log_offset == 0x40001000
    assert msg.sys_flag == 0
    assert msg.born_timestamp == BORN_TS
    assert msg.born_host == ("192.168.0.10", 54321)
    assert msg.store_timestamp == STORE_TS
    assert msg.store_host == ("192.168.0.1", 10911)
    assert msg.reconsume_times == 0
    assert msg.prepared_transaction_offset == 0
    assert msg.body == b"Hello"
    assert msg.topic == "TopicTest"
    assert msg.properties == {"KEYS": "k1", "TAGS": "TagA"}
    assert msg.tags == "TagA"
    assert msg.keys == "k1"
    assert msg.msg_id == "C0A8000100002A9F0000000040001000"


def test_check_record_on_worked_example() -> None:
    req, size = check_record(WORKED_EXAMPLE, 0, True)
    assert size == 123
    assert req is not None
    assert (req.topic, req.queue_id, req.queue_offset) == ("TopicTest", 3, 42)
    assert req.commit_log_offset == 0x40001000
    assert req.size == 123
    assert req.tags_code == 2598919
    assert req.store_timestamp == STORE_TS
    assert req.sys_flag == 0


# -- reader outcomes (spec §1.10) ---------------------------------------------------------------
def test_blank_is_success_size_zero() -> None:
    buf = blank_record(4000) + bytes(3992)
    assert check_record(buf, 0, True) == (None, 0)
    assert struct.unpack(">ii", blank_record(4000)) == (4000, BLANK_MAGIC)


def test_unknown_or_zero_magic_fails() -> None:
    assert check_record(bytes(200), 0, True) == (None, -1)
    bad = bytearray(WORKED_EXAMPLE)
    bad[4:8] = b"\x12\x34\x56\x78"
    assert check_record(bytes(bad), 0, True) == (None, -1)


def test_partial_record_fails() -> None:
    for cut in (4, 8, 50, 88, 100, 122):
        assert check_record(WORKED_EXAMPLE[:cut], 0, False) == (None, -1), cut


def test_crc_mismatch_fails_only_when_checked() -> None:
    bad = bytearray(WORKED_EXAMPLE)
    bad[88] ^= 0xFF  # first body byte
    assert check_record(bytes(bad), 0, True) == (None, -1)
    req, size = check_record(bytes(bad), 0, False)
    assert req is not None and size == 123


def test_size_mismatch_returns_totalsize() -> None:
    bad = bytearray(WORKED_EXAMPLE + bytes(10))
    bad[0:4] = struct.pack(">i", 128)  # declares 5 bytes more than the fields add up to
    assert check_record(bytes(bad), 0, False) == (None, 128)


def test_check_record_at_offset_in_larger_buffer() -> None:
    buf = bytes(17) + WORKED_EXAMPLE + WORKED_EXAMPLE
    assert check_record(buf, 17, True)[1] == 123
    assert check_record(buf, 140, True)[1] == 123


def test_transaction_and_flag_fields_survive() -> None:
    rec = encode_record(
        topic="T",
        queue_id=1,
        body=b"x",
        flag=-7,
        sys_flag=0x8,
        prepared_transaction_offset=99,
        reconsume_times=3,
    )
    msg = decode_record(rec)
    assert (msg.flag, msg.sys_flag, msg.prepared_transaction_offset, msg.reconsume_times) == (
        -7,
        0x8,
        99,
        3,
    )


# -- IPv6 and V2 ---------------------------------------------------------------------------------
def test_ipv6_hosts_set_sysflag_bits_and_roundtrip() -> None:
    rec = encode_record(
        topic="T6",
        queue_id=0,
        body=b"abc",
        born_host=("2001:db8::1", 40000),
        store_host=("::1", 10911),
        store_timestamp=5,
    )
    msg = decode_record(rec, check_crc=True)
    assert msg.sys_flag & 0x30 == 0x30
    assert len(rec) == 91 + 12 + 12 + 3 + 2
    assert msg.born_host == ("2001:db8::1", 40000)
    assert msg.store_host == ("::1", 10911)
    req, size = check_record(rec, 0, True)
    assert req is not None and size == len(rec) and req.store_timestamp == 5
    assert len(msg.msg_id) == 56


def test_ipv4_mapped_ipv6_is_written_as_ipv4() -> None:
    rec = encode_record(topic="T", queue_id=0, body=b"", born_host=("::ffff:10.1.2.3", 1))
    msg = decode_record(rec)
    assert msg.sys_flag & 0x10 == 0
    assert msg.born_host == ("10.1.2.3", 1)


def test_v2_record_reads_with_two_byte_topic_length() -> None:
    topic = "%RETRY%" + "g" * 150
    rec = encode_record(topic=topic, queue_id=0, body=b"b", magic=MAGIC_V2)
    assert struct.unpack_from(">i", rec, 4)[0] == MAGIC_V2
    assert decode_record(rec).topic == topic
    req, size = check_record(rec, 0, True)
    assert req is not None and req.topic == topic and size == len(rec)


def test_v1_refuses_long_topic() -> None:
    with pytest.raises(ValueError, match="127"):
        encode_record(topic="t" * 128, queue_id=0, body=b"")


# -- properties (spec §1.6) ----------------------------------------------------------------------
def test_encode_properties_trailing_separator() -> None:
    assert encode_properties({"KEYS": "k1", "TAGS": "TagA"}) == b"KEYS\x01k1\x02TAGS\x01TagA\x02"
    assert encode_properties({}) == b""


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", {}),
        (b"A\x01b", {"A": "b"}),  # no trailing separator (4.9.1 - 5.1.4 writers)
        (b"A\x01b\x02", {"A": "b"}),
        (b"A\x01\x02B\x01c", {"B": "c"}),  # empty value: skipped
        (b"\x01x\x02", {}),  # empty key
        (b"ab\x02", {}),  # shorter than 3
        (b"abc\x02", {}),  # no separator at all
        (b"K\x01v\x01w\x02", {"K": "v\x01w"}),  # value keeps later 0x01
        (b"K\x011\x02K\x012\x02", {"K": "2"}),  # last wins
        (b"\x02\x02K\x01v\x02\x02", {"K": "v"}),  # empty segments
        ("键\x01值\x02".encode(), {"键": "值"}),
    ],
)
def test_decode_properties_rule(raw: bytes, expected: dict[str, str]) -> None:
    assert decode_properties(raw) == expected


def test_tags_found_without_dict_agrees_with_rule() -> None:
    cases = [
        b"XTAGS\x01nope\x02",  # key is XTAGS
        b"TAGS\x01a\x02TAGS\x01b\x02",  # last wins
        b"TAGS\x01a\x02TAGS\x01\x02",  # empty last value is skipped: a stays
        b"KEYS\x01TAGS\x01x\x02",  # inside a value
        b"TAGS\x01TagA",
    ]
    for props in cases:
        rec = encode_record(topic="T", queue_id=0, body=b"", properties=props)
        req, _ = check_record(rec, 0, False)
        assert req is not None
        assert req.tags_code == tags_code(decode_properties(props).get("TAGS")), props


# -- tagsCode = Java String.hashCode --------------------------------------------------------------
@pytest.mark.parametrize(
    ("tag", "java_hash"),
    [
        (None, 0),
        ("", 0),
        ("TagA", 2598919),
        ("hello", 99162322),
        ("polygenelubricants", -2147483648),  # sign-extended int32
        ("é", 233),
        ("中文", 20013 * 31 + 25991),
        ("😀", 0xD83D * 31 + 0xDE00),  # two UTF-16 code units
    ],
)
def test_tags_code_is_java_hash(tag: str | None, java_hash: int) -> None:
    assert tags_code(tag) == java_hash


def test_schedule_topic_tags_code_is_delivery_time() -> None:
    rec = encode_record(
        topic="SCHEDULE_TOPIC_XXXX",
        queue_id=2,
        body=b"",
        properties={"DELAY": "3", "TAGS": "x"},
        store_timestamp=1000,
    )
    req, _ = check_record(rec, 0, False)
    assert req is not None and req.tags_code == 1000 + 10_000


# -- message ids ---------------------------------------------------------------------------------
def test_offset_msg_id_roundtrip() -> None:
    msg_id = offset_msg_id(("10.0.0.7", 10911), 123456789)
    assert msg_id == "0A00000700002A9F00000000075BCD15"
    assert decode_offset_msg_id(msg_id) == (("10.0.0.7", 10911), 123456789)


def test_batch_msg_ids_equal_the_one_by_one_ids_for_random_hosts_and_offsets() -> None:
    rng = random.Random(17)
    hosts = [("10.0.0.7", 10911), ("::ffff:10.1.2.3", 0), ("localhost", 2**31 - 1)]
    hosts += [
        (str(ipaddress.IPv4Address(rng.getrandbits(32))), rng.randrange(2**16)) for _ in range(30)
    ]
    hosts += [
        (str(ipaddress.IPv6Address(rng.getrandbits(128))), rng.randrange(2**31)) for _ in range(30)
    ]
    hosts += [(f"[{host}]", port) for host, port in hosts[-5:]]  # bracketed IPv6 literals
    for host in hosts:
        offsets = [0, 1, 2**63 - 1] + [rng.randrange(2 ** rng.randrange(1, 64)) for _ in range(50)]
        # the one-by-one id as it was built before the batch path existed
        before = [(host_block(host) + struct.pack(">q", o)).hex().upper() for o in offsets]
        assert joined_offset_msg_ids(host, offsets) == ",".join(before)
        assert joined_offset_msg_ids(host, offsets[:1]) == before[0]
        assert [offset_msg_id(host, o) for o in offsets] == before
        assert {len(i) for i in before} == {32 if len(host_block(host)) == 8 else 56}
    assert joined_offset_msg_ids(("10.0.0.7", 1), ()) == ""


# -- decode_records --------------------------------------------------------------------------------
def test_decode_records_concatenated() -> None:
    recs = [
        encode_record(topic="T", queue_id=1, body=bytes([i]) * i, queue_offset=i) for i in range(5)
    ]
    msgs = decode_records(b"".join(recs))
    assert [m.queue_offset for m in msgs] == list(range(5))
    assert [m.body for m in msgs] == [bytes([i]) * i for i in range(5)]
    assert decode_records(b"") == []


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 3, b"junk" * 40, WORKED_EXAMPLE[:-1], WORKED_EXAMPLE + b"\x00\x00"]
)
def test_decode_records_rejects_garbage(garbage: bytes) -> None:
    with pytest.raises(ValueError, match="record at"):
        decode_records(garbage)
