"""The operator on a real cluster: kopf runs it (on the host), real broker pods run the group.

apply -> children with the right wiring; .status fills with real offsets; producing moves them;
a stopped (frozen) slave changes the conditions and emits an Event; `auto` follows the lag; a
slave pointed elsewhere is rewired at runtime; scale up and down; a config change rolls slaves
first and the master last; delete removes the children.

The operator reaches pods by IP (BROKERGROUP_ADDRESSING=pod-ip): on the local cluster pods are
reachable only inside the cluster's network namespaces, so the operator runs in the one that
E2E_POD_NETWORK_NETNS names (the control plane's; e2e/run.sh sets it). Freezing a slave sends SIGSTOP from the host to the
broker process (found by its pod UID in /proc/*/cgroup), so that check needs a node on this
machine (the local cluster, or kind) and root; it is skipped otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.tests.kube import ClusterGone, Kube, unavailable
from e2e.userpath import address_is_local, server_host

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "brokergroup.io_brokergroups.yaml"
POLL = 2.0

#: an admin call from inside a broker pod, with the group's token its Secret mounts there
ADMIN_CALL = (
    "import json,urllib.request as u\n"
    "t=open('/etc/habroker-admin/token').read().strip()\n"
    "r=u.Request('http://127.0.0.1:10913{path}',method='{method}',data={body},"
    "headers={{'Content-Type':'application/json','Authorization':'Bearer '+t}})\n"
    "print(u.urlopen(r).read().decode())"
)


class LocalKube:
    """The suite's Kube, refusing every call once the apiserver address is not local."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self.env = kube.env
        self.host = server_host(kube.env["KUBECONFIG"])

    def check(self) -> None:
        if not address_is_local(self.host):
            raise ClusterGone(f"apiserver {self.host} is no longer on this machine")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._kube, name)
        if not callable(attr):
            return attr

        def guarded(*args: Any, **kwargs: Any) -> Any:
            self.check()
            return attr(*args, **kwargs)

        return guarded


@pytest.fixture(scope="session", autouse=True)
def _local_apiserver_only() -> None:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if kubeconfig and os.path.exists(kubeconfig) and not address_is_local(server_host(kubeconfig)):
        unavailable("KUBECONFIG's apiserver address is not on this machine (cluster down?)")


@pytest.fixture
def lkube(kube: Kube) -> LocalKube:
    return LocalKube(kube)


@pytest.fixture
def crd(lkube: LocalKube) -> None:
    kube = lkube
    # leave a CRD someone else installed (helm) alone; it is the same file
    if not kube.run(
        "get", "crd", "brokergroups.brokergroup.io", "--ignore-not-found", "-o", "name"
    ):
        kube.run("apply", "--server-side", "-f", str(CRD))
    kube.run("wait", "--for=condition=Established", "crd/brokergroups.brokergroup.io")


