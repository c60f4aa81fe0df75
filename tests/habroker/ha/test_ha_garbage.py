"""Garbage on either side drops only that connection, with one log line saying why."""

from __future__ import annotations

import asyncio
import logging
import random
import struct

import pytest

from tests.habroker.ha.ha_support import (
    FILE_SIZE,
    REPORT,
    JavaMasterStandIn,
    JavaSlaveStandIn,
    frame,
    produce,
    read_report,
    wait_until,
)


def _closed_lines(caplog, address: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if "closed" in r.getMessage() and address in r.getMessage()
    ]


async def _garbage_cases(master, peer: JavaSlaveStandIn, case: str) -> None:
    top = master.store.max_phy_offset
    rng = random.Random(7)
    if case == "random bytes":
        await peer.send_raw(rng.randbytes(4096))
    elif case == "truncated report":
        await peer.send_raw(b"\x00\x00\x00")
        await peer.close()
    elif case == "frame header claiming a huge body":
        await peer.send_raw(frame(0, b"", size=0x7FFFFFF0) + b"abcd")
    elif case == "report not 8-byte aligned":
        # an int32 before the int64 (as an AutoSwitch slave's 12-byte report has) shifts the
        # stream; the misread value claims far more than was sent
        await peer.report(0)
        await peer.read_frame()
        await peer.send_raw(struct.pack(">i", 2) + REPORT.pack(1000))
    elif case == "report beyond master max":
        await peer.report(top + FILE_SIZE)
    elif case == "ack beyond what was sent":
        await peer.report(top)  # caught up: nothing sent on this connection yet
        await peer.report(top + 1)
    elif case == "report going backwards":
        await peer.report(0)
        await peer.read_frame()
        await peer.report(100)
        await peer.report(50)
    elif case == "negative report":
        await peer.report(-5)
    else:  # pragma: no cover
        raise AssertionError(case)


MASTER_CASES = [
    ("random bytes", ""),
    ("truncated report", "mid-report"),
    ("frame header claiming a huge body", "never sent"),
    ("report not 8-byte aligned", "never sent"),
    ("report beyond master max", "beyond the master's max"),
    ("ack beyond what was sent", "never sent"),
    ("report going backwards", "goes back"),
    ("negative report", "negative"),
]


@pytest.mark.parametrize(("case", "reason"), MASTER_CASES, ids=[c for c, _ in MASTER_CASES])
async def test_master_drops_only_the_garbage_connection(nodes, caplog, case, reason) -> None:
    caplog.set_level(logging.INFO, logger="habroker.ha")
    master = await nodes("master")
    produce(master.store, 2 * FILE_SIZE)
    slave = await nodes("slave", master)
    await wait_until(lambda: master.ha.connection_count == 1, what="good slave connected")
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await _garbage_cases(master, peer, case)
    assert await peer.closed_by_peer(within=10), "the master should drop the garbage peer"
    await wait_until(lambda: len(_closed_lines(caplog, peer.address)) >= 1, what="log line")
    lines = _closed_lines(caplog, peer.address)
    assert len(lines) == 1, lines
    assert reason in lines[0], lines[0]
    # the good slave is still served: new data reaches it
    top = produce(master.store, FILE_SIZE)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="good slave follows")
    assert master.ha.connection_count == 1
    await peer.close()


async def _connected_slave(nodes, fake: JavaMasterStandIn):
    slave = await nodes("slave", None)
    slave.cl.backoff_min = slave.cl.backoff_max = 0.05
    slave.cl.set_master_address(fake.address)
    reader, writer = await fake.accept()
    assert await read_report(reader) == 0
    return slave, reader, writer


SLAVE_CASES = [
    (
        "body size above 4 MiB - 12",
        lambda: frame(0, b"", size=4 * 1024 * 1024 - 11),
        "claims body size",
    ),
    ("negative body size", lambda: frame(0, b"", size=-1), "claims body size"),
    ("frame crossing a file end", lambda: frame(FILE_SIZE - 10, b"", size=20), "not at a commit"),
    (
        "frame skipping ahead",
        lambda: frame(0, b"a" * 100) + frame(500, b"b" * 10),
        "offset mismatch: master pushed offset 500, slave max offset is 100",
    ),
    ("random bytes", lambda: random.Random(3).randbytes(64), ""),
]


