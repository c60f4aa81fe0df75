"""Volume expansion decisions: which claims to grow, and the StorageExpanded condition."""

from __future__ import annotations

from brokergroup_operator import manifests as m
from brokergroup_operator.spec import parse_spec
from brokergroup_operator.storage import ClaimInfo, claim_info, storage_condition, to_grow


def claim(name: str, requested: str, capacity: str | None, *conds: str) -> ClaimInfo:
    return ClaimInfo(name, requested, capacity, tuple(conds), bound=capacity is not None)


def test_claim_info_reads_request_capacity_and_true_conditions() -> None:
    info = claim_info(
        "store-bg-master-0",
        {"resources": {"requests": {"storage": "1Gi"}}},
        {
            "phase": "Bound",
            "capacity": {"storage": "1Gi"},
            "conditions": [
                {"type": "Resizing", "status": "True"},
                {"type": "FileSystemResizePending", "status": "False"},
            ],
        },
    )
    assert info == ClaimInfo("store-bg-master-0", "1Gi", "1Gi", ("Resizing",), bound=True)


def test_only_bound_smaller_claims_are_grown_in_any_unit() -> None:
    claims = [
        claim("a", "1Gi", "1Gi"),
        claim("b", "2048Mi", "2Gi"),  # already 2Gi, written otherwise
        claim("c", "1Gi", None),  # not bound yet: the template's size, grown once bound
        claim("d", "3Gi", "3Gi"),  # larger (the CRD forbids shrinking anyway)
    ]
    assert to_grow("2Gi", claims) == ["a"]
    assert to_grow("2147483648", claims) == ["a"]


def test_the_condition_follows_the_claims() -> None:
    growing = [claim("a", "2Gi", "1Gi", "Resizing"), claim("b", "2Gi", "2Gi")]
    cond = storage_condition("2Gi", growing, {})
    assert (cond["status"], cond["reason"]) == ("False", "Expanding")
    assert "a 1Gi" in cond["message"] and "b " not in cond["message"]
    fs = [claim("a", "2Gi", "1Gi", "FileSystemResizePending")]
    assert storage_condition("2Gi", fs, {})["reason"] == "FileSystemResizePending"
    done = [claim("a", "2Gi", "2Gi"), claim("b", "2Gi", "2Gi")]
    assert storage_condition("2Gi", done, {})["reason"] == "AtRequestedSize"
    refused = storage_condition("2Gi", growing, {"a": "storageclass does not allow expansion"})
    assert refused["reason"] == "ExpansionRefused" and "a: storageclass" in refused["message"]


def test_statefulsets_keep_the_claim_size_they_were_created_with() -> None:
    spec = parse_spec("bg", "ns", {"image": "i", "storage": {"size": "5Gi"}})
    items = {
        x["metadata"]["name"]: x
        for x in m.children(spec, {"name": "bg", "uid": "u"}, claim_sizes={"bg-master": "1Gi"})
        if x["kind"] == "StatefulSet"
    }

    def size(name: str) -> str:
        template = items[name]["spec"]["volumeClaimTemplates"][0]
        return str(template["spec"]["resources"]["requests"]["storage"])

    assert size("bg-master") == "1Gi"  # exists: immutable template kept
    assert size("bg-slave") == "5Gi"  # new: created at the spec's size