@pytest.fixture
def operator(lkube: LocalKube, crd: None, namespace: str, tmp_path: Path) -> Iterator[Path]:
    kube = lkube
    log = tmp_path / "operator.log"
    key = tmp_path / "operator-key"  # what the chart's key Secret gives an installed operator
    key.write_text(os.urandom(24).hex())
    env = {
        **kube.env,
        "BROKERGROUP_ADMIN_KEY_FILE": str(key),
        "BROKERGROUP_POLL_INTERVAL": str(POLL),
        "BROKERGROUP_ADDRESSING": "pod-ip",
        "BROKERGROUP_HTTP_TIMEOUT": "1",
        "PYTHONPATH": str(ROOT / "operator") + os.pathsep + str(ROOT / "broker_image"),
    }
    netns = os.environ.get("E2E_POD_NETWORK_NETNS")
    enter = ["nsenter", f"--net={netns}", "--"] if netns else []
    proc = subprocess.Popen(
        [*enter, sys.executable, "-m", "brokergroup_operator", "-n", namespace],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()

    def watchdog() -> None:
        # kopf retries forever: if the cluster goes away, stop it before it talks off-host
        while not stop.wait(0.5):
            if not address_is_local(kube.host):
                proc.kill()
                return

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        yield log
    finally:
        stop.set()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        tail = log.read_text()[-3000:]
        print("--- operator log (tail) ---\n" + tail)
        assert "Traceback" not in log.read_text(), tail


def group(name: str, image: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": name},
        "spec": {
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "storage": {"size": "64Mi", "retentionPolicy": {"whenScaled": "Retain"}},
            "resources": {"limits": {"memory": "256Mi"}},
            "brokerConfig": {
                # small files and fast failure detection for the test
                "mappedFileSizeCommitLog": "4194304",
                "maxMessageSize": "65536",
                "haHousekeepingInterval": "4000",
                "haSendHeartbeatInterval": "1000",
                "haMaxGapNotInSync": "65536",
            },
            **spec,
        },
    }


def eventually(check: Callable[[], Any], timeout: float = 120, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, KeyError, IndexError, TypeError, ValueError) as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: last={last!r}")


def status(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return kube.json("-n", ns, "get", "bg", name).get("status") or {}


def conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st.get("conditions") or []}


def events(kube: Any, ns: str, name: str) -> list[dict[str, Any]]:
    items = kube.json("-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}")
    return items["items"]  # type: ignore[no-any-return]


def running(kube: Any, ns: str, name: str, slaves: int) -> dict[str, Any]:
    st = status(kube, ns, name)
    ok = st.get("phase") == "Running" and st.get("inSyncSlaves") == f"{slaves}/{slaves}"
    return st if ok else {}


def produce(kube: Any, ns: str, name: str, count: int, size: int = 1000) -> None:
    pod = f"{name}-master-0"
    # the CLI's client commands speak RocketMQ's protocol: the broker's own client port
    kube.exec(ns, pod, "habroker", "topic", "create", "t", "--namesrv", "127.0.0.1:10911")
    kube.exec(
        ns,
        pod,
        "habroker",
        "produce",
        "--namesrv",
        "127.0.0.1:10911",
        "--topic",
        "t",
        "--count",
        str(count),
        "--size",
        str(size),
        "--batch",
        "32",
        timeout=120,
    )


def broker_pid(kube: Any, ns: str, pod: str) -> int | None:
    """The habroker process of a pod, as seen from this host."""
    uid = kube.json("-n", ns, "get", "pod", pod)["metadata"]["uid"]
    marks = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroup = (proc / "cgroup").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(m in cgroup for m in marks) and "habroker serve" in cmdline:
            return int(proc.name)
    return None


def children(kube: Any, ns: str, name: str) -> set[tuple[str, str]]:
    items = kube.json(
        "-n",
        ns,
        "get",
        "configmap,service,statefulset,poddisruptionbudget",
        "-l",
        f"brokergroup.io/group={name}",
    )["items"]
    return {(i["kind"], i["metadata"]["name"]) for i in items}


@pytest.mark.timeout(900)
def test_operator_end_to_end(
    lkube: LocalKube, namespace: str, broker_image: str, operator: Path
) -> None:
    kube: Any = lkube
    ns, name = namespace, "bg"
    kube.apply(
        ns,
        group(
            name,
            broker_image,
            replicationMode="ASYNC",
            slaves=2,
            readPolicy={"slaveReadEnable": True},
        ),
    )

    # -- children with the right wiring -------------------------------------------------------
    eventually(
        lambda: (
            children(kube, ns, name)
            == {
                ("ConfigMap", f"{name}-config"),
                ("Service", f"{name}-master"),
                ("Service", f"{name}-slave"),
                ("Service", name),
                ("Service", f"{name}-namesrv"),
                ("StatefulSet", f"{name}-master"),
                ("StatefulSet", f"{name}-slave"),
                ("PodDisruptionBudget", name),
            }
        ),
        what="8 children",
    )
    for pod in (f"{name}-master-0", f"{name}-slave-0", f"{name}-slave-1"):
        kube.wait_ready(ns, pod, timeout=240)
    slave_env = kube.exec(ns, f"{name}-slave-1", "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ")
    assert (
        f"HABROKER_haMasterAddress={name}-master-0.{name}-master.{ns}.svc.cluster.local:10912"
        in slave_env
    )
    assert (
        f"HABROKER_masterHttpAddress={name}-master-0.{name}-master.{ns}.svc.cluster.local:10913"
        in slave_env
    )
    # the admin API needs the group's token (mounted from its Secret); without it: 401
    refused = kube.exec(
        ns,
        f"{name}-slave-1",
        "python3",
        "-c",
        "import urllib.request as u,urllib.error as e\n"
        "try: u.urlopen('http://127.0.0.1:10913/v1/admin/role')\n"
        "except e.HTTPError as x: print(x.code)",
    )
    assert refused.strip() == "401", refused
    role = json.loads(
        kube.exec(
            ns,
            f"{name}-slave-1",
            "python3",
            "-c",
            ADMIN_CALL.format(method="GET", path="/v1/admin/role", body="None"),
        )
    )
    assert role["role"] == "SLAVE" and role["brokerId"] == 2, role

    # -- status fills with real offsets; producing moves them ---------------------------------
    st = eventually(lambda: running(kube, ns, name, 2), what="phase Running 2/2")
    assert [s["brokerId"] for s in st["slaves"]] == [1, 2]
    assert all(s["connected"] and s["inSync"] for s in st["slaves"])
    before = st["master"]["maxOffset"]
    produce(kube, ns, name, 300)

    def moved() -> dict[str, Any]:
        s = status(kube, ns, name)
        top = s["master"]["maxOffset"]
        caught_up = all(x["ackOffset"] == top for x in s["slaves"])
        return s if top > before and caught_up else {}

    st = eventually(moved, what="offsets moved and replicated")
    assert st["maxLagBytes"] == 0
    table = kube.run("-n", ns, "get", "bg", name)
    assert str(st["master"]["maxOffset"]) in table and "2/2" in table

    # -- auto read policy: an in-sync slave. Both are caught up, so either is right: auto keeps
    # its earlier choice while it stays within the hysteresis of the best (no flapping).
    chosen = st["readPolicy"]["whichBrokerWhenConsumeSlowly"]
    assert chosen in (1, 2), st["readPolicy"]
    assert st["readPolicy"] == {
        "slaveReadEnable": True,
        "whichBrokerWhenConsumeSlowly": chosen,
        "accessMessageInMemoryMaxRatio": 40,
        "mode": "auto",
        "applied": True,
    }
    other = 3 - chosen

    # -- the chosen slave stops: conditions, Event, and auto moves to the other one ----------
    pid = broker_pid(kube, ns, f"{name}-slave-{chosen - 1}")
    if pid is None:
        unavailable("cannot see the slave's process from here (node not on this machine?)")
    os.kill(pid, signal.SIGSTOP)
    try:
        produce(kube, ns, name, 300)  # > haMaxGapNotInSync behind while frozen

        def degraded() -> dict[str, Any]:
            s = status(kube, ns, name)
            return (
                s
                if not s["slaves"][chosen - 1]["inSync"]
                and s["readPolicy"]["whichBrokerWhenConsumeSlowly"] == other
                else {}
            )

        st = eventually(degraded, timeout=60, what=f"slave {chosen} out of sync, auto -> {other}")
        assert conditions(st)["InSync"]["status"] == "False"
        assert st["phase"] == "Degraded"
        eventually(
            lambda: (
                {e["reason"] for e in events(kube, ns, name)}
                & {"SlaveOutOfSync", "SlaveDisconnected"}
            ),
            what="a Warning event for the frozen slave",
        )
        eventually(
            lambda: "ReadPolicyChanged" in {e["reason"] for e in events(kube, ns, name)},
            what="ReadPolicyChanged event",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    eventually(lambda: running(kube, ns, name, 2), timeout=90, what="caught up again")
    eventually(
        lambda: "SlaveCaughtUp" in {e["reason"] for e in events(kube, ns, name)},
        what="SlaveCaughtUp event",
    )

    # -- wiring: a slave pointed elsewhere is rewired at runtime, without a restart ------------
    restarts = kube.json("-n", ns, "get", "pod", f"{name}-slave-1")["status"]["containerStatuses"][
        0
    ]["restartCount"]
    kube.exec(
        ns,
        f"{name}-slave-1",
        "python3",
        "-c",
        ADMIN_CALL.format(
            method="PUT",
            path="/v1/admin/master-address",
            body="json.dumps({'haMasterAddress':'127.0.0.1:1'}).encode()",
        ),
    )
    eventually(
        lambda: "SlaveRewired" in {e["reason"] for e in events(kube, ns, name)},
        what="SlaveRewired event",
    )
    eventually(lambda: running(kube, ns, name, 2), timeout=60, what="rewired slave in sync")
    after = kube.json("-n", ns, "get", "pod", f"{name}-slave-1")["status"]["containerStatuses"][0][
        "restartCount"
    ]
    assert after == restarts

    # -- scale up and down ------------------------------------------------------------------
    kube.apply(
        ns,
        group(
            name,
            broker_image,
            replicationMode="ASYNC",
            slaves=3,
            readPolicy={"slaveReadEnable": True},
        ),
    )
    kube.wait_ready(ns, f"{name}-slave-2", timeout=240)

    def all_copied() -> dict[str, Any]:
        s = running(kube, ns, name, 3)
        ok = s and all(x["ackOffset"] == s["master"]["maxOffset"] for x in s["slaves"])
        return s if ok else {}

    eventually(all_copied, what="3 slaves in sync, the new one with the whole log")
    kube.apply(
        ns,
        group(
            name,
            broker_image,
            replicationMode="ASYNC",
            slaves=1,
            readPolicy={"slaveReadEnable": True},
        ),
    )
    eventually(
        lambda: (
            not kube.run(
                "-n",
                ns,
                "get",
                "pod",
                f"{name}-slave-2",
                f"{name}-slave-1",
                "--ignore-not-found",
                "-o",
                "name",
            )
        ),
        what="highest slaves gone",
    )
    st = eventually(lambda: running(kube, ns, name, 1), what="1 slave")
    assert [s["brokerId"] for s in st["slaves"]] == [1]
    pvcs = {p["metadata"]["name"] for p in kube.json("-n", ns, "get", "pvc")["items"]}
    assert f"store-{name}-slave-2" in pvcs  # whenScaled: Retain keeps the data

    # -- a restart-requiring change rolls slaves first, the master last ------------------------
    def pod_started(pod: str) -> str:
        return kube.json("-n", ns, "get", "pod", pod)["metadata"]["creationTimestamp"]  # type: ignore[no-any-return]

    old = {p: pod_started(p) for p in (f"{name}-master-0", f"{name}-slave-0")}
    changed = group(
        name, broker_image, replicationMode="ASYNC", slaves=1, readPolicy={"slaveReadEnable": True}
    )
    changed["spec"]["brokerConfig"]["fileReservedTime"] = "47"
    kube.apply(ns, changed)
    eventually(
        lambda: all(pod_started(p) != t for p, t in old.items()),
        timeout=300,
        what="both pods replaced",
    )
    assert pod_started(f"{name}-slave-0") < pod_started(f"{name}-master-0") or (
        pod_started(f"{name}-slave-0") == pod_started(f"{name}-master-0")
    )
    eventually(lambda: running(kube, ns, name, 1), timeout=120, what="running after the roll")
    reasons = {e["reason"] for e in events(kube, ns, name)}
    assert {"RollingRestart", "MasterChanged"} <= reasons, reasons

    # -- delete removes the children ---------------------------------------------------------
    kube.run("-n", ns, "delete", "bg", name, "--timeout=60s")
    eventually(lambda: not children(kube, ns, name), timeout=120, what="children garbage-collected")
    eventually(
        lambda: (
            not kube.run(
                "-n", ns, "get", "pods", "-l", f"brokergroup.io/group={name}", "-o", "name"
            )
        ),
        timeout=120,
        what="pods gone",
    )


def test_bad_specs_are_rejected_on_the_cluster(lkube: LocalKube, crd: None, namespace: str) -> None:
    """The apiserver integration test's table, against the cluster's own apiserver: each bad
    spec is refused by `kubectl apply --dry-run=server` with a message naming the field."""
    from tests.brokergroup_operator.test_apiserver import BAD_SPECS

    for overrides, field in BAD_SPECS:
        lkube.check()
        obj = group("bad", "habroker:test")
        obj["spec"].update(overrides)
        result = subprocess.run(
            [lkube.kubectl, "-n", namespace, "apply", "--dry-run=server", "-f", "-"],
            input=json.dumps(obj),
            capture_output=True,
            text=True,
            env=lkube.env,
            timeout=60,
        )
        assert result.returncode != 0, f"accepted: {overrides}"
        assert field in result.stderr, (overrides, result.stderr)