@pytest.mark.parametrize(
    ("case", "payload", "reason"), SLAVE_CASES, ids=[c for c, _, _ in SLAVE_CASES]
)
async def test_slave_survives_a_garbage_master(nodes, caplog, case, payload, reason) -> None:
    caplog.set_level(logging.INFO, logger="habroker.ha")
    fake = JavaMasterStandIn()
    await fake.start()
    try:
        slave, _reader, writer = await _connected_slave(nodes, fake)
        writer.write(payload())
        await writer.drain()
        # the slave hangs up and comes back, reporting what it really has
        reader2, writer2 = await fake.accept()
        assert await read_report(reader2) == slave.store.max_phy_offset
        assert reason in (slave.cl.status()["lastError"] or "")
        assert slave.cl.status()["reconnects"] >= 1
        # and it still replicates from a sane master on the same connection
        start = slave.store.max_phy_offset
        writer2.write(frame(start, b"\x00" * 64))
        await writer2.drain()
        await wait_until(lambda: slave.store.max_phy_offset == start + 64, what="append")
        assert await read_report(reader2) == start + 64
        for w in (writer, writer2):
            w.close()
    finally:
        await fake.stop()


async def test_slave_checks_continuity_inside_a_file_crossing_frame(nodes) -> None:
    fake = JavaMasterStandIn()
    await fake.start()
    try:
        slave, _reader, writer = await _connected_slave(nodes, fake)
        writer.write(frame(FILE_SIZE - 100, b"", size=0))  # heartbeat: no append, no error
        writer.write(frame(0, b"q" * (FILE_SIZE - 4)))
        writer.write(frame(FILE_SIZE - 4, b"", size=8))  # would cross the file end
        await writer.drain()
        reader2, _writer2 = await fake.accept()
        assert await read_report(reader2) == FILE_SIZE - 4
        assert "crosses a commit-log file boundary" in slave.cl.status()["lastError"]
        _writer2.close()
        writer.close()
    finally:
        await fake.stop()


async def test_slave_housekeeping_drops_a_silent_master(nodes) -> None:
    fake = JavaMasterStandIn()
    await fake.start()
    try:
        slave = await nodes("slave", None, haHousekeepingInterval=300)
        slave.cl.backoff_min = slave.cl.backoff_max = 0.05
        slave.cl.set_master_address(fake.address)
        _reader, writer = await fake.accept()
        _reader2, writer2 = await fake.accept()  # reconnected after the silence
        assert "housekeeping" in slave.cl.status()["lastError"]
        writer.close()
        writer2.close()
    finally:
        await fake.stop()


async def test_slave_heartbeat_reports_when_idle(nodes) -> None:
    fake = JavaMasterStandIn()
    await fake.start()
    try:
        slave = await nodes("slave", None, haSendHeartbeatInterval=100)
        slave.cl.set_master_address(fake.address)
        reader, writer = await fake.accept()
        values = [await read_report(reader, within=5) for _ in range(4)]
        assert values == [0, 0, 0, 0]
        writer.close()
    finally:
        await fake.stop()


async def test_connect_failures_back_off_and_are_reported(nodes) -> None:
    slave = await nodes("slave", None)
    slave.cl.backoff_min, slave.cl.backoff_max = 0.05, 0.2
    dead = JavaMasterStandIn()  # never started: connection refused
    slave.cl.set_master_address(dead.address)
    await wait_until(lambda: slave.cl.status()["reconnects"] >= 3, what="retries")
    assert "connect to" in slave.cl.status()["lastError"]
    assert slave.cl.connected is False


async def test_slave_reassembles_frames_cut_at_any_byte(nodes) -> None:
    """Headers and bodies split across reads, frames of every size, three files: exact bytes."""
    fake = JavaMasterStandIn()
    await fake.start()
    try:
        slave, _reader, writer = await _connected_slave(nodes, fake)
        rng = random.Random(11)
        log = rng.randbytes(3 * FILE_SIZE - 500)
        stream, offset = bytearray(), 0
        while offset < len(log):
            room = FILE_SIZE - offset % FILE_SIZE
            size = min(rng.choice([1, 7, 12, 100, 4096, 40_000]), room, len(log) - offset)
            stream += frame(offset, log[offset : offset + size])
            if rng.random() < 0.1:
                stream += frame(offset + size, b"")  # heartbeats in between
            offset += size
        pos = 0
        while pos < len(stream):
            cut = rng.choice([1, 5, 11, 13, 64, 3000, 70_000])
            writer.write(bytes(stream[pos : pos + cut]))
            await writer.drain()
            pos += cut
            if rng.random() < 0.2:
                await asyncio.sleep(0.002)  # let the slave read what is there
        await wait_until(lambda: slave.store.max_phy_offset == len(log), what="all appended")
        assert slave.cl.status()["lastError"] is None
        files = sorted(slave.config.commit_log_dir.iterdir())
        assert [f.name for f in files] == [f"{i * FILE_SIZE:020d}" for i in range(3)]
        assert b"".join(f.read_bytes() for f in files)[: len(log)] == log
        writer.close()
    finally:
        await fake.stop()
