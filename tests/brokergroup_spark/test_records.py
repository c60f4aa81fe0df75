import random
import struct

import pyarrow as pa
import pytest
from brokergroup_spark.records import RecordError, decode, decode_slow, record_starts
from brokergroup_spark.schema import ARROW_SCHEMA

from tests.brokergroup_spark.records_util import props_bytes, record, records


def as_rows(batch: pa.RecordBatch) -> list[dict]:
    rows = batch.to_pylist()
    for row in rows:
        row["properties"] = sorted(row["properties"])
    return rows


def test_fields_land_in_their_columns():
    raw = record(
        b"hello",
        topic="orders",
        queue_id=3,
        queue_offset=41,
        phys=123456,
        properties=props_bytes({"TAGS": "red", "KEYS": "a b", "X": "1"}),
        born=1000,
        stored=2500,
    )
    batch = decode(raw, topic="orders", broker_id=1)
    assert batch.schema.equals(ARROW_SCHEMA)
    (row,) = batch.to_pylist()
    assert row["body"] == b"hello"
    assert (row["topic"], row["queueId"], row["queueOffset"]) == ("orders", 3, 41)
    assert row["commitLogOffset"] == 123456
    assert row["bornTimestamp"].timestamp() == 1.0
    assert row["storeTimestamp"].timestamp() == 2.5
    assert (row["tags"], row["key"], row["brokerId"]) == ("red", "a b", 1)
    assert dict(row["properties"]) == {"TAGS": "red", "KEYS": "a b", "X": "1"}


def test_fast_path_matches_reference_decoder():
    raw = records(500, topic="t", queue_id=2, first=1000)
    assert as_rows(decode(raw, topic="t", broker_id=0)) == as_rows(
        decode_slow(raw, topic="t", broker_id=0)
    )


def test_property_edge_cases_follow_rocketmq_rules():
    cases = [
        b"",  # no properties: an empty map
        b"TAGS\x01a",  # no trailing separator (4.9.1-5.1.4 producers)
        b"TAGS\x01a\x02",
        b"\x01x\x02K\x01v\x02",  # empty name skipped
        b"K\x01\x02L\x01w",  # empty value skipped
        b"K\x01v\x01w\x02",  # the value keeps later \x01
        b"K\x011\x02K\x012\x02TAGS\x01t\x02TAGS\x01u",  # duplicates: the last wins
        b"\x02\x02ab\x02KEYS\x01k1 k2\x02",  # stray separators and a pair-less segment
        b"\x02",
    ]
    raw = b"".join(record(b"x", queue_offset=i, properties=props) for i, props in enumerate(cases))
    fast = decode(raw, topic="t", broker_id=0)
    assert as_rows(fast) == as_rows(decode_slow(raw, topic="t", broker_id=0))
    props = [dict(p) for p in fast.column("properties").to_pylist()]
    assert props[0] == {} and props[1] == {"TAGS": "a"} and props[3] == {"K": "v"}
    assert props[4] == {"L": "w"} and props[5] == {"K": "v\x01w"}
    assert props[6] == {"K": "2", "TAGS": "u"}
    assert fast.column("tags").to_pylist()[6] == "u"
    assert fast.column("key").to_pylist()[7] == "k1 k2"
    assert fast.column("tags").to_pylist()[0] is None


def test_random_records_agree_with_reference():
    rng = random.Random(7)
    parts = []
    for i in range(300):
        props = {
            rng.choice(["TAGS", "KEYS", "A", "BB", "ÜNI"]): rng.choice(["v", "long value", "é"])
            for _ in range(rng.randint(0, 4))
        }
        parts.append(
            record(
                rng.randbytes(rng.randint(0, 300)),
                queue_offset=i,
                properties=props_bytes(props, trailing=rng.random() < 0.5),
            )
        )
    raw = b"".join(parts)
    assert as_rows(decode(raw, topic="t", broker_id=0)) == as_rows(
        decode_slow(raw, topic="t", broker_id=0)
    )


def test_ipv6_and_v2_records_take_the_general_path():
    raw = record(b"a", v6_born=True, v6_store=True) + record(b"b", queue_offset=1, v2=True)
    rows = decode(raw, topic="t", broker_id=0).to_pylist()
    assert [r["body"] for r in rows] == [b"a", b"b"]
    assert [r["queueOffset"] for r in rows] == [0, 1]


def test_limit_and_empty():
    raw = records(10)
    assert decode(raw, topic="t", broker_id=0, limit=4).num_rows == 4
    empty = decode(b"", topic="t", broker_id=0)
    assert empty.num_rows == 0 and empty.schema.equals(ARROW_SCHEMA)


def test_corrupt_input_is_rejected():
    raw = records(3)
    with pytest.raises(RecordError, match="TOTALSIZE"):
        record_starts(raw[:-5])
    bad = bytearray(raw)
    struct.pack_into(">i", bad, 4, 12345)  # magic
    with pytest.raises(RecordError, match="MAGICCODE"):
        decode(bytes(bad), topic="t", broker_id=0)
    bad = bytearray(raw)
    struct.pack_into(">i", bad, 84, 50)  # body length no longer matches TOTALSIZE
    with pytest.raises(RecordError):
        decode(bytes(bad), topic="t", broker_id=0)


def _compressed_mix(v6: bool = False) -> tuple[bytes, list[bytes]]:
    """Plain rows around rows stored as RocketMQ's own compressors wrote them."""
    from tests.habroker.test_compression import JAVA, ORIGINAL

    raws, want = [], []
    for i, name in enumerate(["", "ZLIB_4.9.7", "", "ZLIB", "LZ4", "", "ZSTD", ""]):
        flag, stored = JAVA[name] if name else (0, b"plain-%d" % i)
        raws.append(
            record(
                stored,
                queue_offset=i,
                sysflag=flag,
                v6_born=v6,
                properties=props_bytes({"KEYS": f"k{i}"}),
            )
        )
        want.append(ORIGINAL if name else stored)
    return b"".join(raws), want


@pytest.mark.parametrize("v6", [False, True], ids=["fast-path", "general-path"])
def test_compressed_bodies_are_decompressed(v6):
    raw, want = _compressed_mix(v6)
    batch = decode(raw, topic="t", broker_id=0)
    assert batch.column("body").to_pylist() == want
    assert batch.column("key").to_pylist() == [f"k{i}" for i in range(len(want))]
    assert as_rows(batch) == as_rows(decode_slow(raw, topic="t", broker_id=0))


def test_a_compressed_body_that_does_not_decompress_names_its_record():
    good = record(b"ok")
    bad = record(b"not zlib at all", sysflag=0x301)
    for decoder in (decode, decode_slow):
        with pytest.raises(RecordError, match=f"record at byte {len(good)}: ZLIB-compressed"):
            decoder(good + bad, topic="t", broker_id=0)
