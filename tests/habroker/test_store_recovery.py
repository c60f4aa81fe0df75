"""Crash recovery: copies of a running store (abort file present), torn tails, CRC damage."""

from __future__ import annotations

import asyncio
import shutil
import struct
from pathlib import Path

import pytest
from habroker.message import decode_records
from habroker.store import GetMessageStatus, MessageStore, StoreError

from .storeutil import (
    FILE_SIZE,
    commit_log_files,
    cq_units,
    entries,
    make_config,
    started,
    walk_file,
)

BORN = ("10.0.0.9", 40001)


def fill(store: MessageStore, batches: int, queues: int = 3) -> None:
    for i in range(batches):
        store.put_messages(
            "T", i % queues, entries(1 + i % 5, 200 + (i * 53) % 700, seed=i), born_host=BORN
        )


def snapshot(store: MessageStore, queues: int = 3) -> dict[int, list[bytes]]:
    out = {}
    for q in range(queues):
        res = store.get_messages("T", q, 0, 100_000, 1 << 30)
        out[q] = [bytes(r) for r in res.record_views()]
    return out


def crash_copy(src: Path, dst: Path) -> Path:
    """What a SIGKILL leaves: the page cache as it is now, abort file included."""
    shutil.copytree(src, dst)
    assert (dst / "abort").exists()
    return dst


def last_records(root: Path) -> tuple[Path, list[tuple[int, int]]]:
    path = commit_log_files(root)[-1]
    records, _ = walk_file(path.read_bytes())
    return path, records


async def test_crash_copy_recovers_everything(tmp_path):
    store = await started(tmp_path / "live", flushIntervalConsumeQueue=600_000)
    try:
        fill(store, 150)
        expected = snapshot(store)
        max_phy = store.max_phy_offset
        copy = crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        await store.shutdown()
    again = await started(copy)
    try:
        assert not again.last_exit_ok
        assert again.max_phy_offset == max_phy == again.dispatched_offset
        assert snapshot(again) == expected
        res = again.put_messages("T", 0, entries(1), born_host=BORN)
        assert res.wrote_offset == max_phy and res.queue_offset == len(expected[0])
    finally:
        await again.shutdown()


