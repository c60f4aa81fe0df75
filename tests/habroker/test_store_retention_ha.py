"""Retention (fileReservedTime) and the replication hooks (append_to_commit_log and friends)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from pathlib import Path

from habroker.config import BrokerRole
from habroker.message import decode_records
from habroker.store import GetMessageStatus, MessageStore

from .storeutil import FILE_SIZE, commit_log_files, entries, settle, started

BORN = ("10.0.0.9", 40001)


def fill(store: MessageStore, batches: int, queues: int = 2) -> None:
    for i in range(batches):
        store.put_messages(
            "T", i % queues, entries(1 + i % 4, 400 + (i * 31) % 600, seed=i), born_host=BORN
        )


def age(paths: list, hours: float) -> None:
    then = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (then, then))


# -- retention -----------------------------------------------------------------------------------
async def test_retention_deletes_old_files_and_advances_min_offsets(tmp_path):
    store = await started(tmp_path, fileReservedTime=72)
    try:
        fill(store, 200)
        await store.flush()
        files = commit_log_files(tmp_path)
        assert len(files) >= 6
        cq_dir = tmp_path / "consumequeue" / "T" / "0"
        cq_before = len(list(cq_dir.iterdir()))
        age(files[:3], 100)  # three oldest files expired
        result = await store.clean_expired(force=True)
        assert result.deleted_files == 3
        assert result.min_offset == store.min_phy_offset == 3 * FILE_SIZE
        assert [p.name for p in commit_log_files(tmp_path)] == [p.name for p in files[3:]]
        assert len(list(cq_dir.iterdir())) < cq_before
        for q in (0, 1):
            low = store.min_offset_in_queue("T", q)
            assert low > 0
            first = store.get_messages("T", q, low, 1)
            assert first.status is GetMessageStatus.FOUND
            msg = decode_records(bytes(first.record_views()[0]))[0]
            assert msg.commit_log_offset >= store.min_phy_offset and msg.queue_offset == low
            below = store.get_messages("T", q, low - 1, 5)
            assert below.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert below.next_begin_offset == low and below.min_offset == low
            assert store.get_messages("T", q, 0, 5).status is GetMessageStatus.OFFSET_TOO_SMALL
    finally:
        await store.shutdown()
    again = await started(tmp_path)  # min offsets survive a restart
    try:
        assert again.min_phy_offset == 3 * FILE_SIZE
        assert again.get_messages("T", 0, 0, 1).status is GetMessageStatus.OFFSET_TOO_SMALL
    finally:
        await again.shutdown()


async def test_retention_keeps_fresh_files_and_the_last_one(tmp_path):
    store = await started(tmp_path, fileReservedTime=1)
    try:
        fill(store, 100)
        await store.flush()
        files = commit_log_files(tmp_path)
        assert (await store.clean_expired(force=True)).deleted_files == 0  # all fresh
        age(files, 5)
        age(files[1:2], 0)  # a fresh file stops deletion: the log stays contiguous
        assert (await store.clean_expired(force=True)).deleted_files == 1
        age(commit_log_files(tmp_path), 5)
        res = await store.clean_expired(force=True)
        assert res.deleted_files == len(files) - 2
        assert commit_log_files(tmp_path) == files[-1:]  # never the current file
    finally:
        await store.shutdown()


async def test_retention_waits_for_delete_when_hour(tmp_path):
    other_hour = (time.localtime().tm_hour + 12) % 24
    store = await started(
        tmp_path, fileReservedTime=1, deleteWhen=f"{other_hour:02d}", diskMaxUsedSpaceRatio=99
    )
    try:
        fill(store, 60)
        await store.flush()
        age(commit_log_files(tmp_path), 5)
        assert (await store.clean_expired()).deleted_files == 0
        assert (await store.clean_expired(force=True)).deleted_files > 0
    finally:
        await store.shutdown()


async def test_units_pointing_below_min_are_skipped(tmp_path):
    """A queue whose min moved past deleted bytes: a pull from min finds surviving records."""
    store = await started(tmp_path, fileReservedTime=1)
    try:
        for i in range(80):
            store.put_messages("T", 0, entries(3, 900, seed=i), born_host=BORN)
        await store.flush()
        age(commit_log_files(tmp_path)[:2], 5)
        await store.clean_expired(force=True)
        res = store.get_messages("T", 0, store.min_offset_in_queue("T", 0), 1000, 1 << 30)
        assert res.status is GetMessageStatus.FOUND
        assert res.next_begin_offset == store.max_offset_in_queue("T", 0)
    finally:
        await store.shutdown()


# -- replication hooks -----------------------------------------------------------------------------
async def slave_store(root):
    return await started(root, brokerRole=BrokerRole.SLAVE, brokerId=1)


async def test_byte_identical_replica_from_regions(tmp_path):
    master = await started(tmp_path / "m")
    slave = await slave_store(tmp_path / "s")
    rng = random.Random(7)
    try:
        fill(master, 250, queues=3)
        offset = slave.max_phy_offset
        assert offset == 0
        while offset < master.max_phy_offset:
            region = master.get_commit_log_data(offset)
            assert region is not None
            view = region.view
            while len(view):  # frames split records anywhere, like haTransferBatchSize does
                n = min(len(view), rng.randint(1, 5000))
                assert slave.append_to_commit_log(offset, view[:n])
                offset += n
                view = view[n:]
                assert slave.dispatched_offset <= slave.max_phy_offset == offset
        await settle(slave)
        assert slave.dispatched_offset == slave.max_phy_offset == master.max_phy_offset
        await master.flush()
        await slave.flush()
        m_files = commit_log_files(tmp_path / "m")
        s_files = commit_log_files(tmp_path / "s")
        assert [p.name for p in m_files] == [p.name for p in s_files]
        for a, b in zip(m_files, s_files, strict=True):
            assert a.read_bytes() == b.read_bytes()
        for q in range(3):
            m = master.get_messages("T", q, 0, 100_000, 1 << 30)
            s = slave.get_messages("T", q, 0, 100_000, 1 << 30)
            assert [bytes(x) for x in m.record_views()] == [bytes(x) for x in s.record_views()]
            m_cq = sorted((tmp_path / "m" / "consumequeue" / "T" / str(q)).iterdir())
            s_cq = sorted((tmp_path / "s" / "consumequeue" / "T" / str(q)).iterdir())
            assert [p.read_bytes() for p in m_cq] == [p.read_bytes() for p in s_cq]
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_partial_record_waits_for_the_rest(tmp_path):
    master = await started(tmp_path / "m")
    slave = await slave_store(tmp_path / "s")
    try:
        master.put_messages("T", 0, entries(1, 500), born_host=BORN)
        second = master.put_messages("T", 0, entries(1, 500, seed=3), born_host=BORN)
        region = master.get_commit_log_data(0)
        assert region is not None
        cut = second.wrote_offset + 50
        assert slave.append_to_commit_log(0, region.view[:cut])
        assert await settle(slave) == second.wrote_offset  # stopped, not skipped
        assert slave.max_offset_in_queue("T", 0) == 1
        assert slave.get_messages("T", 0, 1, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert slave.append_to_commit_log(cut, region.view[cut:])
        assert await settle(slave) == second.next_offset
        assert slave.max_offset_in_queue("T", 0) == 2
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_append_continuity_checks(tmp_path):
    master = await started(tmp_path / "m")
    slave = await slave_store(tmp_path / "s")
    try:
        fill(master, 60)
        region = master.get_commit_log_data(0)
        assert region is not None
        assert not slave.append_to_commit_log(100, region.view[:10])  # empty log: file start only
        assert slave.max_phy_offset == 0 and slave.get_commit_log_data(0) is None
        assert slave.append_to_commit_log(0, region.view[:1000])
        for wrong in (0, 999, 1001, FILE_SIZE):
            assert not slave.append_to_commit_log(wrong, region.view[1000:1100])
        assert slave.max_phy_offset == 1000
        too_much = bytes(FILE_SIZE)  # would cross the file end
        assert not slave.append_to_commit_log(1000, too_much)
        assert slave.max_phy_offset == 1000
        assert slave.append_to_commit_log(1000, region.view[1000:])
        assert slave.max_phy_offset == FILE_SIZE  # full file (BLANK and filler included)
        nxt = master.get_commit_log_data(FILE_SIZE)
        assert nxt is not None
        assert slave.append_to_commit_log(FILE_SIZE, nxt.view[:64])  # opens the next file
        assert [p.name for p in commit_log_files(tmp_path / "s")][-1] == f"{FILE_SIZE:020d}"
    finally:
        await master.shutdown()
        await slave.shutdown()


async def torn_slave(tmp_path: Path) -> tuple[MessageStore, MessageStore, int, int]:
    """A master of 20 records and a slave holding them but for a record cut in half at its
    tail (dispatch stops before it): (master, slave, bytes on the slave, bytes dispatched)."""
    master = await started(tmp_path / "m")
    slave = await slave_store(tmp_path / "s")
    try:
        fill(master, 20)
        region = master.get_commit_log_data(0)
        assert region is not None
        cut = region.size - 30
        assert slave.append_to_commit_log(0, region.view[:cut])
        dispatched = await settle(slave)
        assert 0 < dispatched < cut
    except BaseException:
        await master.shutdown()
        await slave.shutdown()
        raise
    return master, slave, cut, dispatched


async def test_slave_restart_with_partial_tail_truncates_it(tmp_path):
    master, slave, _cut, dispatched = await torn_slave(tmp_path)
    await master.shutdown()
    await slave.shutdown()
    assert (tmp_path / "s" / "abort").exists()  # dispatch was behind: recover next time
    again = await slave_store(tmp_path / "s")
    try:
        assert again.max_phy_offset == dispatched == again.dispatched_offset
    finally:
        await again.shutdown()


BEHIND_WARNING = "bytes behind the commit log at shutdown"


async def test_shutdown_warning_names_the_bytes_dispatch_had_not_reached(tmp_path, caplog):
    """The abort-file warning gives the undispatched bytes as they are at the stop (a record
    cut in half at the slave's tail), and a store whose dispatch caught up says nothing."""
    master, slave, cut, dispatched = await torn_slave(tmp_path)
    with caplog.at_level(logging.WARNING, logger="habroker.store.message_store"):
        await master.shutdown()
        await slave.shutdown()
    # the master's dispatch is synchronous: only the slave warns
    warnings = [r for r in caplog.records if BEHIND_WARNING in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert warnings[0].args == (cut - dispatched,)
    assert f"is {cut - dispatched} bytes behind" in warnings[0].getMessage()
    assert (tmp_path / "s" / "abort").exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="habroker.store.message_store"):
        again = await slave_store(tmp_path / "s")  # the torn tail is cut: nothing is behind
        await again.shutdown()
    assert BEHIND_WARNING not in caplog.text
    assert not (tmp_path / "s" / "abort").exists()


async def test_slave_can_start_at_a_later_file(tmp_path):
    """A slave that copies from the master's last file (haSyncFromLastFile) gets queues whose
    first units are blank padding; reads start at the first real message."""
    master = await started(tmp_path / "m")
    slave = await slave_store(tmp_path / "s")
    try:
        fill(master, 150, queues=1)
        start = master.max_phy_offset - master.max_phy_offset % FILE_SIZE
        region = master.get_commit_log_data(start)
        assert region is not None
        assert slave.append_to_commit_log(start, region.view)
        await settle(slave)
        assert slave.min_phy_offset == start
        low = slave.min_offset_in_queue("T", 0)
        assert low > 0 and slave.max_offset_in_queue("T", 0) == master.max_offset_in_queue("T", 0)
        res = slave.get_messages("T", 0, low, 1000, 1 << 30)
        assert res.status is GetMessageStatus.FOUND
        m = master.get_messages("T", 0, low, 1000, 1 << 30)
        assert [bytes(x) for x in res.record_views()] == [bytes(x) for x in m.record_views()]
        assert slave.get_messages("T", 0, 0, 5).status is GetMessageStatus.OFFSET_TOO_SMALL
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_slave_indexes_behind_the_append_and_readers_never_pass_the_log(tmp_path):
    """A replicated append returns once the bytes are in the commit log; the consume-queue
    units follow in the background. A consumer reading the slave meanwhile gets only whole
    records that the log holds (never a unit past it), equal to the master's, and in the end
    the queues are the master's byte for byte."""
    big = {"mappedFileSizeCommitLog": 4 << 20}
    master = await started(tmp_path / "m", **big)
    slave = await started(tmp_path / "s", brokerRole=BrokerRole.SLAVE, brokerId=1, **big)
    queues = 3
    try:
        for i in range(2400):  # ~5 MB: more than one file, many dispatch slices
            master.put_messages("T", i % queues, entries(1, 2000, seed=i), born_host=BORN)
        expected = {
            q: [bytes(x) for x in master.get_messages("T", q, 0, 10**6, 1 << 30).record_views()]
            for q in range(queues)
        }
        checks = 0

        def consumer_check() -> None:
            nonlocal checks
            log_end = slave.max_phy_offset
            for q in range(queues):
                res = slave.get_messages("T", q, 0, 10**6, 1 << 30)
                if res.status is not GetMessageStatus.FOUND:
                    continue
                got = [bytes(x) for x in res.record_views()]
                assert got == expected[q][: len(got)]
                for msg in decode_records(b"".join(got)):
                    size = len(expected[q][msg.queue_offset])
                    assert msg.commit_log_offset + size <= log_end
                checks += 1

        offset = 0
        behind_seen = 0
        while offset < master.max_phy_offset:
            region = master.get_commit_log_data(offset)
            assert region is not None
            assert slave.append_to_commit_log(offset, region.view)
            offset += region.size
            assert slave.max_phy_offset == offset  # in the log (and so acked) at once
            behind_seen = max(behind_seen, slave.max_phy_offset - slave.dispatched_offset)
            consumer_check()
            for _ in range(3):  # the HA reader's turns: the dispatcher gets one in between
                await asyncio.sleep(0)
                assert slave.dispatched_offset <= slave.max_phy_offset
                consumer_check()
        assert behind_seen > 1 << 20  # the append did not wait for the indexing
        assert await settle(slave) == master.max_phy_offset
        consumer_check()
        assert checks > 10
        for q in range(queues):
            assert slave.max_offset_in_queue("T", q) == master.max_offset_in_queue("T", q)
        await master.flush()
        await slave.flush()
        for q in range(queues):
            m_cq = sorted((tmp_path / "m" / "consumequeue" / "T" / str(q)).iterdir())
            s_cq = sorted((tmp_path / "s" / "consumequeue" / "T" / str(q)).iterdir())
            assert [p.read_bytes() for p in m_cq] == [p.read_bytes() for p in s_cq]
    finally:
        await master.shutdown()
        await slave.shutdown()


async def test_slave_shutdown_indexes_what_the_background_dispatch_had_not(tmp_path):
    big = {"mappedFileSizeCommitLog": 4 << 20}
    master = await started(tmp_path / "m", **big)
    slave = await started(tmp_path / "s", brokerRole=BrokerRole.SLAVE, brokerId=1, **big)
    try:
        for i in range(6000):  # ~12 MB: more slices than the stop's own turns of the loop
            master.put_messages("T", 0, entries(1, 2000, seed=i), born_host=BORN)
        offset = 0
        while offset < master.max_phy_offset:
            region = master.get_commit_log_data(offset)
            assert region is not None
            assert slave.append_to_commit_log(offset, region.view)
            offset += region.size
        assert slave.dispatched_offset < slave.max_phy_offset
    finally:
        await slave.shutdown()  # first: the master's stop would give the dispatcher turns
        await master.shutdown()
    assert not (tmp_path / "s" / "abort").exists()  # a clean stop: everything indexed
    again = await started(tmp_path / "s", brokerRole=BrokerRole.SLAVE, brokerId=1, **big)
    try:
        assert again.max_offset_in_queue("T", 0) == 6000
    finally:
        await again.shutdown()
