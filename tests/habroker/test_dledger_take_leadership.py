"""A transferee behind the leader's ledger end refuses to take leadership (stays a follower)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from habroker.dledger.dledger_server import DLedgerServer
from habroker.dledger.protocol import DLedgerResponseCode


def _server(ledger_end: int) -> tuple[DLedgerServer, list[Any]]:
    taken: list[Any] = []

    async def handle_take_leadership(request: Any) -> Any:
        taken.append(request)
        return {"code": 200, "term": request["term"] + 1}

    fake = SimpleNamespace(
        state=SimpleNamespace(self_id="n2", leader_id="n1", term=3),
        store=SimpleNamespace(ledger_end_index=ledger_end),
        elector=SimpleNamespace(handle_take_leadership=handle_take_leadership),
    )
    return cast(DLedgerServer, fake), taken


def _take(index: int) -> dict[str, Any]:
    return {
        "group": "g",
        "localId": "n1",
        "remoteId": "n2",
        "leaderId": "n1",
        "term": 3,
        "transferId": "n1",
        "transfereeId": "n2",
        "takeLeadershipLedgerIndex": index,
    }


def test_a_transferee_behind_the_leader_stays_follower() -> None:
    server, taken = _server(ledger_end=5)
    answer = asyncio.run(DLedgerServer._transfer(server, _take(11)))
    assert answer == {"code": int(DLedgerResponseCode.TAKE_LEADERSHIP_FAILED), "term": 3}
    assert taken == []


def test_a_caught_up_transferee_runs_for_leader() -> None:
    server, taken = _server(ledger_end=11)
    answer = asyncio.run(DLedgerServer._transfer(server, _take(11)))
    assert answer == {"code": 200, "term": 4} and len(taken) == 1
