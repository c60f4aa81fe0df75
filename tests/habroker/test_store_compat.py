"""Byte compatibility both ways, with record code written in this file from the spec tables
(§1.1, §1.3, §1.4, §1.8) and nothing from habroker's encoder.

1. A commit log assembled here (V1 and V2 records, IPv6 hosts, transaction halves, 4.9-style
   properties, a BLANK-terminated full file) is read back by MessageStore after start().
2. Records MessageStore writes are decoded here field by field.
"""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from habroker.store import GetMessageStatus

from .storeutil import FILE_SIZE, cq_units, entries, started

V1 = 0xDAA320A7
V2 = 0xDAA320AB
BLANK = 0xCBD43194
TAGA_JAVA_HASH = 2598919  # "TagA".hashCode() in Java


@dataclass
class SpecRecord:
    topic: bytes
    queue_id: int
    body: bytes
    props: bytes
    queue_offset: int
    sys_flag: int = 0
    magic: int = V1
    flag: int = 0
    born_ip: bytes = socket.inet_aton("192.168.0.10")
    born_port: int = 54321
    store_ip: bytes = socket.inet_aton("192.168.0.1")
    store_port: int = 10911
    born_ts: int = 1_700_000_000_000
    store_ts: int = 1_700_000_000_005
    reconsume: int = 0
    prepared: int = 0
    phys: int = field(default=0)

    def encode(self) -> bytes:
        tl = (
            struct.pack(">b", len(self.topic))
            if self.magic == V1
            else struct.pack(">h", len(self.topic))
        )
        fields = [
            struct.pack(">I", self.magic),
            struct.pack(">i", zlib.crc32(self.body) & 0x7FFFFFFF),
            struct.pack(">i", self.queue_id),
            struct.pack(">i", self.flag),
            struct.pack(">q", self.queue_offset),
            struct.pack(">q", self.phys),
            struct.pack(">i", self.sys_flag),
            struct.pack(">q", self.born_ts),
            self.born_ip + struct.pack(">i", self.born_port),
            struct.pack(">q", self.store_ts),
            self.store_ip + struct.pack(">i", self.store_port),
            struct.pack(">i", self.reconsume),
            struct.pack(">q", self.prepared),
            struct.pack(">i", len(self.body)),
            self.body,
            tl,
            self.topic,
            struct.pack(">h", len(self.props)),
            self.props,
        ]
        rest = b"".join(fields)
        return struct.pack(">i", 4 + len(rest)) + rest


def spec_decode(data: bytes, pos: int) -> dict[str, object]:
    """Field by field per spec §1.1 (general offsets with BH/SH from SYSFLAG bits 4/5)."""
    out: dict[str, object] = {}
    (
        out["total"],
        out["magic"],
        out["crc"],
        out["queue_id"],
        out["flag"],
        out["queue_offset"],
        out["phys"],
        out["sys_flag"],
        out["born_ts"],
    ) = struct.unpack_from(">iIiiiqqiq", data, pos)
    sys_flag = int(out["sys_flag"])  # type: ignore[call-overload]
    bh = 20 if sys_flag & 0x10 else 8
    sh = 20 if sys_flag & 0x20 else 8
    p = pos + 48
    out["born_host"] = (data[p : p + bh - 4], struct.unpack_from(">i", data, p + bh - 4)[0])
    p += bh
    out["store_ts"] = struct.unpack_from(">q", data, p)[0]
    p += 8
    out["store_host"] = (data[p : p + sh - 4], struct.unpack_from(">i", data, p + sh - 4)[0])
    p += sh
    out["reconsume"], out["prepared"], body_len = struct.unpack_from(">iqi", data, p)
    p += 16
    out["body"] = data[p : p + body_len]
    p += body_len
    if out["magic"] == V2:
        topic_len = struct.unpack_from(">h", data, p)[0]
        p += 2
    else:
        topic_len = struct.unpack_from(">b", data, p)[0]
        p += 1
    out["topic"] = data[p : p + topic_len]
    p += topic_len
    props_len = struct.unpack_from(">h", data, p)[0]
    p += 2
    out["props"] = data[p : p + props_len]
    p += props_len
    out["end"] = p
    return out


