"""MessageStore on real files: put/get across many small files, BLANKs, consume queues, API."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest
from habroker.config import BrokerRole, FlushDiskType
from habroker.message import decode_record, decode_records, tags_code
from habroker.store import (
    BatchEntry,
    GetMessageStatus,
    InvalidTopic,
    MessageStore,
    MessageTooLarge,
    PropertiesTooLarge,
    PutStatus,
    StoreError,
    StoreNotWritable,
)

from .storeutil import (
    BLANK,
    FILE_SIZE,
    commit_log_files,
    cq_units,
    entries,
    make_config,
    started,
    walk_file,
)

BORN = ("10.0.0.9", 40001)


def fill(store: MessageStore, batches: int, queues: int = 3, topic: str = "TopicTest") -> None:
    for i in range(batches):
        n = 1 + i % 7
        store.put_messages(
            topic, i % queues, entries(n, size=300 + (i * 37) % 900, seed=i), born_host=BORN
        )


def read_all(store: MessageStore, topic: str, queue_id: int, page: int = 13) -> list[bytes]:
    out: list[bytes] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        res = store.get_messages(topic, queue_id, offset, page)
        if res.status is not GetMessageStatus.FOUND:
            assert res.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            return out
        out.extend(bytes(r) for r in res.record_views())
        assert res.next_begin_offset == offset + res.message_count
        offset = res.next_begin_offset


async def test_put_get_across_many_files(tmp_path):
    store = await started(tmp_path)
    try:
        sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
        for i in range(200):
            batch = entries(1 + i % 7, size=300 + (i * 37) % 900, seed=i)
            res = store.put_messages("TopicTest", i % 3, batch, born_host=BORN)
            assert res.status is PutStatus.PUT_OK
            assert res.count == len(batch)
            assert res.queue_offset == len(sent[i % 3])
            sent[i % 3].extend(bytes(e.body) for e in batch)
        assert len(commit_log_files(tmp_path)) > 5
        for qid, bodies in sent.items():
            raw = read_all(store, "TopicTest", qid)
            msgs = decode_records(b"".join(raw))
            assert [m.body for m in msgs] == bodies
            assert [m.queue_offset for m in msgs] == list(range(len(bodies)))
            assert all(m.queue_id == qid and m.topic == "TopicTest" for m in msgs)
            assert all(m.tags == "TagA" for m in msgs)
            assert all(m.store_host == ("127.0.0.1", 10911) and m.born_host == BORN for m in msgs)
            for m, r in zip(msgs, raw, strict=True):
                # records are verbatim log bytes at their PHYSICALOFFSET
                assert bytes(store.commit_log.read(m.commit_log_offset, m.store_size) or b"") == r
        assert store.topics() == ["TopicTest"]
        assert store.queue_ids("TopicTest") == [0, 1, 2]
    finally:
        await store.shutdown()


async def test_every_full_file_ends_with_blank_and_records_never_straddle(tmp_path):
    store = await started(tmp_path)
    try:
        fill(store, 150)
        await store.flush()
        files = commit_log_files(tmp_path)
        assert len(files) > 3
        for i, path in enumerate(files):
            data = path.read_bytes()
            assert len(data) == FILE_SIZE
            assert int(path.name) == i * FILE_SIZE and len(path.name) == 20
            records, blank = walk_file(data)
            if i < len(files) - 1:
                assert blank is not None, f"{path.name} has no BLANK"
                assert FILE_SIZE - blank >= 8
                assert struct.unpack_from(">iI", data, blank) == (FILE_SIZE - blank, BLANK)
            for pos, size in records:
                msg = decode_record(data, pos, check_crc=True)
                assert msg.commit_log_offset == int(path.name) + pos
                assert pos + size <= FILE_SIZE
    finally:
        await store.shutdown()


async def test_consume_queue_units_match_records(tmp_path):
    store = await started(tmp_path)
    try:
        for i in range(60):
            tag = ["TagA", "TagB", "中文"][i % 3]
            store.put_messages("T", i % 2, entries(3, 500, tag=tag, seed=i), born_host=BORN)
        await store.flush()
        for qid in (0, 1):
            units = cq_units(tmp_path, "T", qid)
            assert len(units) == 90 == store.max_offset_in_queue("T", qid)
            assert len(list((tmp_path / "consumequeue" / "T" / str(qid)).iterdir())) > 1
            for index, (phys, size, code) in enumerate(units):
                msg = store.look_message_by_offset(phys)
                assert msg is not None
                assert (msg.store_size, msg.queue_offset, msg.queue_id) == (size, index, qid)
                assert code == tags_code(msg.tags)
    finally:
        await store.shutdown()


async def test_batch_moves_whole_to_next_file(tmp_path):
    store = await started(tmp_path)
    try:
        # fill the first file until less than one batch fits, then put a batch
        while store.max_phy_offset < FILE_SIZE - 5000:
            store.put_messages("T", 0, entries(1, 1000), born_host=BORN)
        before = store.max_phy_offset
        res = store.put_messages("T", 0, entries(6, 1000), born_host=BORN)
        assert res.wrote_offset == FILE_SIZE  # whole batch at the start of file 2
        data = commit_log_files(tmp_path)[0].read_bytes()
        assert struct.unpack_from(">iI", data, before) == (FILE_SIZE - before, BLANK)
        got = store.get_messages("T", 0, res.queue_offset, 10)
        msgs = decode_records(b"".join(bytes(r) for r in got.record_views()))
        assert len(msgs) == 6
        expected = FILE_SIZE
        for m in msgs:
            assert m.commit_log_offset == expected
            expected += m.store_size
        assert store.max_phy_offset == res.next_offset
    finally:
        await store.shutdown()


async def test_get_message_statuses(tmp_path):
    store = await started(tmp_path)
    try:
        unknown = store.get_messages("Nope", 0, 5, 10)
        assert unknown.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
        assert (unknown.min_offset, unknown.max_offset, unknown.next_begin_offset) == (0, 0, 0)
        store.put_messages("T", 1, entries(10, 200), born_host=BORN)
        one = store.get_messages("T", 1, 10, 5)
        assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 10
        bad = store.get_messages("T", 1, 99, 5)
        assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
        assert bad.next_begin_offset == 10 and bad.max_offset == 10
        got = store.get_messages("T", 1, 2, 3)
        assert got.status is GetMessageStatus.FOUND
        assert got.message_count == 3 and got.next_begin_offset == 5
        last = decode_record(got.record_views()[-1])
        # the unit that did not fit was examined too (RocketMQ sets it before the full check)
        assert got.max_phy_offset_pulling == last.commit_log_offset + last.store_size
        size = got.buffer_total_size // 3
        small = store.get_messages("T", 1, 0, 100, max_bytes=size * 2 + 1)
        assert small.message_count == 2
        tiny = store.get_messages("T", 1, 0, 100, max_bytes=1)
        assert tiny.message_count == 1  # at least one, even if larger than max_bytes
        everything = store.get_messages("T", 1, 0, 100)
        assert everything.message_count == 10 and everything.next_begin_offset == 10
        assert (
            everything.max_phy_offset_pulling
            == decode_record(everything.record_views()[-1]).commit_log_offset
        )
    finally:
        await store.shutdown()


async def test_tags_filter(tmp_path):
    store = await started(tmp_path)
    try:
        for i in range(10):
            store.put_messages("T", 0, entries(1, 10, tag=f"t{i % 2}"), born_host=BORN)
        res = store.get_messages("T", 0, 0, 32, tags_codes={tags_code("t1")})
        assert res.message_count == 5 and res.next_begin_offset == 10
        assert {decode_record(r).tags for r in res.record_views()} == {"t1"}
        none = store.get_messages("T", 0, 0, 32, tags_codes={tags_code("zz")})
        assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 10
    finally:
        await store.shutdown()


async def test_validation_rejects_whole_batch(tmp_path):
    store = await started(tmp_path)
    try:
        store.put_messages("T", 0, entries(2), born_host=BORN)
        before = (store.max_phy_offset, store.max_offset_in_queue("T", 0))
        ok = BatchEntry(0, b"x", b"")
        with pytest.raises(MessageTooLarge):
            store.put_messages(
                "T", 0, [ok, BatchEntry(0, b"x" * (16 * 1024 + 1), b"")], born_host=BORN
            )
        with pytest.raises(PropertiesTooLarge):
            store.put_messages(
                "T", 0, [ok, BatchEntry(0, b"", b"K\x01" + b"v" * 32766)], born_host=BORN
            )
        with pytest.raises(MessageTooLarge, match="commit-log file"):
            store.put_messages("T", 0, [BatchEntry(0, b"x" * 16000, b"")] * 5, born_host=BORN)
        for topic in ("", "t" * 128, "../etc", "a/b", "spa ce"):
            with pytest.raises(InvalidTopic):
                store.put_messages(topic, 0, [ok], born_host=BORN)
        with pytest.raises(StoreError):
            store.put_messages("T", 0, [], born_host=BORN)
        assert (store.max_phy_offset, store.max_offset_in_queue("T", 0)) == before
        res = store.put_messages("T", 0, [ok], born_host=BORN)
        assert res.queue_offset == 2 and res.wrote_offset == before[0]
    finally:
        await store.shutdown()


async def test_rocketmq_default_max_message_size_with_small_files(tmp_path):
    """Regression: maxMessageSize (RocketMQ's default 4 MiB) larger than a commit-log file used
    to refuse the store at start; RocketMQ starts and refuses the oversized message when put."""
    store = await started(tmp_path, maxMessageSize=4 * 1024 * 1024)  # files of FILE_SIZE
    try:
        assert store.config.maxMessageSize > FILE_SIZE
        store.put_messages("T", 0, entries(2), born_host=BORN)
        before = (store.max_phy_offset, store.max_offset_in_queue("T", 0))
        with pytest.raises(MessageTooLarge) as exc:
            store.put_messages("T", 0, [BatchEntry(0, b"x" * 100_000, b"")], born_host=BORN)
        text = str(exc.value)
        assert "body 100000" in text and f"mappedFileSizeCommitLog={FILE_SIZE}" in text
        assert f"at most {FILE_SIZE - 8} bytes" in text and "(4194304)" in text
        # a body just under what a file holds is stored, in a file of its own
        room = FILE_SIZE - 8 - 200
        res = store.put_messages("T", 0, [BatchEntry(0, b"y" * room, b"")], born_host=BORN)
        assert res.status is PutStatus.PUT_OK and res.queue_offset == 2
        assert res.wrote_offset == FILE_SIZE > before[0]
        with pytest.raises(MessageTooLarge, match="maxMessageSize is 4194304"):
            store.put_messages(
                "T", 0, [BatchEntry(0, b"z" * (4 * 1024 * 1024 + 1), b"")], born_host=BORN
            )
        assert store.max_offset_in_queue("T", 0) == 3
    finally:
        await store.shutdown()


async def test_ipv6_born_host_and_store_host(tmp_path):
    store = await started(tmp_path, brokerIP1="::1")
    try:
        res = store.put_messages("T", 0, entries(3), born_host=("2001:db8::7", 5))
        msgs = decode_records(
            b"".join(bytes(r) for r in store.get_messages("T", 0, 0, 9).record_views())
        )
        assert [m.sys_flag & 0x30 for m in msgs] == [0x30] * 3
        assert msgs[0].born_host == ("2001:db8::7", 5) and msgs[0].store_host == ("::1", 10911)
        assert res.msg_id == msgs[0].msg_id and len(res.msg_id) == 56
    finally:
        await store.shutdown()


async def test_slave_store_refuses_puts_and_stopped_store_too(tmp_path):
    store = MessageStore(make_config(tmp_path))
    with pytest.raises(StoreNotWritable):
        store.put_messages("T", 0, entries(1), born_host=BORN)
    slave = await started(tmp_path / "s", brokerRole=BrokerRole.SLAVE, brokerId=1)
    try:
        with pytest.raises(StoreNotWritable):
            slave.put_messages("T", 0, entries(1), born_host=BORN)
    finally:
        await slave.shutdown()


async def test_two_stores_cannot_share_a_directory(tmp_path):
    first = await started(tmp_path)
    try:
        second = MessageStore(make_config(tmp_path))
        with pytest.raises(StoreError, match="in use by another broker"):
            await second.start()
    finally:
        await first.shutdown()
    again = await started(tmp_path)  # released on shutdown
    await again.shutdown()
    await again.shutdown()  # idempotent


async def test_clean_restart_keeps_everything(tmp_path):
    store = await started(tmp_path)
    fill(store, 120)
    before = {q: read_all(store, "TopicTest", q) for q in range(3)}
    max_phy = store.max_phy_offset
    counts = [store.max_offset_in_queue("TopicTest", q) for q in range(3)]
    await store.shutdown()
    assert not (tmp_path / "abort").exists()
    again = await started(tmp_path)
    try:
        assert again.last_exit_ok
        assert again.max_phy_offset == max_phy == again.dispatched_offset
        assert {q: read_all(again, "TopicTest", q) for q in range(3)} == before
        res = again.put_messages("TopicTest", 1, entries(2), born_host=BORN)
        assert res.queue_offset == counts[1] and res.wrote_offset == max_phy
    finally:
        await again.shutdown()


async def test_sync_flush_group_commit_one_fsync_releases_many(tmp_path):
    store = await started(
        tmp_path, flushDiskType=FlushDiskType.SYNC_FLUSH, flushIntervalCommitLog=600_000
    )
    try:
        await store.flush()
        before = store.commit_log_fsync_count
        results = [
            store.put_messages("T", i % 4, entries(2, 64, seed=i), born_host=BORN)
            for i in range(50)
        ]
        oks = await asyncio.gather(*(store.wait_flushed(r.next_offset, 5) for r in results))
        assert all(oks)
        assert store.flushed_offset >= results[-1].next_offset
        # one file holds everything: one group-commit round, one fdatasync
        assert store.commit_log_fsync_count - before == 1
        assert await store.wait_flushed(store.max_phy_offset + 100, 0.05) is False
    finally:
        await store.shutdown()


async def test_async_flush_wait_returns_at_once_and_flushes_periodically(tmp_path):
    store = await started(tmp_path, flushIntervalCommitLog=10, flushCommitLogLeastPages=0)
    try:
        res = store.put_messages("T", 0, entries(5), born_host=BORN)
        assert await store.wait_flushed(res.next_offset, 0)
        for _ in range(300):
            if store.flushed_offset >= res.next_offset:
                break
            await asyncio.sleep(0.01)
        assert store.flushed_offset == res.next_offset
    finally:
        await store.shutdown()


async def test_wait_for_new_data_and_messages(tmp_path):
    store = await started(tmp_path)
    try:
        await store.wait_for_new_data(0, 0.01)  # times out quietly
        waiter = asyncio.create_task(store.wait_for_new_data(store.max_phy_offset, 5))
        polled = asyncio.create_task(store.wait_for_messages("T", 0, 0, 5))
        await asyncio.sleep(0)
        assert not waiter.done()
        store.put_messages("T", 0, entries(1), born_host=BORN)
        await asyncio.wait_for(waiter, 1)
        assert await asyncio.wait_for(polled, 1) is True
        assert await store.wait_for_messages("T", 0, 1, 0.01) is False
    finally:
        await store.shutdown()


async def test_get_commit_log_data_regions(tmp_path):
    store = await started(tmp_path)
    try:
        assert store.get_commit_log_data(0) is None
        fill(store, 100)
        offset = 0
        while offset < store.max_phy_offset:
            region = store.get_commit_log_data(offset)
            assert region is not None
            assert region.start_offset == offset
            assert region.position == offset % FILE_SIZE
            assert region.position + region.size <= FILE_SIZE  # never crosses a file end
            assert os.pread(region.file.fileno(), region.size, region.position) == bytes(
                region.view
            )
            offset += region.size
        assert offset == store.max_phy_offset
        assert store.get_commit_log_data(offset) is None
        mid = store.get_commit_log_data(FILE_SIZE + 10)
        assert mid is not None and mid.size == FILE_SIZE - 10
    finally:
        await store.shutdown()


async def test_adjacent_records_are_served_as_one_run(tmp_path):
    store = await started(tmp_path)
    try:
        first = store.put_messages("T", 0, entries(10, size=100, seed=1), born_host=BORN)
        store.put_messages("T", 1, entries(3, size=100, seed=2), born_host=BORN)  # interleaves
        store.put_messages("T", 0, entries(5, size=100, seed=3), born_host=BORN)
        whole = store.get_messages("T", 0, 0, 100)
        assert whole.message_count == 15 and len(whole.records) == 2  # two batches, two runs
        assert bytes(whole.records[0]) == bytes(
            store.commit_log.read(first.wrote_offset, first.wrote_bytes)
        )
        assert [decode_record(r).queue_offset for r in whole.record_views()] == list(range(15))
        # limits cut a run at a record boundary
        part = store.get_messages("T", 0, 2, 3)
        assert part.message_count == 3 and part.next_begin_offset == 5 and len(part.records) == 1
        assert [decode_record(r).queue_offset for r in part.record_views()] == [2, 3, 4]
        four = sum(len(r) for r in whole.record_views()[:4])
        by_bytes = store.get_messages("T", 0, 0, 100, max_bytes=four + 1)
        assert by_bytes.message_count == 4 and by_bytes.buffer_total_size == four
    finally:
        await store.shutdown()


async def test_capped_pulls_take_the_in_memory_or_the_in_disk_caps(tmp_path):
    """maxTransfer*: a pull starting more than accessMessageInMemoryMaxRatio % of RAM behind the
    log's end gets the InDisk pair, one starting closer the InMemory pair; uncapped reads (the
    HTTP API) get what they ask for; a record larger than the bytes cap still goes alone."""
    caps = {
        "maxTransferCountOnMessageInMemory": 5,
        "maxTransferBytesOnMessageInMemory": 100_000,
        "maxTransferCountOnMessageInDisk": 3,
        "maxTransferBytesOnMessageInDisk": 100_000,
    }
    # "RAM" of 100 kB, 10 % of it hot: the last ~10 kB of the log
    store = await started(tmp_path, totalPhysicalMemorySize=100_000, **caps)
    store.config = store.config.with_updates({"accessMessageInMemoryMaxRatio": 10})
    try:
        store.put_messages("T", 0, entries(40, size=1000), born_host=BORN)
        sizes = [len(r) for r in store.get_messages("T", 0, 0, 40).record_views()]
        starts = [sum(sizes[:i]) for i in range(40)]
        # the first offset whose record starts within 10 kB of the log's end
        hot_from = next(i for i, phy in enumerate(starts) if store.max_phy_offset - phy <= 10_000)
        assert 30 <= hot_from <= 33
        assert store.get_messages("T", 0, 0, 10).message_count == 10
        assert store.get_messages("T", 0, 0, 10, capped=True).message_count == 3
        assert store.get_messages("T", 0, hot_from - 2, 10, capped=True).message_count == 3
        assert store.get_messages("T", 0, hot_from, 10, capped=True).message_count == 5
        assert store.get_messages("T", 0, hot_from, 2, capped=True).message_count == 2
        assert store.get_messages("T", 0, 38, 10, capped=True).message_count == 2
        # the bytes caps: two records fit, not three; a cap below one record still gives one
        store.config = store.config.with_updates(
            {"maxTransferBytesOnMessageInDisk": sum(sizes[:3]) - 1}
        )
        assert store.get_messages("T", 0, 0, 10, capped=True).message_count == 2
        store.config = store.config.with_updates({"maxTransferBytesOnMessageInMemory": 1})
        one = store.get_messages("T", 0, hot_from, 10, capped=True)
        assert one.message_count == 1 and one.next_begin_offset == hot_from + 1
    finally:
        await store.shutdown()