@pytest.mark.parametrize("damage", ["torn_tail", "zeroed_header", "crc"])
async def test_damaged_last_record_is_cut(tmp_path, damage):
    store = await started(tmp_path / "live")
    try:
        fill(store, 90)
        before = snapshot(store)
        copy = crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        await store.shutdown()
    path, records = last_records(copy)
    pos, size = records[-1]
    data = bytearray(path.read_bytes())
    if damage == "torn_tail":
        data[pos + size // 2 : pos + size] = bytes(size - size // 2)
    elif damage == "zeroed_header":
        data[pos : pos + 8] = bytes(8)
    else:
        data[pos + size - 40] ^= 0x55  # inside the body: only the CRC notices
    path.write_bytes(bytes(data))
    cut_at = int(path.name) + pos
    again = await started(copy)
    try:
        assert again.max_phy_offset == cut_at
        after = snapshot(again)
        lost = [q for q in before if len(after[q]) != len(before[q])]
        assert len(lost) == 1
        q = lost[0]
        assert after[q] == before[q][:-1]
        assert all(after[o] == before[o] for o in before if o != q)
        units = cq_units(copy, "T", q)
        assert len(units) == len(after[q]) and all(u[0] < cut_at for u in units)
        # the torn bytes are gone for good: nothing after the end but zeros
        assert path.read_bytes()[pos:] == bytes(FILE_SIZE - pos)
        res = again.put_messages("T", q, entries(1), born_host=BORN)
        assert res.wrote_offset == cut_at and res.queue_offset == len(after[q])
    finally:
        await again.shutdown()


async def test_crc_damage_in_an_older_file_truncates_there(tmp_path):
    store = await started(tmp_path / "live")
    try:
        fill(store, 200)
        copy = crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        await store.shutdown()
    files = commit_log_files(copy)
    assert len(files) >= 4
    victim = files[-2]  # recovery after a crash with an empty checkpoint scans from file 0
    records, _ = walk_file(victim.read_bytes())
    pos, _size = records[3]
    data = bytearray(victim.read_bytes())
    data[pos + 100] ^= 0xFF
    victim.write_bytes(bytes(data))
    again = await started(copy)
    try:
        cut = int(victim.name) + pos
        assert again.max_phy_offset == cut
        assert not (copy / "commitlog" / files[-1].name).exists()
        for q in range(3):
            msgs = decode_records(
                b"".join(
                    bytes(r) for r in again.get_messages("T", q, 0, 100_000, 1 << 30).record_views()
                )
            )
            assert all(m.commit_log_offset + m.store_size <= cut for m in msgs)
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
    finally:
        await again.shutdown()


async def test_consume_queues_rebuilt_after_crash(tmp_path):
    store = await started(tmp_path / "live", flushIntervalConsumeQueue=600_000)
    try:
        fill(store, 120)
        expected = snapshot(store)
        copy = crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        await store.shutdown()
    # queue 0 lost everything, queue 1 its tail (never flushed before the "crash")
    shutil.rmtree(copy / "consumequeue" / "T" / "0")
    q1 = sorted((copy / "consumequeue" / "T" / "1").iterdir())
    q1[-1].write_bytes(bytes(q1[-1].stat().st_size))
    again = await started(copy)
    try:
        assert snapshot(again) == expected
        assert cq_units(copy, "T", 1) == cq_units(tmp_path / "live", "T", 1)
    finally:
        await again.shutdown()


async def test_clean_restart_redispatches_past_queue_checkpoint(tmp_path):
    store = await started(tmp_path)
    fill(store, 60, queues=1)
    expected = snapshot(store, 1)
    await store.shutdown()
    cq = sorted((tmp_path / "consumequeue" / "T" / "0").iterdir())[-1]
    data = bytearray(cq.read_bytes())
    units = len(cq_units(tmp_path, "T", 0))
    last_in_file = (units * 20 - 1) % len(data) // 20
    assert last_in_file >= 3
    start = (last_in_file - 2) * 20
    data[start:] = bytes(len(data) - start)  # the queue lost its last 3 units
    cq.write_bytes(bytes(data))
    again = await started(tmp_path)
    try:
        assert again.last_exit_ok
        assert snapshot(again, 1) == expected
    finally:
        await again.shutdown()


async def test_empty_last_file_is_removed(tmp_path):
    store = await started(tmp_path)
    fill(store, 20)
    max_phy = store.max_phy_offset
    await store.shutdown()
    nxt = (max_phy // FILE_SIZE + 1) * FILE_SIZE
    (tmp_path / "commitlog" / f"{nxt:020d}").touch()
    again = await started(tmp_path)
    try:
        assert again.max_phy_offset == max_phy
        assert not (tmp_path / "commitlog" / f"{nxt:020d}").exists()
    finally:
        await again.shutdown()


async def test_wrong_size_file_is_a_clear_error(tmp_path):
    store = await started(tmp_path)
    fill(store, 40)
    await store.shutdown()
    first = commit_log_files(tmp_path)[0]
    with first.open("r+b") as f:
        f.truncate(FILE_SIZE - 1)
    broken = MessageStore(make_config(tmp_path))
    with pytest.raises(StoreError, match=first.name):
        await broken.start()
    # the failed start released the lock
    first.write_bytes(first.read_bytes() + b"\x00")
    ok = await started(tmp_path)
    await ok.shutdown()


async def test_blank_in_last_file_seals_it(tmp_path):
    """A crash right after the BLANK, before the next file existed: the BLANK is kept (a
    replica may have it), the next put opens a new file."""
    store = await started(tmp_path)
    while store.max_phy_offset < FILE_SIZE - 3000:
        store.put_messages("T", 0, entries(1, 1000), born_host=BORN)
    res = store.put_messages("T", 0, entries(3, 1000), born_host=BORN)
    assert res.wrote_offset == FILE_SIZE
    await store.shutdown()
    (tmp_path / "commitlog" / f"{FILE_SIZE:020d}").unlink()
    (tmp_path / "consumequeue").rename(tmp_path / "cq-gone")
    (tmp_path / "abort").touch()
    again = await started(tmp_path)
    try:
        assert again.max_phy_offset == FILE_SIZE
        blank_at = res.queue_offset  # units kept: everything before the moved batch
        assert again.max_offset_in_queue("T", 0) == blank_at
        nxt = again.put_messages("T", 0, entries(1), born_host=BORN)
        assert nxt.wrote_offset == FILE_SIZE
        data = commit_log_files(tmp_path)[0].read_bytes()
        _, blank = walk_file(data)
        assert blank is not None
        assert again.get_messages("T", 0, 0, 1000).status is GetMessageStatus.FOUND
    finally:
        await again.shutdown()


async def test_no_commit_log_means_no_consume_queues(tmp_path):
    store = await started(tmp_path)
    fill(store, 10)
    await store.shutdown()
    shutil.rmtree(tmp_path / "commitlog")
    again = await started(tmp_path)
    try:
        assert again.max_phy_offset == 0
        assert again.max_offset_in_queue("T", 0) == 0
        res = again.put_messages("T", 0, entries(1), born_host=BORN)
        assert res.queue_offset == 0 and res.wrote_offset == 0
    finally:
        await again.shutdown()


def test_checkpoint_layout(tmp_path):
    from habroker.store.checkpoint import StoreCheckpoint

    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 10_000, 8_000, 7
    cp.master_flushed_offset, cp.confirm_phy_offset = 11, 12
    cp.flush()
    assert cp.min_timestamp == 5_000
    cp.close()
    raw = (tmp_path / "checkpoint").read_bytes()
    assert len(raw) == 4096
    assert struct.unpack_from(">qqqqq", raw) == (10_000, 8_000, 7, 11, 12)
    assert raw[40:] == bytes(4096 - 40)


@pytest.mark.parametrize(
    "bad",
    [None, (0, -1, 5), (7, 140, -3), (300, 6000, 0), (1000, -8, 0), (1499, 0, 0), (5, 0, 9)],
)
def test_consume_queue_valid_prefix_matches_unit_scan(tmp_path, bad):
    from habroker.store.consume_queue import UNIT, _valid_prefix, _valid_prefix_slow
    from habroker.store.mapped_file import MappedFile

    mf = MappedFile(tmp_path / "cq", 0, 20 * 2000, create=True)
    try:
        for i in range(1500):
            UNIT.pack_into(mf.mm, i * 20, i * 256, 256 * (1 + i % 3), i % 5)
        expected = 1500 * 20
        if bad is not None:
            index, offset, size = bad
            UNIT.pack_into(mf.mm, index * 20, offset, size, 0)
            if offset < 0 or size <= 0:
                expected = index * 20
        assert _valid_prefix_slow(mf) == expected
        assert _valid_prefix(mf) == expected
    finally:
        mf.close()


KILL_SCRIPT = """
import asyncio, sys
from tests.habroker.storeutil import entries, started

async def main():
    store = await started(__import__("pathlib").Path(sys.argv[1]))
    i = 0
    while True:
        batch = entries(1 + i % 4, 300, seed=i)
        res = store.put_messages("T", i % 3, batch, born_host=("1.2.3.4", 5))
        print(i % 3, res.queue_offset + res.count, res.next_offset, flush=True)
        i += 1
        if i % 50 == 0:
            await asyncio.sleep(0)

asyncio.run(main())
"""


async def test_sigkill_mid_writes_loses_nothing_acknowledged(tmp_path):
    import signal
    import sys

    root = tmp_path / "store"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILL_SCRIPT,
        str(root),
        stdout=asyncio.subprocess.PIPE,
        cwd=str(Path(__file__).parents[2]),
    )
    assert proc.stdout is not None
    acked: dict[int, int] = {}
    last_end = 0
    while last_end < 6 * FILE_SIZE:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line, "writer died"
        q, count, end = map(int, line.split())
        acked[q], last_end = count, end
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert (root / "abort").exists()
    store = await started(root)
    try:
        assert not store.last_exit_ok
        assert store.max_phy_offset >= last_end
        for q, count in acked.items():
            assert store.max_offset_in_queue("T", q) >= count
            res = store.get_messages("T", q, 0, 100_000, 1 << 30)
            msgs = decode_records(b"".join(bytes(r) for r in res.record_views()))
            assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
    finally:
        await store.shutdown()


async def test_restart_without_writes_keeps_the_checkpoint_timestamps(tmp_path, monkeypatch):
    """Regression: a broker restarted with nothing new to store wrote 0 into the checkpoint's
    timestamps (the dispatcher's last store time starts at 0), so the next crash recovery
    rescanned the whole commit log from its first file."""
    import habroker.store.message_store as message_store_module
    from habroker.store.checkpoint import StoreCheckpoint
    from habroker.store.commit_log import CommitLog

    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))  # a second per put
    monkeypatch.setattr(message_store_module, "_now_ms", lambda: next(clock))
    root = tmp_path / "live"

    def timestamps() -> tuple[int, int]:
        cp = StoreCheckpoint(root / "checkpoint")
        try:
            return cp.physic_msg_timestamp, cp.logics_msg_timestamp
        finally:
            cp.close()

    store = await started(root)
    try:
        fill(store, 300)
        last_ts = next(clock) - 1000
    finally:
        await store.shutdown()
    written = timestamps()
    assert written == (last_ts, last_ts)
    assert len(commit_log_files(root)) >= 4

    again = await started(root)
    try:
        await again.flush()  # what the periodic flush services do, with nothing new
        crashed = crash_copy(root, tmp_path / "crashed")
    finally:
        await again.shutdown()
    assert timestamps() == written

    # a crash now rescans from a file near the end, not from the first one
    cp = StoreCheckpoint(crashed / "checkpoint")
    log = CommitLog(crashed / "commitlog", FILE_SIZE)
    try:
        assert cp.min_timestamp == last_ts - 3000
        log.queue.load()
        _end, scan_start = log.recover(True, cp.min_timestamp, True)
        assert scan_start >= log.queue.files[-2].file_from_offset > 0
    finally:
        log.close()
        cp.close()
