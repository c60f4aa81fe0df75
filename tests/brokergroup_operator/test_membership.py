"""The membership planner: one peer at a time, members told before a pod is added, a pod
removed only after every member forgot it, the leader never removed while it leads."""

from __future__ import annotations

from typing import Any

from brokergroup_operator.membership import plan_membership, reported_members


def ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def views(*members: list[str] | None) -> list[tuple[str, list[str] | None]]:
    return [(f"bg-peers-{i}", m) for i, m in enumerate(members)]


def healthy(n: int, leader: int = 0) -> dict[str, Any]:
    return {
        "leader": f"bg-peers-{leader}",
        "peers": [
            {
                "pod": f"bg-peers-{i}",
                "id": f"n{i}",
                "live": True,
                "inSync": True,
                "lagEntries": i,
                "role": "LEADER" if i == leader else "FOLLOWER",
            }
            for i in range(n)
        ],
    }


def test_settled_group_does_nothing():
    d = plan_membership(3, 3, 3, views(ids(3), ids(3), ids(3)), healthy(3), "T3")
    assert (d.members, d.replicas, d.tell, d.changing) == (3, 3, {}, False)
    # a peer down is not a change either
    d = plan_membership(3, 3, 3, views(ids(3), None, ids(3)), healthy(3), "T3")
    assert not d.changing


def test_growing_takes_one_peer_at_a_time_members_first():
    d = plan_membership(5, 3, 3, views(ids(3), ids(3), ids(3)), healthy(3), "T3")
    assert (d.members, d.replicas) == (4, 3) and "adding n3" in d.message
    # every running peer is told before the pod exists; one that did not answer blocks
    d = plan_membership(5, 4, 3, views(ids(3), ids(4), ids(3)), healthy(3), "T4")
    assert d.tell == {"bg-peers-0": "T4", "bg-peers-2": "T4"} and d.replicas == 3
    d = plan_membership(5, 4, 3, views(ids(4), None, ids(4)), healthy(3), "T4")
    assert d.replicas == 3 and "bg-peers-1" in d.message
    d = plan_membership(5, 4, 3, views(ids(4), ids(4), ids(4)), healthy(3), "T4")
    assert (d.members, d.replicas) == (4, 4)
    # the new pod must report the membership too before the next step
    d = plan_membership(5, 4, 4, views(ids(4), ids(4), ids(4), None), healthy(3), "T4")
    assert (d.members, d.replicas) == (4, 4) and "bg-peers-3" in d.message
    d = plan_membership(5, 4, 4, views(*[ids(4)] * 4), healthy(4), "T4")
    assert (d.members, d.replicas) == (5, 4)


def test_a_new_step_waits_for_a_leader_caught_up_peers_and_no_roll():
    v = views(*[ids(4)] * 4)
    behind = healthy(4)
    behind["peers"][3]["inSync"] = False
    assert plan_membership(5, 4, 4, v, behind, "T4").members == 4
    candidate = healthy(4)
    candidate["peers"][2]["role"] = "CANDIDATE"
    assert plan_membership(5, 4, 4, v, candidate, "T4").members == 4
    assert plan_membership(5, 4, 4, v, {"peers": []}, "T4").members == 4
    d = plan_membership(5, 4, 4, v, healthy(4), "T4", rolling=True)
    assert d.members == 4 and "rolling" in d.message


def test_shrinking_moves_leadership_off_the_leaving_peer_then_forgets_it_then_removes_it():
    v = views(*[ids(5)] * 5)
    d = plan_membership(3, 5, 5, v, healthy(5, leader=4), "T5")
    assert d.transfer == ("bg-peers-4", "n0") and d.members == 5
    d = plan_membership(3, 5, 5, v, healthy(5, leader=1), "T5")
    assert (d.members, d.replicas) == (4, 5) and "removing n4" in d.message
    # the leaving peer is told as well (it goes passive); it alone cannot block the removal
    d = plan_membership(3, 4, 5, v, healthy(5, leader=1), "T4")
    assert set(d.tell) == {f"bg-peers-{i}" for i in range(5)}
    d = plan_membership(3, 4, 5, views(*[ids(4)] * 4, None), healthy(5, leader=1), "T4")
    assert (d.members, d.replicas) == (4, 4)
    d = plan_membership(3, 4, 5, views(ids(4), None, ids(4), ids(4), ids(4)), healthy(5), "T4")
    assert d.replicas == 5, "a member that did not answer holds the pod removal"


def test_reported_members():
    assert reported_members({"dledger": {"peers": [{"id": "n0"}, {"id": "n1"}]}}) == ["n0", "n1"]
    assert reported_members({"maxOffset": 1}) is None
    assert reported_members(None) is None
