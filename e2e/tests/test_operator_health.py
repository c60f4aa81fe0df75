"""The operator as an SRE tries it on the cluster (issue 14): drift repaired, and status and
Events that never hide an outage, with the kubelet's own words for what is wrong.

* the broker ConfigMap overwritten (bindAddress=127.0.0.1) and the client Service deleted:
  both restored within seconds, each with a ChildRepaired Event;
* the master's broker process ends (SIGTERM from inside its container, so the kubelet restarts
  it): BrokerNotReady, BrokerRestarted and BrokerReady Events, and the Ready condition's
  transition time moves even if the outage fits between two polls;
* a group whose image cannot be had: the Ready condition's reason is the kubelet's
  ErrImageNeverPull, not "unreachable", and a BrokerPodFailing Event says so;
* spec.storage.size grown: every claim expanded, no pod replaced;
* spec.externalAccess NodePort: the real Java client from outside the pod network.
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.tests.kube import outside_pod_network
from e2e.userpath import Cluster, eventually, in_sync

pytestmark = pytest.mark.timeout(600)
EXAMPLE = "sync-1-slave.yaml"


@dataclass
class Group:
    c: Cluster
    ns: str
    name: str

    def status(self) -> dict[str, Any]:
        return self.c.status(self.ns, self.name)

    def events(self, reason: str, since: float = 0.0) -> list[str]:
        items = self.c.json("-n", self.ns, "get", "events")["items"]
        return [
            e["message"]
            for e in items
            if e["involvedObject"].get("name") == self.name
            and e["reason"] == reason
            and _epoch(e.get("lastTimestamp") or e.get("eventTime") or "") >= since - 1
        ]

    def condition(self, ctype: str) -> dict[str, Any]:
        conditions = self.status().get("conditions") or []
        return next((c for c in conditions if c["type"] == ctype), {})


def _epoch(stamp: str) -> float:
    if not stamp:
        return 0.0
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


@pytest.fixture(scope="module")
def group(cluster: Cluster, broker_image: str, operator_image: str) -> Iterator[Group]:
    c = cluster
    with c.example_group(EXAMPLE, "bghealth", broker_image, operator_image, 1) as (ns, name):
        yield Group(c, ns, name)


def test_drift_is_repaired_on_the_cluster(group: Group) -> None:
    g = group
    started = time.time()
    conf = g.c.json("-n", g.ns, "get", "configmap", f"{g.name}-config")["data"]["broker.conf"]
    g.c.kubectl(
        "-n", g.ns, "patch", "configmap", f"{g.name}-config", "--type=merge",
        "-p", json.dumps({"data": {"broker.conf": "bindAddress=127.0.0.1\n"}}),
    )  # fmt: skip
    g.c.kubectl("-n", g.ns, "delete", "service", g.name, "--wait=true")
    eventually(
        lambda: (
            g.c.json("-n", g.ns, "get", "configmap", f"{g.name}-config")["data"]["broker.conf"]
            == conf
        ),
        10,
        "broker.conf restored",
    )
    eventually(
        lambda: g.c.json("-n", g.ns, "get", "service", g.name)["spec"]["ports"], 10, "Service back"
    )
    messages = eventually(
        lambda: len(m := g.events("ChildRepaired", started)) >= 2 and m, 10, "ChildRepaired"
    )
    print(f"repaired in {time.time() - started:.1f} s: {messages}")
    assert any(m.startswith(f"ConfigMap {g.name}-config was changed") for m in messages)
    assert any(m.startswith(f"Service {g.name} was deleted") for m in messages)


def test_a_master_restart_is_seen_even_between_polls(group: Group) -> None:
    g = group
    eventually(lambda: in_sync(g.status(), 1), 120, "in sync")
    before = g.condition("Ready")
    master = f"{g.name}-master-0"
    killed = time.time()
    time.sleep(1.1)  # condition times have one-second resolution
    # PID 1 is habroker: SIGTERM is its clean shutdown, then the kubelet restarts it
    g.c.kubectl(
        "-n", g.ns, "exec", master, "--", "python3", "-c",
        "import os, signal; os.kill(1, signal.SIGTERM)",
    )  # fmt: skip
    restarted = eventually(
        lambda: g.events("BrokerRestarted", killed), 90, "a BrokerRestarted Event"
    )
    assert any(master in m for m in restarted), restarted
    not_ready = eventually(lambda: g.events("BrokerNotReady", killed), 30, "BrokerNotReady")
    assert any(f"master {master}" in m for m in not_ready), not_ready
    ready = eventually(lambda: g.events("BrokerReady", killed), 120, "BrokerReady")
    print("events:", not_ready, restarted, ready)
    assert any("Ready again after" in m for m in ready), ready
    eventually(lambda: in_sync(g.status(), 1), 120, "in sync again")

    def transitioned() -> dict[str, Any] | None:
        # an outage shorter than a poll shows at the next sweep: the status read above may
        # still be the one from before it (the broker is back within a second here)
        now = g.condition("Ready")
        moved = _epoch(now["lastTransitionTime"]) > _epoch(before["lastTransitionTime"])
        return now if moved else None

    after = eventually(transitioned, 60, "the Ready condition's transition after the restart")
    assert after["status"] == "True"
    assert _epoch(after["lastTransitionTime"]) >= killed


def test_an_image_that_cannot_be_had_is_named(group: Group) -> None:
    g = group
    name = "noimage"
    g.c.apply(
        g.ns,
        {
            "apiVersion": "brokergroup.io/v1alpha1",
            "kind": "BrokerGroup",
            "metadata": {"name": name},
            "spec": {
                "image": "brokergroup/habroker:does-not-exist",
                "imagePullPolicy": "Never",
                "slaves": 0,
                "storage": {"ephemeral": True},
            },
        },
    )
    try:
        bad = Group(g.c, g.ns, name)
        cond = eventually(
            lambda: (c := bad.condition("Ready"))["reason"] == "ErrImageNeverPull" and c,
            120,
            "Ready reason ErrImageNeverPull",
        )
        print("Ready:", cond)
        assert bad.status()["master"]["problem"].startswith("ErrImageNeverPull")
        assert eventually(lambda: bad.events("BrokerPodFailing"), 30, "BrokerPodFailing")
    finally:
        g.c.kubectl("-n", g.ns, "delete", "bg", name, "--wait=false", check=False)


def test_volume_expansion_on_the_cluster(group: Group) -> None:
    """spec.storage.size grown: every claim of the group gets the new size with no pod
    restarted (the local cluster's class allows expansion; a class that does not is reported
    as ExpansionRefused)."""
    g = group
    claims = [f"store-{g.name}-master-0", f"store-{g.name}-slave-0"]
    pods = {p: g.c.pod(g.ns, p) for p in (f"{g.name}-master-0", f"{g.name}-slave-0")}
    uids = {p: (obj or {})["metadata"]["uid"] for p, obj in pods.items()}
    klass = g.c.json("-n", g.ns, "get", "pvc", claims[0])["spec"]["storageClassName"]
    grows = bool(g.c.json("get", "storageclass", klass).get("allowVolumeExpansion"))
    g.c.kubectl(
        "-n", g.ns, "patch", "bg", g.name, "--type=merge",
        "-p", json.dumps({"spec": {"storage": {"size": "128Mi"}}}),
    )  # fmt: skip
    want = "AtRequestedSize" if grows else "ExpansionRefused"
    cond = eventually(
        lambda: (
            (c := g.condition("StorageExpanded"))["reason"] == want
            and (not grows or "128Mi" in c["message"])
            and c
        ),
        60,
        want,
    )
    print(f"class {klass} (allowVolumeExpansion={grows}):", cond)
    if grows:
        for claim in claims:
            pvc = g.c.json("-n", g.ns, "get", "pvc", claim)
            assert pvc["status"]["capacity"]["storage"] == "128Mi", pvc["status"]
    for pod, uid in uids.items():
        assert (g.c.pod(g.ns, pod) or {})["metadata"]["uid"] == uid, f"{pod} was replaced"


def test_external_access_by_node_port(group: Group) -> None:
    """spec.externalAccess NodePort: the real Java client outside the pod network (the
    control plane's namespace, which reaches nodes but is told no pod address) uses the
    master's node address as namesrvAddr, gets routes naming only node IPs and node ports,
    and sends and reads back through them."""
    import tempfile
    from pathlib import Path

    from e2e.javaclient import V4, round_trip
    from tests.interop.rocketmq_java import NetNS, loads_fastjson, run_mqadmin

    outside = outside_pod_network()
    g = group
    name = "outside"
    obj = {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": name},
        "spec": {
            "image": g.c.group(g.ns, g.name)["spec"]["image"],
            "imagePullPolicy": "IfNotPresent",
            "replicationMode": "SYNC",
            "slaves": 1,
            "storage": {"ephemeral": True},
            "externalAccess": {"type": "NodePort"},
        },
    }
    g.c.apply(g.ns, obj)
    try:
        out = Group(g.c, g.ns, name)
        st = eventually(
            lambda: (
                in_sync(s := out.status(), 1)
                and s["master"].get("externalAddress")
                and s["slaves"][0].get("externalAddress")
                and s
            ),
            240,
            "the group in sync with external addresses",
        )
        external = {"0": st["master"]["externalAddress"], "1": st["slaves"][0]["externalAddress"]}
        print("external addresses:", external)
        for address in external.values():
            assert address.startswith("10.201.0."), external  # node IPs, not pod IPs
        with tempfile.TemporaryDirectory(prefix="bg-outside-") as scratch:
            ns = NetNS(Path(scratch), name=Path(outside).name)  # the cluster's: not opened
            run_mqadmin(ns, V4, "updateTopic", "-n", external["0"], "-c", "DefaultCluster",
                        "-t", "outside-orders", "-r", "4", "-w", "4")  # fmt: skip
            route = loads_fastjson(
                run_mqadmin(ns, V4, "topicRoute", "-n", external["0"], "-t", "outside-orders")
            )
            assert route["brokerDatas"][0]["brokerAddrs"] == external, route
            java = round_trip(ns, external["0"], "outside-orders", "outside-readers", 200)
            print("Java client from outside:", java)
            assert java["sent"]["sendOk"] == 200, java
            assert java["unique"] == 200 and java["duplicates"] == 0, java
    finally:
        g.c.kubectl("-n", g.ns, "delete", "bg", name, "--wait=false", check=False)
