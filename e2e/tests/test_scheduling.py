"""Where the brokers run, and restarts on request, on a real cluster of at least three nodes.

* The default scheduling: a soft podAntiAffinity between all brokers of a group, so a master
  and its two slaves land on three distinct nodes (nothing in the spec asks for it).
* spec.template is honoured: a second group pinned to one node by a kubernetes.io/hostname
  nodeSelector, on a node tainted NoSchedule that only its toleration lets it onto, runs all
  three brokers there (the soft anti-affinity yields).
* ``kubectl annotate bg NAME brokergroup.io/restart=...`` restarts every broker of the first
  group (new pod UIDs), one at a time, and the group is back in sync.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.tests.kube import Kube, unavailable
from e2e.tests.test_nodes import MIN_NODES, schedulable_nodes
from e2e.userpath import Cluster, eventually, example, find_tool, in_sync

pytestmark = pytest.mark.timeout(900)
EXAMPLE = "async-2-slaves.yaml"
SLAVES = 2
TAINT_KEY = "brokergroup.io/e2e-dedicated"


@pytest.fixture(scope="module")
def cluster(kube: Kube) -> Cluster:
    if len(schedulable_nodes(kube)) < MIN_NODES:
        unavailable(f"scheduling tests need {MIN_NODES} schedulable nodes")
    helm = find_tool("helm", "HELM")
    if helm is None:
        pytest.fail("no helm binary: `make cluster-build` builds one into e2e/.cluster/bin")
    return Cluster(kube.env["KUBECONFIG"], kube.kubectl, helm)


@pytest.fixture(scope="module")
def spread_group(
    cluster: Cluster, broker_image: str, operator_image: str
) -> Iterator[tuple[str, str]]:
    with cluster.example_group(EXAMPLE, "bgsched", broker_image, operator_image, SLAVES) as made:
        yield made


def pods_of(c: Cluster, ns: str, group: str) -> list[dict[str, Any]]:
    items = c.json("-n", ns, "get", "pods", "-l", f"brokergroup.io/group={group}")["items"]
    return list(items)


def test_default_anti_affinity_puts_each_broker_on_its_own_node(
    cluster: Cluster, spread_group: tuple[str, str]
) -> None:
    ns, name = spread_group
    pods = pods_of(cluster, ns, name)
    assert len(pods) == 1 + SLAVES
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert len(set(nodes.values())) == 1 + SLAVES, f"brokers share a node: {nodes}"
    for pod in pods:
        anti = pod["spec"]["affinity"]["podAntiAffinity"]
        assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100


def test_node_selector_and_toleration_are_honoured(
    cluster: Cluster, spread_group: tuple[str, str], broker_image: str
) -> None:
    ns, _ = spread_group
    node = schedulable_nodes_names(cluster)[0]
    taint = f"{TAINT_KEY}=mq:NoSchedule"
    cluster.kubectl("taint", "nodes", node, taint, "--overwrite")
    name = "pinned"
    try:
        obj = example(EXAMPLE, broker_image)
        obj["metadata"]["name"] = name
        # ephemeral: no volume ties a pod to the node the scheduler first picked
        obj["spec"]["storage"] = {"ephemeral": True}
        obj["spec"]["template"] = {
            "pod": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [
                    {
                        "key": TAINT_KEY,
                        "operator": "Equal",
                        "value": "mq",
                        "effect": "NoSchedule",
                    }
                ],
                "metadata": {"labels": {"team": "mq"}},
            }
        }
        cluster.apply(ns, obj)
        eventually(lambda: in_sync(cluster.status(ns, name), SLAVES), 240, "pinned group in sync")
        pods = pods_of(cluster, ns, name)
        assert len(pods) == 1 + SLAVES
        assert {p["spec"]["nodeName"] for p in pods} == {node}
        assert all(p["metadata"]["labels"]["team"] == "mq" for p in pods)
    finally:
        cluster.kubectl("-n", ns, "delete", "bg", name, "--timeout=120s", check=False)
        cluster.kubectl("taint", "nodes", node, f"{TAINT_KEY}-", check=False)


def schedulable_nodes_names(c: Cluster) -> list[str]:
    nodes = c.json("get", "nodes")["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if not n["spec"].get("unschedulable")
        and not any(t.get("effect") == "NoSchedule" for t in n["spec"].get("taints") or [])
    )


def test_restart_annotation_restarts_every_broker(
    cluster: Cluster, spread_group: tuple[str, str]
) -> None:
    ns, name = spread_group
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(cluster, ns, name)}
    cluster.kubectl("-n", ns, "annotate", "bg", name, "brokergroup.io/restart=e2e", "--overwrite")

    def all_restarted() -> bool:
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(cluster, ns, name)}
        return set(now) == set(before) and all(now[p] != before[p] for p in before)

    eventually(all_restarted, 480, "every broker restarted")
    eventually(lambda: in_sync(cluster.status(ns, name), SLAVES), 240, "the group in sync again")
    for pod in pods_of(cluster, ns, name):
        assert pod["metadata"]["annotations"]["brokergroup.io/restart"] == "e2e"
