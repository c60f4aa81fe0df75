"""``/metrics`` of a real 3-peer DLedger group: every peer's role, term and indexes as its
status says; on the leader, each follower's match index, lag and liveness, and the producers
waiting for a quorum while both followers are stopped (SIGSTOP: they neither refuse nor answer).
"""

from __future__ import annotations

import threading
from typing import Any

from habroker.client import Producer

from tests.habroker.metricsutil import Scrape, scrape
from tests.habroker.test_dledger import TOPIC, agreed_statuses, create_topic, dledger_group, produce
from tests.habroker.test_group import wait_for

__all__ = ["dledger_group"]  # the fixture, imported for pytest

# followers stopped for a few seconds must neither start an election nor be left by a leader
# stepping down: 40 missed heartbeats of 300 ms before either; producers wait up to 15 s
PATIENT = {"dLegerMaxHeartBeatLeak": 40, "dLegerMaxWaitAckTimeMs": 15000}


def _peer_series(m: Scrape, name: str) -> dict[str, float]:
    return {s.labels["peer"]: s.value for s in m.samples if s.name == name}


def test_metrics_follow_the_group_and_a_leader_without_quorum(dledger_group: Any) -> None:
    group = dledger_group(3, **PATIENT)
    create_topic(group)
    leader = group.leader()
    followers = [p for p in group.peers if p is not leader]
    produce(leader, "m", 40)
    group.wait_converged()
    statuses = {s["selfId"]: s for s in agreed_statuses(group)}
    leader_id = group.dledger_status(leader)["selfId"]
    follower_ids = sorted(set(statuses) - {leader_id})

    def caught_up() -> Scrape | None:
        m = scrape(leader.http_address)
        lags = _peer_series(m, "habroker_dledger_peer_lag_entries")
        live = _peer_series(m, "habroker_dledger_peer_live")
        ok = lags == dict.fromkeys(follower_ids, 0) and live == dict.fromkeys(follower_ids, 1)
        return m if ok else None

    m = wait_for(caught_up, what="the leader to see both followers live and caught up")
    status = group.dledger_status(leader)
    assert m.types["habroker_dledger_elections_won"] == "counter"
    assert m.value("habroker_dledger_elections_won_total") >= 1
    assert m.value("habroker_dledger_role", role="LEADER") == 1
    assert m.value("habroker_dledger_term") == status["term"]
    end = status["ledgerEndIndex"]
    assert end >= 39  # 40 messages, one entry each, from index 0
    assert m.value("habroker_dledger_ledger_end_index") == end
    assert m.value("habroker_dledger_committed_index") == end
    assert m.value("habroker_dledger_ledger_begin_index") == status["ledgerBeginIndex"]
    assert _peer_series(m, "habroker_dledger_peer_match_index") == dict.fromkeys(follower_ids, end)
    assert m.value("habroker_dledger_pending_appends") == 0
    for follower in followers:
        f = wait_for(
            lambda p=follower: (
                (fm := scrape(p.http_address)).value("habroker_dledger_committed_index") == end
                and fm
            ),
            what="a follower to learn the committed index",
        )
        assert f.value("habroker_dledger_role", role="FOLLOWER") == 1
        assert f.value("habroker_dledger_term") == status["term"]
        assert f.value("habroker_dledger_ledger_end_index") == end
        # only the leader knows the others' match indexes
        assert _peer_series(f, "habroker_dledger_peer_lag_entries") == {}
        assert f.value("habroker_dledger_pending_appends") == 0

    # both followers stopped: a produce waits for a quorum that is not there
    for follower in followers:
        follower.pause()
    answer: dict[str, Any] = {}

    def send() -> None:
        with Producer(leader.http_address, timeout=30) as producer:
            answer["res"] = producer.send(TOPIC, b"waits", queue_id=0)

    sender = threading.Thread(target=send)
    try:
        sender.start()

        def waiting() -> Scrape | None:
            m = scrape(leader.http_address)
            live = _peer_series(m, "habroker_dledger_peer_live")
            ok = live == dict.fromkeys(follower_ids, 0)
            return m if ok and m.value("habroker_dledger_pending_appends") >= 1 else None

        # heartbeats time out after 3 s: then neither follower is live
        m = wait_for(waiting, timeout=10, what="the producer waiting and both followers down")
        assert m.value("habroker_dledger_role", role="LEADER") == 1
        assert m.value("habroker_dledger_ledger_end_index") == end + 1
        assert m.value("habroker_dledger_committed_index") == end
        assert _peer_series(m, "habroker_dledger_peer_lag_entries") == dict.fromkeys(
            follower_ids, 1
        )
    finally:
        for follower in followers:
            follower.resume()
        sender.join(timeout=40)
    assert answer["res"].status == "PUT_OK", answer  # acknowledged once a quorum has it
    m = wait_for(caught_up, what="both followers live and caught up again")
    assert m.value("habroker_dledger_committed_index") == end + 1
    assert m.value("habroker_dledger_pending_appends") == 0
