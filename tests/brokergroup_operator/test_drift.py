"""What counts as drift: a field the operator applied is gone or changed; what others add is not."""

from __future__ import annotations

import copy

from brokergroup_operator.drift import describe, drifted, find_child
from brokergroup_operator.manifests import children
from brokergroup_operator.spec import parse_spec

OWNER = {"name": "orders", "uid": "u-1"}


def desired() -> list[dict]:  # type: ignore[type-arg]
    return children(parse_spec("orders", "ns", {"image": "habroker:1", "slaves": 2}), OWNER)


def live_from(manifest: dict) -> dict:  # type: ignore[type-arg]
    """What the apiserver returns: our fields plus defaults, status and metadata of its own."""
    live = copy.deepcopy(manifest)
    live["metadata"].update(
        {"uid": "x", "resourceVersion": "7", "managedFields": [{"manager": "kubectl"}]}
    )
    live["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "1"}
    live["status"] = {"replicas": 0}
    if manifest["kind"] == "Service":
        for port in live["spec"]["ports"]:
            port["protocol"] = "TCP"
        live["spec"]["clusterIPs"] = ["10.0.0.1"]
    return live


def test_a_live_child_with_only_defaults_added_has_not_drifted() -> None:
    for manifest in desired():
        assert drifted(manifest, live_from(manifest)) == [], manifest["kind"]


def test_edits_and_removals_are_named_by_path() -> None:
    sts = find_child(desired(), "StatefulSet", "orders-slave")
    assert sts is not None
    live = live_from(dict(sts))
    live["spec"]["replicas"] = 0
    del live["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    live["spec"]["template"]["spec"]["containers"][0]["env"].pop()
    assert drifted(sts, live) == [
        "metadata.labels.app.kubernetes.io/managed-by",
        "spec.replicas",
        "spec.template.spec.containers[0].env",
    ]
    conf = find_child(desired(), "ConfigMap", "orders-config")
    assert conf is not None
    live = live_from(dict(conf))
    live["data"]["broker.conf"] = "bindAddress=127.0.0.1\n"
    assert drifted(conf, live) == ["data.broker.conf"]


def test_values_the_apiserver_stores_in_another_type_are_not_drift() -> None:
    assert drifted({"spec": {"port": 8080}}, {"spec": {"port": "8080"}}) == []
    assert drifted({"spec": {"port": 8080}}, {"spec": {"port": 8081}}) == ["spec.port"]
    assert drifted({"spec": {"x": {"a": 1}}}, {"spec": {"x": "a"}}) == ["spec.x"]


def test_the_event_message_names_what_moved() -> None:
    assert describe("Service", "orders", None) == "Service orders was deleted: recreated"
    paths = [f"p{i}" for i in range(7)]
    assert describe("ConfigMap", "c", paths) == (
        "ConfigMap c was changed outside the operator (p0, p1, p2, p3, p4 and 2 more): restored"
    )
    assert find_child(desired(), "Secret", "orders") is None
