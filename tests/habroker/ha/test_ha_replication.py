"""Master HAService + slave HAClient over real TCP on one loop, real stores in tmp_path."""

from __future__ import annotations

import asyncio
import logging

import pytest
from habroker.config import BrokerRole
from habroker.store.values import BatchEntry, PutStatus

from tests.habroker.ha.ha_support import (
    FILE_SIZE,
    JavaMasterStandIn,
    JavaSlaveStandIn,
    commit_log_files,
    frame,
    produce,
    read_report,
    wait_until,
)


async def test_backlog_over_many_files_replicates_byte_identical(nodes) -> None:
    master = await nodes("master")
    top = produce(master.store, 20 * FILE_SIZE + 12345)
    slave = await nodes("slave", master)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="slave catch-up")
    # and it keeps following new writes
    top = produce(master.store, 3 * FILE_SIZE)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="slave follows")
    await wait_until(lambda: master.ha.push2slave_max_offset == top, what="ack of the end")
    m_files, s_files = commit_log_files(master.config), commit_log_files(slave.config)
    assert len(m_files) > 20
    assert sorted(m_files) == sorted(s_files)
    for name in m_files:
        assert m_files[name] == s_files[name], f"commit-log file {name} differs"
    status = master.ha.status()
    assert status["connectionCount"] == 1 and status["inSyncSlaves"] == 1
    (entry,) = status["slaves"]
    assert entry["ackOffset"] == top and entry["lagBytes"] == 0
    s_status = slave.cl.status()
    assert s_status["connected"] is True and s_status["maxOffset"] == top
    assert s_status["masterMaxOffsetSeen"] == top and s_status["lastError"] is None


async def test_frames_stay_inside_a_file_and_within_batch_size(nodes) -> None:
    batch = 10_000
    master = await nodes("master", haTransferBatchSize=batch)
    top = produce(master.store, 5 * FILE_SIZE + 777)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    expected, sizes = 0, []
    while expected < top:
        offset, body = await peer.read_frame()
        if not body:
            continue  # a heartbeat may slip in on a slow machine
        assert offset == expected, "frames must be contiguous"
        assert len(body) <= batch
        assert offset // FILE_SIZE == (offset + len(body) - 1) // FILE_SIZE, (
            f"frame [{offset}, {offset + len(body)}) crosses a file end"
        )
        sizes.append(len(body))
        expected += len(body)
    assert expected == top
    assert max(sizes) == batch  # the cap was actually exercised
    assert any(s < batch for s in sizes[:-1])  # and file ends cut frames short
    await peer.close()


async def test_heartbeat_frames_when_idle(nodes) -> None:
    master = await nodes("master", haSendHeartbeatInterval=100)
    top = produce(master.store, 3000)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(top)  # already up to date: only heartbeats can come
    for _ in range(3):
        offset, body = await peer.read_frame(within=5)
        assert (offset, body) == (top, b"")
    await peer.close()


async def test_master_sends_nothing_before_the_first_report(nodes) -> None:
    master = await nodes("master", haSendHeartbeatInterval=50)
    produce(master.store, 3000)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    with pytest.raises(TimeoutError):
        await peer.read_frame(within=0.4)
    await peer.report(0)
    offset, body = await peer.read_frame()
    assert offset == 0 and body
    await peer.close()


async def test_housekeeping_closes_a_silent_slave(nodes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="habroker.ha")
    master = await nodes("master", haHousekeepingInterval=400)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    await wait_until(lambda: master.ha.connection_count == 1, what="slave registered")
    assert await peer.closed_by_peer(within=10)
    await wait_until(lambda: master.ha.connection_count == 0, what="slave removed")
    assert any(
        "housekeeping" in r.getMessage() and peer.address in r.getMessage() for r in caplog.records
    )


async def test_new_slave_starts_at_oldest_offset_by_default(nodes) -> None:
    master = await nodes("master")
    produce(master.store, 4 * FILE_SIZE)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    offset, body = await peer.read_frame()
    assert offset == master.store.min_phy_offset == 0 and body
    await peer.close()


async def test_new_slave_starts_at_last_file_with_haSyncFromLastFile(nodes) -> None:
    master = await nodes("master", haSyncFromLastFile=True)
    top = produce(master.store, 4 * FILE_SIZE + 100)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    offset, body = await peer.read_frame()
    assert offset == top - top % FILE_SIZE and offset > 0 and body
    await peer.close()


async def test_one_ack_releases_many_waiters(nodes) -> None:
    master = await nodes("master")
    ends = []
    for _ in range(50):
        ends.append(produce(master.store, 500, body_size=400, batch=1))
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    got = 0
    while got < ends[-1]:
        offset, body = await peer.read_frame()
        got = offset + len(body)
    waiters = [asyncio.ensure_future(master.ha.wait_for_replication(end, 30)) for end in ends]
    later = asyncio.ensure_future(master.ha.wait_for_replication(ends[-1] + 1, 30))
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters)
    before = master.ha.group_transfer.released_total
    await peer.report(ends[-1])  # one report acks everything
    results = await asyncio.wait_for(asyncio.gather(*waiters), 10)
    assert results == [True] * len(ends)
    assert master.ha.group_transfer.released_total - before == len(ends)
    assert not later.done()
    later.cancel()
    await peer.close()