def build_log(root: Path) -> list[SpecRecord]:
    """Two files: the first full and BLANK-terminated, the second partly written."""
    ipv6_a = socket.inet_pton(socket.AF_INET6, "2001:db8::5")
    ipv6_b = socket.inet_pton(socket.AF_INET6, "fe80::1")
    long_topic = b"%RETRY%" + b"g" * 140  # needs V2's two-byte topic length
    q_next: dict[tuple[bytes, int], int] = {}

    def rec(topic: bytes, qid: int, body: bytes, props: bytes, **kw: object) -> SpecRecord:
        tran = int(kw.get("sys_flag", 0)) & 0xC  # type: ignore[call-overload]
        if tran in (0x4, 0xC):  # prepared / rollback halves: queue offset 0, not counted
            offset = 0
        else:
            offset = q_next.get((topic, qid), 0)
            q_next[(topic, qid)] = offset + 1
        return SpecRecord(topic, qid, body, props, offset, **kw)  # type: ignore[arg-type]

    kinds = [
        lambda i: rec(b"TopicTest", 0, b"v1-%d" % i * 20, b"KEYS\x01k%d\x02TAGS\x01TagA\x02" % i),
        lambda i: rec(
            b"TopicTest",
            1,
            b"v6-%d" % i * 30,
            b"TAGS\x01TagA",
            sys_flag=0x30,
            born_ip=ipv6_a,
            store_ip=ipv6_b,
        ),  # 4.9.1-style: no trailing 0x02
        lambda i: rec(long_topic, 0, b"retry-%d" % i, b"TAGS\x01TagA\x02", magic=V2),
        lambda i: rec(b"TopicTest", 0, b"half-%d" % i, b"TRAN_MSG\x01true\x02", sys_flag=0x4),
        lambda i: rec(b"TopicTest", 0, b"commit-%d" % i, b"", sys_flag=0x8, prepared=7),
        lambda i: rec(b"TopicTest", 2, b"", b"", sys_flag=0x10, born_ip=ipv6_a),
    ]
    records: list[SpecRecord] = []
    files = [bytearray(FILE_SIZE), bytearray(FILE_SIZE)]
    pos, file_index, i = 0, 0, 0
    while True:
        r = kinds[i % len(kinds)](i)
        size = len(r.encode())
        if pos + size + 8 > FILE_SIZE:
            if file_index == 1:
                break
            files[0][pos : pos + 8] = struct.pack(">iI", FILE_SIZE - pos, BLANK)
            pos, file_index = 0, 1
        r.phys = file_index * FILE_SIZE + pos
        raw = r.encode()
        files[file_index][pos : pos + len(raw)] = raw
        pos += len(raw)
        records.append(r)
        i += 1
        if file_index == 1 and pos > FILE_SIZE // 2:
            break
    (root / "commitlog").mkdir(parents=True)
    for index, data in enumerate(files):
        (root / "commitlog" / f"{index * FILE_SIZE:020d}").write_bytes(bytes(data))
    return records


