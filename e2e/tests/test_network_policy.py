"""The group's NetworkPolicy, enforced: its HA port only from the group's own pods, its client
port from anywhere (docs/helm.md).

Ports are taken by name (`ha`, `client`) from the master pod's spec, as the policy names them.
A pod outside the group is refused on the HA port and served on the client port; a pod carrying
the group's label (as its slaves do) reaches the HA port; the slave itself reaches it, and the
group is in sync, which needs it. This needs a cluster whose network enforces NetworkPolicy
(kind's kindnet does); the tests are marked `network_policy` so a cluster without an engine can
deselect them by name (`-m "not network_policy"`), visibly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.tests.kube import Kube
from e2e.userpath import Cluster, example, find_tool, in_sync

pytestmark = [pytest.mark.network_policy, pytest.mark.timeout(600)]
EXAMPLE = "sync-1-slave.yaml"

# Run in a pod: connect to HOST:PORT, print open / refused / timeout.
PROBE = (
    "import socket,sys\n"
    "s=socket.socket();s.settimeout(float(sys.argv[3]))\n"
    "try:\n"
    "    s.connect((sys.argv[1],int(sys.argv[2])));print('open')\n"
    "except socket.timeout:\n"
    "    print('timeout')\n"
    "except OSError as e:\n"
    "    print('refused' if e.errno==111 else f'error {e.errno}')\n"
)


@pytest.fixture(scope="module")
def cluster(kube: Kube) -> Cluster:
    helm = find_tool("helm", "HELM")
    if helm is None:
        pytest.fail("no helm binary: `make cluster-build` builds one into e2e/.cluster/bin")
    return Cluster(kube.env["KUBECONFIG"], kube.kubectl, helm)


def sleeper(name: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "infinity"],
                }
            ],
        },
    }


def probe(c: Cluster, ns: str, pod: str, ip: str, port: int, timeout: float = 3) -> str:
    out = c.kubectl(
        "-n", ns, "exec", pod, "--", "python3", "-c", PROBE, ip, str(port), str(timeout)
    )
    return out.strip()


@pytest.fixture(scope="module")
def group(cluster: Cluster, kube: Kube, broker_image: str, operator_image: str) -> Iterator[str]:
    with cluster.example_group(EXAMPLE, "bgnetpol", broker_image, operator_image, 1) as (ns, name):
        cluster.kubectl("-n", ns, "get", "networkpolicy", f"{name}-brokers")
        yield ns


def test_ha_port_only_from_the_group(cluster: Cluster, group: str, broker_image: str) -> None:
    c, ns = cluster, group
    name = example(EXAMPLE)["metadata"]["name"]
    master = c.pod(ns, f"{name}-master-0")
    assert master
    ports = {
        p["name"]: p["containerPort"]
        for ctr in master["spec"]["containers"]
        for p in ctr.get("ports", [])
        if "name" in p
    }
    ha, client = ports["ha"], ports["client"]
    ip = master["status"]["podIP"]
    c.apply(ns, sleeper("outsider", broker_image, {"app": "outsider"}))
    c.apply(ns, sleeper("member", broker_image, {"brokergroup.io/group": name}))
    for pod in ("outsider", "member"):
        c.kubectl("-n", ns, "wait", f"pod/{pod}", "--for=condition=Ready", "--timeout=120s")

    seen = {
        "outsider->ha": probe(c, ns, "outsider", ip, ha),
        "outsider->client": probe(c, ns, "outsider", ip, client),
        "member->ha": probe(c, ns, "member", ip, ha),
        "slave->ha": probe(c, ns, f"{name}-slave-0", ip, ha),
    }
    print(f"policy probes to the master {ip} (ha={ha}, client={client}): {json.dumps(seen)}")
    assert seen["outsider->ha"] != "open", seen
    assert seen["outsider->client"] == "open", seen
    assert seen["member->ha"] == "open", seen
    assert seen["slave->ha"] == "open", seen
    assert in_sync(c.status(ns, name), 1)
