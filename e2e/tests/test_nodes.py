"""The cluster has what node-level scenarios need: at least three schedulable nodes, each with a
zone label, so that spreading a group across nodes and zones means something and a node can be
lost while the others carry on (the local cluster: three nodes in zones a, b and c; kind: the
config in e2e/kind-config.yaml)."""

from __future__ import annotations

from typing import Any

from e2e.tests.kube import Kube, unavailable

ZONE = "topology.kubernetes.io/zone"
MIN_NODES = 3


def schedulable_nodes(kube: Kube) -> list[dict[str, Any]]:
    out = []
    for node in kube.json("get", "nodes")["items"]:
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        taints = node["spec"].get("taints") or []
        if (
            conditions.get("Ready") == "True"
            and not node["spec"].get("unschedulable")
            and not any(t.get("effect") == "NoSchedule" for t in taints)
        ):
            out.append(node)
    return out


def test_nodes_in_zones_and_a_zone_spread(kube: Kube, namespace: str, broker_image: str) -> None:
    nodes = schedulable_nodes(kube)
    if len(nodes) < MIN_NODES:
        unavailable(f"{len(nodes)} schedulable node(s); node-level scenarios need {MIN_NODES}")
    zones = {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(ZONE) for n in nodes}
    assert all(zones.values()), f"nodes without a {ZONE} label: {zones}"
    distinct = sorted(set(zones.values()))
    assert len(distinct) >= MIN_NODES, f"too few zones: {zones}"

    # A hard spread over zones: one pod per zone, or the scheduler refuses.
    labels = {"app": "zone-spread"}
    kube.apply(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "spread"},
            "spec": {
                "replicas": len(distinct),
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": ZONE,
                                "whenUnsatisfiable": "DoNotSchedule",
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                        "containers": [
                            {
                                "name": "sleep",
                                "image": broker_image,
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["sleep", "infinity"],
                            }
                        ],
                    },
                },
            },
        },
    )
    kube.run(
        "-n", namespace, "rollout", "status", "deployment/spread", "--timeout=120s", timeout=150
    )
    pods = kube.json("-n", namespace, "get", "pods", "-l", "app=zone-spread")["items"]
    placed = sorted(zones[p["spec"]["nodeName"]] for p in pods)
    assert placed == distinct, f"one pod per zone expected, got {placed}"
