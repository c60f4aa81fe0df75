"""Automatic failover on the cluster (examples/failover.yaml: SYNC, two slaves, the operator as
controller), under load from a client pod: four producers, one message at a time, no retries.

* delete the master pod: the operator promotes an in-sync slave; the old pod comes back as a
  slave and catches up;
* freeze the master's container (`ctr task pause` on its node: the pod and its kubelet stay,
  the broker stops answering): after masterLostSeconds a slave is promoted; thawed, the old
  master is fenced, demoted and follows.

Each prints the seconds without an accepted write (the bench target is <= 15 s) and asserts
that every acknowledged message is on the new master.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.tests.kube import unavailable
from e2e.userpath import CLIENT_SCRIPT, Cluster, eventually, in_sync

pytestmark = pytest.mark.timeout(900)
EXAMPLE = "failover.yaml"
SLAVES = 2
LOAD_SECONDS = 60.0


@dataclass
class Group:
    c: Cluster
    ns: str
    name: str
    client: str

    def status(self) -> dict[str, Any]:
        return self.c.status(self.ns, self.name)

    @property
    def master(self) -> str:
        return str((self.status().get("failover") or {}).get("master"))

    def serving(self) -> bool:
        st = self.status()
        return in_sync(st, SLAVES) and (st.get("master") or {}).get("pod") == self.master

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.c.pod(self.ns, name)


@pytest.fixture(scope="module")
def group(cluster: Cluster, broker_image: str, operator_image: str) -> Iterator[Group]:
    c = cluster
    with c.example_group(EXAMPLE, "bgfailover", broker_image, operator_image, SLAVES) as (ns, name):
        yield Group(c, ns, name, c.client_pod(ns, broker_image))


class Load:
    """e2e/client.py `load` running in the client pod while the test breaks the master."""

    def __init__(self, g: Group, topic: str, seconds: float = LOAD_SECONDS) -> None:
        namesrv = f"{g.name}-namesrv:9876"
        self.seconds = seconds
        cmd = [
            g.c.kubectl_bin, "-n", g.ns, "exec", "-i", g.client, "--", "python3", "-", "load",
            "--namesrv", namesrv, "--topic", topic, "--seconds", str(seconds),
        ]  # fmt: skip
        g.c.check()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=g.c.env,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(CLIENT_SCRIPT.read_text())
        self.proc.stdin.close()
        self.proc.stdin = None  # communicate() must not flush it again

    def result(self) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=self.seconds + 120)
        assert self.proc.returncode == 0, err[-2000:]
        return dict(json.loads(out.strip().splitlines()[-1]))


def read_all(g: Group, pod: str, topic: str) -> set[str]:
    obj = g.pod(pod)
    assert obj and obj["status"].get("podIP"), f"{pod} has no IP"
    out = g.c.client(
        g.ns, g.client, "read", "--broker", f"{obj['status']['podIP']}:10913", "--topic", topic
    )
    return set(out["bodies"])


def outage(load: dict[str, Any], event_at: float) -> float:
    """The longest pause of accepted writes that overlaps the event (seconds)."""
    spans = [length for start, length in load["gaps"] if start + length >= event_at - 1]
    return max(spans, default=0.0)


def check(g: Group, load: dict[str, Any], topic: str, what: str, event_at: float) -> None:
    acked = load["acked"]
    assert acked, f"nothing acknowledged: {load['notAcked']}"
    eventually(g.serving, 240, "the group serving and in sync again")
    stored = read_all(g, g.master, topic)
    missing = [b for b in acked if b not in stored]
    seconds = outage(load, event_at)
    print(
        f"\n[failover:{what}] acknowledged={len(acked)} not-acknowledged={load['notAcked']} "
        f"missing={len(missing)} seconds-without-an-accepted-write={seconds:.1f} "
        f"new master={g.master} epoch={(g.status().get('failover') or {}).get('epoch')}",
        flush=True,
    )
    assert not missing, f"{len(missing)} acknowledged messages missing, e.g. {missing[:5]}"


def test_delete_the_master_pod_under_load(group: Group) -> None:
    g = group
    eventually(g.serving, 120, "the group serving")
    old = g.master
    epoch = (g.status().get("failover") or {}).get("epoch")
    topic = f"FailoverDelete{os.urandom(2).hex()}"
    load = Load(g, topic)
    time.sleep(15)
    event_at = time.time()
    g.c.kubectl("-n", g.ns, "delete", "pod", old, "--wait=false")
    eventually(lambda: g.master != old, 60, "a slave promoted")
    result = load.result()
    assert (g.status().get("failover") or {}).get("epoch") == epoch + 1
    out = g.c.kubectl("-n", g.ns, "get", "bg", g.name)
    assert g.master in out, out
    check(g, result, topic, "delete", event_at)
    eventually(
        lambda: any(s.get("pod") == old and s.get("inSync") for s in g.status()["slaves"]),
        240,
        f"{old} back as an in-sync slave",
    )


def test_freeze_the_master_container_under_load(group: Group) -> None:
    g = group
    ctl = os.environ.get("E2E_NODE_CTL")
    if not ctl:
        unavailable("E2E_NODE_CTL is not set (e2e/run.sh sets it)")
    eventually(g.serving, 240, "the group serving")
    old = g.master
    obj = g.pod(old)
    assert obj is not None
    node = obj["spec"]["nodeName"]
    container = obj["status"]["containerStatuses"][0]["containerID"]
    topic = f"FailoverFreeze{os.urandom(2).hex()}"
    load = Load(g, topic)
    time.sleep(15)
    event_at = time.time()
    subprocess.run([*shlex.split(ctl), "freeze", node, container], check=True, timeout=60)
    try:
        eventually(lambda: g.master != old, 60, "a slave promoted after masterLostSeconds")
    finally:
        subprocess.run([*shlex.split(ctl), "thaw", node, container], check=False, timeout=60)
    result = load.result()
    check(g, result, topic, "freeze", event_at)
    eventually(
        lambda: any(s.get("pod") == old and s.get("inSync") for s in g.status()["slaves"]),
        240,
        f"{old} back as an in-sync slave",
    )


def test_switchover_by_annotation_under_load(group: Group) -> None:
    """`kubectl annotate bg NAME brokergroup.io/switchover-to=POD`: mastership moves to that
    in-sync slave with a pause of about a second, nothing acknowledged lost, and the
    annotation is removed when done."""
    g = group
    eventually(g.serving, 240, "the group serving")
    old = g.master
    target = next(s["pod"] for s in g.status()["slaves"] if s.get("inSync"))
    topic = f"Switchover{os.urandom(2).hex()}"
    load = Load(g, topic)
    time.sleep(15)
    event_at = time.time()
    g.c.kubectl("-n", g.ns, "annotate", "bg", g.name, f"brokergroup.io/switchover-to={target}")
    eventually(lambda: g.master == target, 60, f"{target} master")
    result = load.result()
    check(g, result, topic, "switchover", event_at)
    annotations = g.c.group(g.ns, g.name)["metadata"].get("annotations") or {}
    assert "brokergroup.io/switchover-to" not in annotations, annotations
    assert old != g.master
