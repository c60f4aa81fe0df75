"""DLedger membership change (habroker's; docs/dledger.md): a group of real peers grows 3 → 5
and shrinks back to 3 one peer at a time under a steady acknowledged-write load, with a leader
killed while it has five members; every acknowledged message is kept, exactly once, in order,
on every peer that remains."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from habroker.local import LocalDLedgerGroup

from tests.habroker.test_dledger import (
    FAST,
    agreed_statuses,
    create_topic,
    log_entries,
    produce,
    start_producers,
)


@pytest.fixture
def group(tmp_path: Path):
    g = LocalDLedgerGroup(tmp_path / "g", 3, slots=5, mappedFileSizeCommitLog=256 * 1024, **FAST)
    g.start()
    yield g
    g.stop()


def members(group: LocalDLedgerGroup) -> list[list[str]]:
    return [[p["id"] for p in s["peers"]] for s in agreed_statuses(group)]


def test_membership_requests_are_checked(group):
    leader = group.leader()
    code, body = leader.request("PUT", "/v1/admin/dledger/peers", {"peers": group.members_text(5)})
    assert code == 400 and body["error"] == "bad_peers", body  # two peers at once
    assert "one peer at a time" in body["message"]
    moved = group.members_text(3).replace("n2-127.0.0.1:", "n2-127.0.0.2:")
    code, body = leader.request("PUT", "/v1/admin/dledger/peers", {"peers": moved})
    assert code == 400 and "cannot change address" in body["message"], body
    code, body = leader.request("PUT", "/v1/admin/dledger/peers", {"peers": "n0"})
    assert code == 400 and body["error"] == "bad_peers", body
    code, body = leader.request("PUT", "/v1/admin/dledger/peers", {})
    assert code == 400 and body["error"] == "bad_request", body
    assert members(group) == [["n0", "n1", "n2"]] * 3, "nothing changed"


def test_grow_to_five_and_shrink_to_three_under_load(group):
    group.leader()
    create_topic(group)
    history, stop, threads = start_producers(group)
    acked_at: list[int] = []

    def step_done(expected: int) -> None:
        ids = [f"n{i}" for i in range(expected)]
        deadline = time.monotonic() + 60
        while members(group) != [ids] * expected:
            assert time.monotonic() < deadline, members(group)
            time.sleep(0.2)
        before = sum(len(v) for v in history.acked.values())
        time.sleep(1.5)  # writes go on with the new membership
        acked_at.append(sum(len(v) for v in history.acked.values()) - before)

    try:
        time.sleep(1)
        group.add_peer()
        create_topic(group)
        step_done(4)
        group.add_peer()
        create_topic(group)
        step_done(5)
        leader = group.leader()  # five members: a new leader needs three votes
        leader.kill()
        new = group.leader(timeout=30, exclude=[leader])
        assert new is not leader
        leader.start()
        create_topic(group)
        step_done(5)
        # the leader must leave last: move leadership to n4 so removing it transfers it back
        current = group.leader()
        if current is not group.peers[-1]:
            group.transfer_leadership(current, ["n4"], timeout=30)
        removed = [group.remove_peer()]
        step_done(4)
        removed.append(group.remove_peer())
        step_done(3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    leader = group.leader()
    tail = produce(leader, "after", 8)
    group.wait_converged(timeout=60)
    statuses = agreed_statuses(group)
    assert all(s["member"] for s in statuses)
    for peer in removed:  # a removed peer restarted on its own never runs for leader
        peer.start(wait=True)
    time.sleep(2)
    for peer in removed:
        s = group.dledger_status(peer)
        assert s is not None and s["member"] is False and s["role"] != "LEADER", s
        peer.stop()
    group.stop()
    logs = [log_entries(p) for p in group.peers]
    assert all(log == logs[0] for log in logs), "every remaining peer holds the same log"
    present = Counter(b.decode() for *_, b in logs[0])
    acked = [x for ids in history.acked.values() for x in ids] + tail
    missing = [x for x in acked if present[x] == 0]
    duplicated = [x for x, n in present.items() if n > 1]
    in_log = [b.decode() for *_, b in logs[0]]
    order_ok = all(
        [x for x in in_log if x.startswith(f"p{pid}-") and x in set(ids)] == ids
        for pid, ids in history.acked.items()
    )
    print(
        f"3 → 4 → 5 (leader killed) → 4 → 3: acknowledged {len(acked)} "
        f"(per step after it: {acked_at}), failed sends {history.failed}, in the log "
        f"{sum(present.values())}, missing {len(missing)}, duplicated {len(duplicated)}"
    )
    assert all(n > 0 for n in acked_at), f"writes stalled after a step: {acked_at}"
    assert not missing, missing[:10]
    assert not duplicated, duplicated[:10]
    assert order_ok, "each producer's acknowledged messages are in send order"
