"""The election and the assignment (pure): who may be promoted, and what each pod becomes."""

from __future__ import annotations

import pytest
from brokergroup_operator.election import (
    Candidate,
    assignment_from_status,
    default_assignment,
    elect,
    promote,
)
from brokergroup_operator.manifests import LABEL_ROLE, children
from brokergroup_operator.spec import GroupSpec, SpecError, parse_spec

SPEC = GroupSpec(name="bg", namespace="ns", image="img", slaves=2, failover_enabled=True)


def test_the_highest_in_sync_offset_wins_and_out_of_sync_slaves_never_do() -> None:
    won = elect(
        [
            Candidate("bg-slave-0", 1, 900, in_sync=True),
            Candidate("bg-slave-1", 2, 1000, in_sync=True),
            Candidate("bg-master-0", 3, 5000, in_sync=False),
        ]
    )
    assert won.winner is not None and won.winner.pod == "bg-slave-1"
    assert "not in sync" in won.reason


def test_ties_go_to_the_preferred_pod_then_the_lowest_broker_id() -> None:
    pool = [Candidate("bg-slave-1", 2, 10, True), Candidate("bg-slave-0", 1, 10, True)]
    assert elect(pool).winner.pod == "bg-slave-0"  # type: ignore[union-attr]
    assert elect(pool, preferred="bg-slave-1").winner.pod == "bg-slave-1"  # type: ignore[union-attr]


def test_no_eligible_slave_says_why() -> None:
    assert elect([]).winner is None
    refused = elect([Candidate("bg-slave-0", 1, 10, in_sync=False)])
    assert refused.winner is None and "bg-slave-0" in refused.reason


def test_promotion_swaps_broker_ids_and_bumps_the_epoch() -> None:
    first = default_assignment(SPEC)
    assert first.broker_ids == {"bg-master-0": 0, "bg-slave-0": 1, "bg-slave-1": 2}
    second = promote(first, "bg-slave-1")
    assert second.epoch == 2 and second.master == "bg-slave-1"
    assert second.broker_ids == {"bg-master-0": 2, "bg-slave-0": 1, "bg-slave-1": 0}
    with pytest.raises(ValueError):
        promote(second, "bg-slave-7")


def test_the_recorded_assignment_follows_scaling_but_keeps_its_master() -> None:
    recorded = {
        "failover": {
            "epoch": 4,
            "master": "bg-slave-1",
            "brokerIds": {"bg-master-0": 2, "bg-slave-0": 1, "bg-slave-1": 0},
            "inSyncSet": [1, 2],
        }
    }
    grown = assignment_from_status(
        GroupSpec(name="bg", namespace="ns", image="img", slaves=3), recorded
    )
    assert grown.epoch == 4 and grown.master == "bg-slave-1"
    assert grown.broker_ids["bg-slave-2"] == 3 and grown.in_sync == {1, 2}
    three = GroupSpec(name="bg", namespace="ns", image="img", slaves=3)
    assert assignment_from_status(three, {"failover": grown.to_status()}) == grown
    shrunk = assignment_from_status(SPEC, {"failover": grown.to_status()})
    assert "bg-slave-2" not in shrunk.broker_ids and shrunk.master == "bg-slave-1"
    assert assignment_from_status(SPEC, {}) == default_assignment(SPEC)


def test_failover_spec_is_validated() -> None:
    with pytest.raises(SpecError, match=r"spec\.failover\.enabled"):
        parse_spec("bg", "ns", {"image": "i", "slaves": 0, "failover": {"enabled": True}})
    with pytest.raises(SpecError, match="preferredMaster"):
        parse_spec("bg", "ns", {"image": "i", "slaves": 1, "failover": {"preferredMaster": "x"}})
    ok = parse_spec(
        "bg",
        "ns",
        {"image": "i", "slaves": 1, "failover": {"enabled": True, "masterLostSeconds": 5}},
    )
    assert ok.failover_enabled and ok.failover_master_lost_seconds == 5


def test_failover_children_select_the_master_by_role_and_never_drop_its_volume() -> None:
    spec = GroupSpec(
        name="bg",
        namespace="ns",
        image="img",
        slaves=1,
        failover_enabled=True,
        retain_when_scaled="Delete",
    )
    items = {
        (m["kind"], m["metadata"]["name"]): m for m in children(spec, {"name": "bg", "uid": "u"})
    }
    assert items[("Service", "bg")]["spec"]["selector"][LABEL_ROLE] == "master"
    conf = items[("ConfigMap", "bg-config")]["data"]["broker.conf"]
    assert "enableControllerMode=true" in conf
    master = items[("StatefulSet", "bg-master")]["spec"]["persistentVolumeClaimRetentionPolicy"]
    slave = items[("StatefulSet", "bg-slave")]["spec"]["persistentVolumeClaimRetentionPolicy"]
    assert master["whenScaled"] == "Retain" and slave["whenScaled"] == "Delete"
    plain = GroupSpec(name="bg", namespace="ns", image="img", slaves=1)
    items = {
        (m["kind"], m["metadata"]["name"]): m for m in children(plain, {"name": "bg", "uid": "u"})
    }
    assert LABEL_ROLE not in items[("Service", "bg")]["spec"]["selector"]
    assert "enableControllerMode" not in items[("ConfigMap", "bg-config")]["data"]["broker.conf"]
