"""Bodies a RocketMQ producer compressed: decoded to what the producer sent, flag kept."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from habroker.compression import (
    COMPRESSED_FLAG,
    CompressionError,
    CompressionType,
    compress,
    compression_of,
    decompress,
)
from habroker.message import decode_record, decode_records, encode_record
from hypothesis import given
from hypothesis import strategies as st

DATA = Path(__file__).resolve().parent / "data" / "compression" / "java-compressed-bodies.txt"


def java_bodies() -> tuple[bytes, dict[str, tuple[int, bytes]]]:
    """What RocketMQ's own compressors made of one body (4.9.7 and 5.3.1)."""
    rows = [line.split(" ") for line in DATA.read_text().splitlines() if not line.startswith("#")]
    original = next(base64.b64decode(row[1]) for row in rows if row[0] == "body")
    table = {row[0]: (int(row[1]), base64.b64decode(row[2])) for row in rows if row[0] != "body"}
    return original, table


ORIGINAL, JAVA = java_bodies()


def test_the_sysflag_bits_are_rocketmqs():
    assert JAVA["ZLIB_4.9.7"][0] == COMPRESSED_FLAG  # a 4.x client sets only bit 0
    assert {name: flag for name, (flag, _) in JAVA.items() if name != "ZLIB_4.9.7"} == {
        kind.name: kind.sys_flag for kind in CompressionType
    }
    assert compression_of(0) is None and compression_of(0x10) is None
    assert compression_of(0x1) is CompressionType.ZLIB
    assert compression_of(0x201 | 0x30) is CompressionType.ZSTD


@pytest.mark.parametrize("name", ["ZLIB_4.9.7", "ZLIB", "LZ4", "ZSTD"])
def test_java_compressed_bodies_decode_to_the_original(name):
    flag, stored = JAVA[name]
    assert len(stored) < len(ORIGINAL)
    assert decompress(stored, flag) == ORIGINAL
    record = encode_record(
        topic="T", queue_id=1, body=stored, sys_flag=flag, properties={"TAGS": "a", "KEYS": "k"}
    )
    msg = decode_record(record, check_crc=True)  # the CRC is over the stored bytes
    assert msg.body == ORIGINAL
    assert msg.sys_flag & 0x7FF == flag and msg.compression is compression_of(flag)
    assert msg.tags == "a" and msg.store_size == len(record)
    raw = decode_record(record, decompress_body=False)
    assert raw.body == stored
    # mixed with an uncompressed record in one pull response
    plain = encode_record(topic="T", queue_id=1, body=b"plain")
    assert [m.body for m in decode_records(plain + record + plain)] == [
        b"plain",
        ORIGINAL,
        b"plain",
    ]


@pytest.mark.parametrize("kind", list(CompressionType))
@given(body=st.binary(max_size=3000))
def test_compress_round_trip(kind, body):
    assert decompress(compress(body, kind), kind.sys_flag) == body


@pytest.mark.parametrize("kind", list(CompressionType))
def test_bad_compressed_bytes_name_the_record_and_the_algorithm(kind):
    stored = compress(ORIGINAL, kind)
    for bad in (b"not compressed at all", stored[: len(stored) // 2]):
        with pytest.raises(CompressionError, match=kind.name):
            decompress(bad, kind.sys_flag)
        record = encode_record(topic="T", queue_id=0, body=bad, sys_flag=kind.sys_flag)
        with pytest.raises(ValueError, match=rf"record at 0: {kind.name}-compressed body"):
            decode_record(record)


def test_unknown_compression_type_is_refused():
    record = encode_record(topic="T", queue_id=0, body=b"x", sys_flag=(5 << 8) | COMPRESSED_FLAG)
    with pytest.raises(ValueError, match="unknown compression type 5"):
        decode_record(record)
    assert decode_record(record, decompress_body=False).body == b"x"
