"""A leader hands leadership to a preferred peer (``preferredLeaderId``) once that peer is live
and caught up, as DLedgerServer.checkPreferredLeader does every second."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from habroker.dledger.dledger_server import DLedgerServer

PEERS = ("n0", "n1", "n2")


def _leader(
    preferred: tuple[str, ...],
    marks: dict[str, int],
    live: dict[str, bool],
    *,
    self_id: str = "n0",
    leader: bool = True,
    transferee: str | None = None,
    ledger_end: int = 100,
) -> DLedgerServer:
    state = SimpleNamespace(
        self_id=self_id,
        is_leader=leader,
        transferee=transferee,
        term=4,
        peers_live=live,
        is_peer=lambda peer: peer in PEERS,
        peers=dict.fromkeys(PEERS, "127.0.0.1:1"),
    )
    fake = SimpleNamespace(
        state=state,
        settings=SimpleNamespace(preferred_leader_ids=preferred, max_transfer_wait_index=10),
        store=SimpleNamespace(ledger_end_index=ledger_end),
        pusher=SimpleNamespace(
            water_marks=SimpleNamespace(get=lambda term, peer: marks.get(peer, -1))
        ),
        _preferred_warned=set(),
    )
    fake._closest = lambda candidates: DLedgerServer._closest(cast(DLedgerServer, fake), candidates)
    return cast(DLedgerServer, fake)


def choose(server: DLedgerServer) -> tuple[str, int] | None:
    return DLedgerServer.preferred_transferee(server)


LIVE = {"n1": True, "n2": True}


def test_the_least_behind_live_preferred_peer_is_chosen() -> None:
    assert choose(_leader(("n2",), {"n1": 100, "n2": 97}, LIVE)) == ("n2", 3)
    assert choose(_leader(("n1", "n2"), {"n1": 95, "n2": 99}, LIVE)) == ("n2", 1)
    assert choose(_leader(("n1", "n2"), {"n1": 99, "n2": 99}, LIVE)) == ("n1", 1)  # first named


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("not leading", {"leader": False}),
        ("itself preferred", {"self_id": "n2"}),
        ("a transfer under way", {"transferee": "n1"}),
        ("preferred peer down", {"live": {"n1": True, "n2": False}}),
        ("preferred peer never heard", {"live": {"n1": True}}),
        ("too far behind", {"marks": {"n2": 90}}),  # 10 behind, the limit is < 10
    ],
)
def test_no_transfer(why: str, kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"preferred": ("n2",), "marks": {"n2": 100}, "live": LIVE, **kwargs}
    assert choose(_leader(**args)) is None, why


def test_a_preferred_id_that_is_no_peer_is_skipped_and_warned_once(caplog) -> None:
    server = _leader(("n7", "n2"), {"n2": 100}, LIVE)
    assert choose(server) == ("n2", 0)
    assert choose(server) == ("n2", 0)
    assert sum("n7 is not a peer" in r.getMessage() for r in caplog.records) == 1


def test_a_stopping_leader_hands_off_to_the_least_behind_live_peer_of_all() -> None:
    """Shutdown's choice (habroker: a leader stopped by SIGTERM hands off first): any peer,
    preferred or not; the live one least behind, not one too far behind, none while a
    transfer is under way or on a follower."""
    shutdown = DLedgerServer.shutdown_transferee
    assert shutdown(_leader((), {"n1": 98, "n2": 100}, LIVE)) == ("n2", 0)
    assert shutdown(_leader((), {"n1": 100, "n2": 100}, LIVE)) == ("n1", 0)  # first named
    assert shutdown(_leader((), {"n1": 98, "n2": 100}, {"n1": True, "n2": False})) == ("n1", 2)
    assert shutdown(_leader((), {"n1": 50, "n2": 60}, LIVE)) is None  # too far behind
    assert shutdown(_leader((), {"n1": 100}, LIVE, transferee="n1")) is None
    assert shutdown(_leader((), {"n1": 100}, LIVE, leader=False)) is None
