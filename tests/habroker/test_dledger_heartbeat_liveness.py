"""A leader's view of which followers are live comes from the newest heartbeat round that
answered: an older round's answer that arrives late (its RPC timed out after the next round
succeeded) must not flip a peer back to not live for a whole heartbeat interval."""

from __future__ import annotations

import asyncio
from pathlib import Path

from habroker.config import parse_peers
from habroker.dledger.leader_elector import DLedgerLeaderElector
from habroker.dledger.member_state import MemberState
from habroker.dledger.protocol import DLedgerResponseCode
from habroker.dledger.rpc_service import DLedgerRpcService

PEERS = "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3"


def _answered(code: DLedgerResponseCode) -> asyncio.Future[dict[str, int]]:
    fut: asyncio.Future[dict[str, int]] = asyncio.get_running_loop().create_future()
    fut.set_result({"code": int(code), "term": 1})
    return fut


async def test_a_late_answer_of_an_older_round_does_not_undo_a_newer_one(tmp_path: Path) -> None:
    peers = parse_peers(PEERS, "n0")
    state = MemberState("g", "n0", peers, tmp_path / "state")
    elector = DLedgerLeaderElector(state, DLedgerRpcService(peers, "n0"), lambda: (-1, -1))
    ok, lost = DLedgerResponseCode.SUCCESS, DLedgerResponseCode.NETWORK_ERROR
    elector._note_live("n1", 2, ok)  # round 2 answered in time
    elector._late_heartbeat("n1", 1, _answered(lost))  # round 1 timed out after it
    assert state.peers_live["n1"] is True
    elector._late_heartbeat("n1", 3, _answered(lost))  # round 3 timed out: now it is news
    assert state.peers_live["n1"] is False
    elector._late_heartbeat("n1", 2, _answered(ok))  # and round 2's late success is not
    assert state.peers_live["n1"] is False
    elector._note_live("n1", 4, ok)
    assert state.peers_live["n1"] is True
    # rounds are counted per peer: n2's answers do not depend on n1's
    elector._late_heartbeat("n2", 1, _answered(lost))
    assert state.peers_live == {"n1": True, "n2": False}
