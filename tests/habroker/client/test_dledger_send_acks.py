"""Sends over the client port to a DLedger leader (three real peer processes), answered from the
quorum's ack future (no task per request): concurrent sends each get their own answer; with one
follower stopped (SIGSTOP) a quorum still acknowledges; with both stopped the answer is
FLUSH_SLAVE_TIMEOUT and the leader keeps the entry, which the group commits once they resume."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from habroker.client import MQProducer, SendStatus
from habroker.local import LocalDLedgerGroup

from tests.habroker.client.test_producer import read_all
from tests.habroker.test_dledger import FAST, TOPIC, create_topic


async def test_dledger_sends_are_answered_from_the_quorum_ack(tmp_path: Path) -> None:
    # slow elections: stopping both followers must not make the leader step down before the
    # put's ack times out (dLegerMaxWaitAckTimeMs)
    group = LocalDLedgerGroup(
        tmp_path, 3, **{**FAST, "dLegerMaxHeartBeatLeak": 30, "dLegerMaxWaitAckTimeMs": 1000}
    )
    group.start()
    try:
        leader = group.leader()
        create_topic(group)
        followers = [p for p in group.peers if p is not leader]
        async with MQProducer(leader.address) as producer:
            bodies = [f"d{i}".encode() for i in range(100)]
            results = await asyncio.gather(*(producer.send(TOPIC, b) for b in bodies))
            assert {r.status for r in results} == {SendStatus.SEND_OK}
            assert len({(r.queue_id, r.queue_offset) for r in results}) == len(bodies)
            assert len({r.offset_msg_id for r in results}) == len(bodies)

            pids = [f.proc.pid for f in followers if f.proc is not None]
            assert len(pids) == 2
            os.kill(pids[0], signal.SIGSTOP)
            try:
                one_down = await producer.send(TOPIC, b"one follower stopped")
                os.kill(pids[1], signal.SIGSTOP)
                both_down = await producer.send(TOPIC, b"both followers stopped")
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            assert one_down.status is SendStatus.SEND_OK, one_down
            assert both_down.status is SendStatus.FLUSH_SLAVE_TIMEOUT, both_down
        group.wait_converged()
        expected = {*bodies, b"one follower stopped", b"both followers stopped"}
        stored = [m.body for m in await read_all(group.leader().address, TOPIC)]
        assert sorted(stored) == sorted(expected)
        print(f"{len(results)} concurrent sends SEND_OK; quorum lost: {both_down.status}")
    finally:
        group.stop()