async def test_independently_built_log_is_read_back(tmp_path):
    records = build_log(tmp_path)
    assert any(r.phys >= FILE_SIZE for r in records)
    end = max(r.phys + len(r.encode()) for r in records)
    store = await started(tmp_path)
    try:
        assert store.max_phy_offset == end == store.dispatched_offset
        queues: dict[tuple[str, int], list[SpecRecord]] = {}
        for r in records:
            if r.sys_flag & 0xC in (0x4, 0xC):
                continue
            queues.setdefault((r.topic.decode(), r.queue_id), []).append(r)
        assert sorted(store.topics()) == sorted({t for t, _ in queues})
        for (topic, qid), expected in queues.items():
            res = store.get_messages(topic, qid, 0, 10_000, 1 << 30)
            assert res.status is GetMessageStatus.FOUND
            assert [bytes(x) for x in res.record_views()] == [r.encode() for r in expected]
            assert store.max_offset_in_queue(topic, qid) == len(expected)
            units = cq_units(tmp_path, topic, qid)
            assert [(u[0], u[1]) for u in units] == [(r.phys, len(r.encode())) for r in expected]
            for unit, r in zip(units, expected, strict=True):
                assert unit[2] == (TAGA_JAVA_HASH if b"TAGS\x01TagA" in r.props else 0)
        # the store appends after the foreign records and continues their queue offsets
        res = store.put_messages("TopicTest", 0, entries(1), born_host=("10.0.0.1", 1))
        assert res.wrote_offset == end
        assert res.queue_offset == len(queues[("TopicTest", 0)])
    finally:
        await store.shutdown()


async def test_independently_built_log_recovers_after_crash(tmp_path):
    records = build_log(tmp_path)
    (tmp_path / "abort").touch()  # as if the writer was killed
    last = records[-1]
    path = tmp_path / "commitlog" / f"{FILE_SIZE:020d}"
    data = bytearray(path.read_bytes())
    torn = last.phys - FILE_SIZE
    data[torn + 20 : torn + len(last.encode())] = bytes(len(last.encode()) - 20)
    path.write_bytes(bytes(data))
    store = await started(tmp_path)
    try:
        assert store.max_phy_offset == last.phys
    finally:
        await store.shutdown()


async def test_what_habroker_writes_decodes_per_spec(tmp_path):
    store = await started(tmp_path, brokerIP1="10.1.2.3", listenPort=10999)
    try:
        batch = entries(40, 700)
        first = store.put_messages(
            "SpecTopic", 5, batch, born_host=("172.16.0.4", 61000), born_timestamp=1_650_000_000_123
        )
        second = store.put_messages("SpecTopic", 5, entries(2, 10), born_host=("::1", 7))
        await store.flush()
    finally:
        await store.shutdown()
    log = b"".join(p.read_bytes() for p in sorted((tmp_path / "commitlog").iterdir()))
    phys = first.wrote_offset
    for i, entry in enumerate(batch):
        if phys % FILE_SIZE + 8 > FILE_SIZE or struct.unpack_from(">I", log, phys + 4)[0] == BLANK:
            phys = (phys // FILE_SIZE + 1) * FILE_SIZE
        f = spec_decode(log, phys)
        assert f["magic"] == V1
        assert f["total"] == 91 + len(entry.body) + len(b"SpecTopic") + len(entry.properties)
        assert f["end"] == phys + f["total"]  # type: ignore[operator]
        assert f["crc"] == zlib.crc32(entry.body) & 0x7FFFFFFF
        assert (f["queue_id"], f["flag"], f["queue_offset"], f["phys"]) == (5, 0, i, phys)
        assert f["sys_flag"] == 0
        assert f["born_ts"] == 1_650_000_000_123
        assert f["born_host"] == (socket.inet_aton("172.16.0.4"), 61000)
        assert f["store_host"] == (socket.inet_aton("10.1.2.3"), 10999)
        assert f["store_ts"] == first.store_timestamp
        assert (f["reconsume"], f["prepared"]) == (0, 0)
        assert f["body"] == entry.body and f["topic"] == b"SpecTopic"
        assert f["props"] == entry.properties
        phys += f["total"]  # type: ignore[operator]
    f = spec_decode(log, second.wrote_offset)
    assert f["sys_flag"] == 0x10  # IPv6 born host only
    assert f["born_host"] == (socket.inet_pton(socket.AF_INET6, "::1"), 7)
    assert f["queue_offset"] == 40
    assert f["total"] == 91 + 12 + 10 + len(b"SpecTopic") + len(entries(2, 10)[0].properties)
