"""The chart's default two operator replicas under kopf peering, on a real cluster.

One replica runs (kopf logged its last peering step as a resume), the other stands by; deleting
the running pod hands the group to the standby, which then carries out a change (a
``kubectl scale``) that the group completes: two slaves in sync.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.tests.kube import Kube
from e2e.userpath import Cluster, eventually, find_tool, in_sync

pytestmark = pytest.mark.timeout(900)
EXAMPLE = "sync-1-slave.yaml"
RELEASE = "bgha"


def peering_state(log: str) -> str:
    """kopf's last word on peering: running (resumed) or paused (how every replica starts)."""
    state = "paused"
    for line in log.splitlines():
        if "Resuming operations" in line:
            state = "running"
        elif "Pausing operations" in line or "Pausing all operators" in line:
            state = "paused"
    return state


@pytest.fixture(scope="module")
def group(kube: Kube, broker_image: str, operator_image: str) -> Iterator[tuple[Cluster, str, str]]:
    helm = find_tool("helm", "HELM")
    if helm is None:
        pytest.fail("no helm binary: `make cluster-build` builds one into e2e/.cluster/bin")
    c = Cluster(kube.env["KUBECONFIG"], kube.kubectl, helm)
    with c.example_group(EXAMPLE, RELEASE, broker_image, operator_image, 1) as (ns, name):
        yield c, ns, name


def operator_pods(c: Cluster, ns: str) -> dict[str, str]:
    """Running operator pods and kopf's peering state in each one's log."""
    pods = c.json("-n", ns, "get", "pods", "-l", f"app.kubernetes.io/instance={RELEASE}")
    out = {}
    for pod in pods["items"]:
        if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        out[name] = peering_state(c.kubectl("-n", ns, "logs", name))
    return out


def test_one_replica_runs_and_the_standby_takes_over(group: tuple[Cluster, str, str]) -> None:
    c, ns, name = group

    def one_running() -> str | None:
        states = operator_pods(c, ns)
        running = [p for p, s in states.items() if s == "running"]
        return running[0] if len(states) == 2 and len(running) == 1 else None

    active = eventually(one_running, 120, "two operator pods, one running")
    c.kubectl("-n", ns, "delete", "pod", active, "--wait=true", "--timeout=60s")

    def successor() -> str | None:
        running = [p for p, s in operator_pods(c, ns).items() if s == "running"]
        return running[0] if running and active not in running else None

    new = eventually(successor, 120, "another replica running")
    print(f"operator {active} deleted, {new} runs")
    c.kubectl("-n", ns, "scale", "bg", name, "--replicas=2")
    eventually(lambda: in_sync(c.status(ns, name), 2), 300, "two slaves in sync")
    assert c.status(ns, name)["slaveReplicas"] == 2