async def test_sync_master_put_ok_when_slave_acks(nodes) -> None:
    master = await nodes("master", brokerRole=BrokerRole.SYNC_MASTER)
    slave = await nodes("slave", master)
    await wait_until(lambda: master.ha.connection_count == 1, what="slave connected")
    for _ in range(20):
        result = master.store.put_messages(
            "T", 0, [BatchEntry(0, b"x" * 100, b"")], born_host=("127.0.0.1", 1)
        )
        assert await master.ha.handle_put(result) is PutStatus.PUT_OK
        assert master.ha.push2slave_max_offset >= result.next_offset
    assert slave.store.max_phy_offset == master.store.max_phy_offset


async def test_sync_master_flush_slave_timeout_when_slave_never_acks(nodes) -> None:
    master = await nodes("master", brokerRole=BrokerRole.SYNC_MASTER, syncFlushTimeout=300)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)  # connected, then silent: a stopped slave
    await wait_until(lambda: master.ha.connection_count == 1, what="stand-in registered")
    result = master.store.put_messages(
        "T", 0, [BatchEntry(0, b"y" * 100, b"")], born_host=("127.0.0.1", 1)
    )
    assert await master.ha.handle_put(result) is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert master.ha.status()["syncTimeoutTotal"] == 1
    await peer.close()


async def test_sync_master_slave_not_available_without_slave(nodes) -> None:
    master = await nodes("master", brokerRole=BrokerRole.SYNC_MASTER)
    result = master.store.put_messages(
        "T", 0, [BatchEntry(0, b"z", b"")], born_host=("127.0.0.1", 1)
    )
    assert await master.ha.handle_put(result) is PutStatus.SLAVE_NOT_AVAILABLE
    # a connected socket that never reported is not a slave either
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await wait_until(lambda: len(master.ha.connections) == 1, what="socket accepted")
    assert await master.ha.handle_put(result) is PutStatus.SLAVE_NOT_AVAILABLE
    # WAIT=false and ASYNC_MASTER do not wait
    assert await master.ha.handle_put(result, wait_store_ok=False) is PutStatus.PUT_OK
    master.ha.config.brokerRole = BrokerRole.ASYNC_MASTER
    assert await master.ha.handle_put(result) is PutStatus.PUT_OK
    await peer.close()


async def test_slave_too_far_behind_is_not_available(nodes) -> None:
    master = await nodes(
        "master", brokerRole=BrokerRole.SYNC_MASTER, haMaxGapNotInSync=2 * FILE_SIZE
    )
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    await wait_until(lambda: master.ha.connection_count == 1, what="stand-in registered")
    top = produce(master.store, 3 * FILE_SIZE)
    assert not master.ha.is_slave_ok(top)
    assert master.ha.is_slave_ok(FILE_SIZE)
    await peer.close()


async def test_slave_restart_resumes_from_its_own_offset(nodes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="habroker.ha")
    master = await nodes("master")
    top = produce(master.store, 3 * FILE_SIZE)
    slave = await nodes("slave", master)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="first catch-up")
    await slave.stop()
    top = produce(master.store, 2 * FILE_SIZE)
    again = await nodes("slave", master, storePathRootDir=slave.config.storePathRootDir)
    await wait_until(lambda: again.store.max_phy_offset == top, what="resumed catch-up")
    requests = [c.request_offset for c in master.ha.connections]
    assert requests and requests[0] > 0, "the restarted slave asked for its own offset"


async def test_set_master_address_switches_masters(nodes) -> None:
    a = await nodes("master")
    b = await nodes("master")
    # b holds the same record layout (same sizes) plus more, so the slave's offset fits it
    produce(a.store, 2 * FILE_SIZE)
    produce(b.store, 2 * FILE_SIZE)
    top_b = produce(b.store, FILE_SIZE)
    slave = await nodes("slave", a)
    await wait_until(lambda: slave.store.max_phy_offset == a.store.max_phy_offset, what="from a")
    slave.cl.set_master_address(f"127.0.0.1:{b.config.haListenPort}")
    await wait_until(lambda: slave.store.max_phy_offset == top_b, what="from b")
    await wait_until(lambda: a.ha.connection_count == 0, what="a dropped")
    assert b.ha.connection_count == 1
    assert slave.cl.status()["masterAddress"] == f"127.0.0.1:{b.config.haListenPort}"
    slave.cl.set_master_address("")
    await wait_until(
        lambda: not slave.cl.connected and b.ha.connection_count == 0, what="disconnected"
    )


async def _retain_from_third_file(master) -> int:
    """Delete the master's oldest files (retention) so its min offset is not 0."""
    await master.store.flush()
    result = await master.store.clean_expired(force=True)
    assert result.deleted_files >= 2 and master.store.min_phy_offset > 0
    return master.store.min_phy_offset


