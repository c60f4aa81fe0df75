"""SYNC sends over the client port against a real master and slave process, answered from the
slave's ack (no task per request) or, with SYNC_FLUSH, by a task that waits for the flush and
then the ack: concurrent sends each get their own answer, a stopped slave (SIGSTOP, a real
fault) turns the answer into FLUSH_SLAVE_TIMEOUT with the message stored, and the group goes on
when it resumes."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import defaultdict
from pathlib import Path

import pytest
from habroker.client import MQProducer, SendStatus
from habroker.local import LocalGroup

from tests.habroker.client.test_producer import create, read_all


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_sync_sends_are_answered_from_the_slaves_ack(tmp_path: Path, flush: str) -> None:
    group = LocalGroup(tmp_path, slaves=1, mode="SYNC", syncFlushTimeout=800, flushDiskType=flush)
    group.start()
    try:
        group.wait_connected()
        master, slave = group.master, group.slaves[0]
        await create(master.address, "acks", 2)
        async with MQProducer(master.address) as producer:
            bodies = [f"m{i}".encode() for i in range(200)]
            results = await asyncio.gather(*(producer.send("acks", b) for b in bodies))
            assert {r.status for r in results} == {SendStatus.SEND_OK}
            # every answer is its own request's: per queue, the offsets are 0..n-1 once each
            offsets: dict[int, list[int]] = defaultdict(list)
            for r in results:
                offsets[r.queue_id].append(r.queue_offset)
            assert sum(len(v) for v in offsets.values()) == len(bodies)
            for found in offsets.values():
                assert sorted(found) == list(range(len(found))), found
            assert len({r.offset_msg_id for r in results}) == len(bodies)

            assert slave.proc is not None
            os.kill(slave.proc.pid, signal.SIGSTOP)
            try:
                stalled = await producer.send("acks", b"while the slave is stopped")
            finally:
                os.kill(slave.proc.pid, signal.SIGCONT)
            assert stalled.status is SendStatus.FLUSH_SLAVE_TIMEOUT, stalled
            after = await producer.send("acks", b"after")
            assert after.status is SendStatus.SEND_OK, after
        expected = {*bodies, b"while the slave is stopped", b"after"}
        on_master = [m.body for m in await read_all(master.address, "acks")]
        assert sorted(on_master) == sorted(expected)
        group.wait_replicated()
        on_slave = [m.body for m in await read_all(slave.address, "acks")]
        assert sorted(on_slave) == sorted(expected)
        print(f"{flush}: {len(results)} concurrent SYNC sends SEND_OK; stopped slave: {stalled}")
    finally:
        group.stop()