async def test_new_slave_copies_from_the_oldest_retained_file(nodes) -> None:
    master = await nodes("master", fileReservedTime=0)
    produce(master.store, 5 * FILE_SIZE)
    oldest = await _retain_from_third_file(master)
    top = produce(master.store, FILE_SIZE)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(0)
    offset, _ = await peer.read_frame()
    assert offset == oldest
    await peer.close()
    slave = await nodes("slave", master)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="catch-up")
    assert slave.store.min_phy_offset == oldest
    m_files, s_files = commit_log_files(master.config), commit_log_files(slave.config)
    assert m_files == s_files


async def test_slave_behind_retention_is_refused_with_a_reason(nodes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="habroker.ha")
    master = await nodes("master", fileReservedTime=0)
    produce(master.store, 5 * FILE_SIZE)
    oldest = await _retain_from_third_file(master)
    peer = await JavaSlaveStandIn.connect(master.config.haListenPort)
    await peer.report(oldest - 100)
    assert await peer.closed_by_peer()
    assert any("below the master's min offset" in r.getMessage() for r in caplog.records)


async def test_two_slaves_replicate_and_push2slave_is_the_furthest_ack(nodes) -> None:
    master = await nodes("master")
    top = produce(master.store, 3 * FILE_SIZE)
    first = await nodes("slave", master)
    second = await nodes("slave", master, brokerId=2)
    await wait_until(
        lambda: first.store.max_phy_offset == second.store.max_phy_offset == top, what="both"
    )
    await wait_until(lambda: master.ha.connection_count == 2, what="two slaves listed")
    await first.stop()
    await wait_until(lambda: master.ha.connection_count == 1, what="one left")
    top = produce(master.store, FILE_SIZE)
    await wait_until(lambda: master.ha.push2slave_max_offset == top, what="ack from the other")
    assert [s["ackOffset"] for s in master.ha.status()["slaves"]] == [top]


async def test_slave_indexes_a_record_only_once_all_of_it_arrived(nodes) -> None:
    source = await nodes("master")
    top = produce(source.store, 5000, body_size=3000, batch=1)
    data = bytes(source.store.get_commit_log_data(0).view[:top])
    fake = JavaMasterStandIn()
    await fake.start()
    try:
        slave = await nodes("slave", None)
        slave.cl.set_master_address(fake.address)
        reader, writer = await fake.accept()
        assert await read_report(reader) == 0
        cut = 4000  # inside the second record
        writer.write(frame(0, data[:cut]))
        await writer.drain()
        assert await read_report(reader) == cut
        await wait_until(lambda: slave.store.dispatched_offset > 0, what="first record indexed")
        await asyncio.sleep(0.05)  # the dispatcher stays at the record cut in half
        first_record_end = slave.store.dispatched_offset
        assert 0 < first_record_end < cut
        writer.write(frame(cut, data[cut:]))
        await writer.drain()
        assert await read_report(reader) == top
        await wait_until(lambda: slave.store.dispatched_offset == top, what="dispatch")
        writer.close()
    finally:
        await fake.stop()


async def _trickle(master_store, puts: int, gap: float) -> int:
    """``puts`` small puts ``gap`` s apart (each its own put, as separate produces are)."""
    for _ in range(puts):
        top = produce(master_store, 1, body_size=200, batch=1)
        await asyncio.sleep(gap)
    return top


@pytest.mark.parametrize(
    ("role", "linger_ms", "gathered"),
    [
        (BrokerRole.ASYNC_MASTER, 400, True),
        (BrokerRole.ASYNC_MASTER, 0, False),  # 0: a frame run for each put, as before
        (BrokerRole.SYNC_MASTER, 400, False),  # SYNC producers wait for their frame: never
    ],
)
async def test_async_master_lets_new_data_gather_before_sending(
    nodes, role, linger_ms, gathered
) -> None:
    master = await nodes("master", brokerRole=role, haAsyncTransferLingerMs=linger_ms)
    top = produce(master.store, 3000)
    slave = await nodes("slave", master)
    await wait_until(lambda: slave.store.max_phy_offset == top, what="slave catch-up")
    (conn,) = master.ha.connections
    frames, lingers = conn.sent_frames, conn.lingers
    puts = 8
    top = await _trickle(master.store, puts, gap=0.02)  # 160 ms, under the 400 ms linger
    await wait_until(lambda: slave.store.max_phy_offset == top, what="slave follows")
    new_frames, new_lingers = conn.sent_frames - frames, conn.lingers - lingers
    (entry,) = master.ha.status()["slaves"]
    assert entry["sentFrames"] == conn.sent_frames and entry["lingers"] == conn.lingers
    if gathered:
        # the first put woke the writer, which waited while the other seven arrived
        assert new_lingers == 1 and new_frames == 1, (new_lingers, new_frames)
    else:
        assert new_lingers == 0
        assert new_frames >= puts // 2, new_frames  # one frame each (a slow loop may merge two)
    m_files, s_files = commit_log_files(master.config), commit_log_files(slave.config)
    assert m_files == s_files
