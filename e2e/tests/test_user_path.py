"""The user's whole path on a real cluster, step by step, each step timed.

helm install (the chart, namespaced mode in this test's namespace) -> apply
examples/sync-1-slave.yaml -> Ready within a bound -> produce N messages in SYNC mode through the
group's client Service -> every acknowledged message readable from the master and from the slave
-> a consumer with a backlog is redirected to the slave -> delete the master pod -> Ready again,
the slave rewired, zero acknowledged messages lost -> scale slaves 1 -> 2, the new slave catches
up -> a config change rolls the slaves first, the master last -> delete the BrokerGroup ->
children (and PVCs, per the example's retention policy) gone -> helm uninstall leaves nothing
of the release behind (helm keeps CRDs by design: the CRD stays, with no BrokerGroup left here).

Producing and reading happen in a client pod of the broker image (e2e/client.py), so the
Services and per-pod DNS names resolve the same on kind and on the local cluster.

The operator is installed in namespaced mode, watching only this test's namespace, so the test
never touches BrokerGroups elsewhere on a shared cluster and creates nothing cluster-scoped
(besides the CRD, when the cluster does not have it yet).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from e2e.tests.kube import Kube, unavailable
from e2e.userpath import (
    CRD_NAME,
    Cluster,
    ClusterGone,
    address_is_local,
    eventually,
    example,
    find_tool,
    in_sync,
    is_local_cluster_config,
    server_host,
)

EXAMPLE = "sync-1-slave.yaml"
MESSAGES = 2000
MORE = 500  # produced after the master came back
READY_BOUND = 180.0  # seconds from apply to Ready
TOPIC = "orders"

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def cluster(kube: Kube) -> Cluster:
    kubeconfig = kube.env["KUBECONFIG"]
    if is_local_cluster_config(kubeconfig) and not address_is_local(server_host(kubeconfig)):
        unavailable("the local cluster is not running (its apiserver address is not here)")
    helm = find_tool("helm", "HELM")
    if helm is None:
        pytest.fail("no helm binary: `make cluster-build` builds one into e2e/.cluster/bin")
    return Cluster(kubeconfig, kube.kubectl, helm)


class Timeline:
    """Each step's duration, printed as it ends (not captured) and as a table at the end."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.steps: list[tuple[str, float]] = []
        self.t0 = time.monotonic()

    def say(self, line: str) -> None:
        with self.capsys.disabled():
            print(line, flush=True)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        self.say(f"\n[user-path] {name} ...")
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.steps.append((name, took))
            self.say(f"[user-path] {name}: {took:.1f}s")

    def table(self) -> str:
        rows = [f"  {took:7.1f}s  {name}" for name, took in self.steps]
        total = time.monotonic() - self.t0
        return "\n".join(["[user-path] step timings:", *rows, f"  {total:7.1f}s  total"])


def bodies(first: int, count: int) -> set[str]:
    return {f"m-{i}" for i in range(first, first + count)}


def pod_uid(c: Cluster, ns: str, pod: str) -> str | None:
    obj = c.pod(ns, pod)
    return str(obj["metadata"]["uid"]) if obj else None


def pod_ready(c: Cluster, ns: str, pod: str) -> bool:
    obj = c.pod(ns, pod)
    if not obj or obj["metadata"].get("deletionTimestamp"):
        return False
    conds = {x["type"]: x["status"] for x in obj.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def group_children(c: Cluster, ns: str, name: str) -> set[str]:
    items = c.json(
        "-n",
        ns,
        "get",
        "configmap,service,statefulset,poddisruptionbudget,networkpolicy,pod",
        "-l",
        f"brokergroup.io/group={name}",
    )["items"]
    return {f"{i['kind']}/{i['metadata']['name']}" for i in items}


def release_leftovers(c: Cluster, ns: str, release: str) -> list[str]:
    """Everything of the release, namespaced and cluster-scoped, helm's own records included."""
    found: list[str] = []
    selector = f"app.kubernetes.io/instance={release}"
    namespaced = "deployment,replicaset,pod,serviceaccount,role,rolebinding,networkpolicy,configmap,secret,service"
    for item in c.json("-n", ns, "get", namespaced, "-l", selector)["items"]:
        found.append(f"{item['kind']}/{item['metadata']['name']}")
    for item in c.json("get", "clusterrole,clusterrolebinding", "-l", selector)["items"]:
        found.append(f"{item['kind']}/{item['metadata']['name']}")
    for item in c.json("-n", ns, "get", "secret", "-l", f"owner=helm,name={release}")["items"]:
        found.append(f"Secret/{item['metadata']['name']}")
    return found


def diagnostics(c: Cluster, ns: str, release: str) -> str:
    parts = []
    for args in (
        ("-n", ns, "get", "bg,pods,pvc,networkpolicy", "-o", "wide"),
        ("-n", ns, "get", "events", "--sort-by=.lastTimestamp"),
        ("-n", ns, "logs", f"deploy/{release}-brokergroup-operator", "--tail=80"),
    ):
        try:
            parts.append(c.kubectl(*args, check=False))
        except (ClusterGone, OSError) as exc:
            parts.append(str(exc))
    return "\n".join(parts)


def test_user_path(
    cluster: Cluster,
    namespace: str,
    broker_image: str,
    operator_image: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    c, ns = cluster, namespace
    release = f"bg{ns[-6:]}"
    tl = Timeline(capsys)
    crd_existed = bool(c.kubectl("get", "crd", CRD_NAME, "--ignore-not-found", "-o", "name"))
    group = example(EXAMPLE, broker_image)
    name = group["metadata"]["name"]
    master, slave0, slave1 = f"{name}-master-0", f"{name}-slave-0", f"{name}-slave-1"
    # e2e/client.py produces and consumes with RocketMQ's remoting protocol through the group's
    # name-server Service (what an application sets as namesrvAddr); reads and status use one
    # broker's HTTP API (the Services' http port, httpListenPort)
    http_port = int(group["spec"].get("ports", {}).get("http", 10913))
    namesrv = f"{name}-namesrv:9876"
    master_addr = f"{master}.{name}-master:{http_port}"
    slave_addr = {
        1: f"{slave0}.{name}-slave:{http_port}",
        2: f"{slave1}.{name}-slave:{http_port}",
    }
    acked: set[str] = set()
    ok = False
    try:
        with tl.step("helm install (namespaced mode)"):
            c.install_operator(release, ns, operator_image, "--set", "watch.mode=namespaced")
            assert c.kubectl("get", "crd", CRD_NAME, "-o", "name").strip()

        with tl.step(f"apply examples/{EXAMPLE} -> Ready (bound {READY_BOUND:.0f}s)"):
            c.apply(ns, group)
            eventually(
                lambda: in_sync(c.status(ns, name), 1),
                READY_BOUND,
                "the group Ready with its slave in sync",
            )
            # the chart turned on per-group NetworkPolicies; the operator made this one
            policy = c.json("-n", ns, "get", "networkpolicy", f"{name}-brokers")
            open_rule, ha_rule = policy["spec"]["ingress"]
            assert {p["port"] for p in open_rule["ports"]} == {"client", "http"}
            assert ha_rule["from"] == [
                {"podSelector": {"matchLabels": {"brokergroup.io/group": name}}}
            ]
            client = c.client_pod(ns, broker_image)

        with tl.step(f"produce {MESSAGES} messages (SYNC) through {namesrv} (remoting)"):
            res = c.client(
                ns, client, "produce", "--namesrv", namesrv, "--topic", TOPIC,
                "--count", str(MESSAGES),
            )  # fmt: skip
            tl.say(f"[user-path]   produce took {res['seconds']}s: notAcked={res['notAcked']}")
            assert res["errorCount"] == 0, res["errors"]
            acked = {f"m-{i}" for i in res["acked"]}
            # a healthy SYNC group acknowledges everything (PUT_OK: on the master and a slave)
            assert acked == bodies(0, MESSAGES), res["notAcked"]
            # the broker image runs the lean path: uvloop and the compiled record codec
            started = [
                line
                for line in c.kubectl("-n", ns, "logs", master).splitlines()
                if "event loop:" in line
            ]
            tl.say(f"[user-path]   {started[-1] if started else 'no start line in the log'}")
            assert started and started[-1].endswith(
                "event loop: uvloop; record codec: compiled (Cython)"
            ), started

        with tl.step("the real RocketMQ Java client through the namesrv Service"):
            from e2e.javaclient import NODE_NAMESPACE, node_namespace, round_trip

            with node_namespace() as java_ns:
                if java_ns is None:  # kind or another cluster: no node namespace on this host
                    tl.say(f"[user-path]   skipped: no {NODE_NAMESPACE} namespace on this host")
                else:
                    ip = c.kubectl(
                        "-n", ns, "get", "svc", f"{name}-namesrv",
                        "-o", "jsonpath={.spec.clusterIP}",
                    ).strip()  # fmt: skip
                    java = round_trip(java_ns, f"{ip}:9876", "java-orders", "java-readers", 300)
                    tl.say(f"[user-path]   Java client: {java}")
                    assert java["sent"]["sendOk"] == 300, java
                    assert java["unique"] == 300 and java["duplicates"] == 0, java

        with tl.step("every acknowledged message readable from the master and the slave"):
            on_master = c.client(ns, client, "read", "--broker", master_addr, "--topic", TOPIC)
            assert acked <= set(on_master["bodies"])
            on_slave = c.client(ns, client, "read", "--broker", slave_addr[1], "--topic", TOPIC)
            assert acked <= set(on_slave["bodies"]), (
                f"missing on the slave: {len(acked - set(on_slave['bodies']))}"
            )

        with tl.step("a consumer with a backlog is redirected to the slave"):
            # Any backlog counts as slow with ratio 0 (applied at runtime, no restart): the
            # master answers the consumer's pulls with suggestWhichBrokerId=1.
            c.kubectl(
                "-n",
                ns,
                "patch",
                "bg",
                name,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"readPolicy": {"accessMessageInMemoryMaxRatio": 0}}}),
            )
            eventually(
                lambda: (
                    (rp := c.status(ns, name).get("readPolicy", {})).get("applied")
                    and rp.get("accessMessageInMemoryMaxRatio") == 0
                ),
                60,
                "the read policy applied to the brokers",
            )
            res = c.client(
                ns,
                client,
                "consume",
                "--namesrv",
                namesrv,
                "--topic",
                TOPIC,
                "--group",
                "backlog-readers",
                "--count",
                str(MESSAGES),
            )
            tl.say(f"[user-path]   served by brokerId: {res['servedBy']}")
            assert res["consumed"] == MESSAGES and set(res["bodies"]) == acked
            assert res["servedBy"].get("1", 0) > 0, f"never redirected: {res['servedBy']}"
            c.kubectl(
                "-n",
                ns,
                "patch",
                "bg",
                name,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"readPolicy": {"accessMessageInMemoryMaxRatio": None}}}),
            )

        with tl.step("delete the master pod -> Ready again, slave rewired, nothing lost"):
            old_uid = pod_uid(c, ns, master)
            old_address = c.status(ns, name)["master"]["address"]
            c.kubectl("-n", ns, "delete", "pod", master, "--wait=false")
            eventually(
                lambda: pod_uid(c, ns, master) not in (None, old_uid) and pod_ready(c, ns, master),
                180,
                "a new master pod Ready",
            )
            eventually(
                lambda: (
                    (st := c.status(ns, name))["master"]["address"] != old_address
                    and in_sync(st, 1)
                ),
                120,
                "Ready (status of the new master pod) with the slave reconnected and in sync",
            )
            # the slave's own view: connected to the master's stable address
            slave_view = c.client(ns, client, "status", "--broker", slave_addr[1])["slave"]
            assert slave_view["connected"], slave_view
            assert slave_view["masterAddress"].startswith(f"{master}.{name}-master."), slave_view
            on_master = c.client(ns, client, "read", "--broker", master_addr, "--topic", TOPIC)
            lost = acked - set(on_master["bodies"])
            assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
            res = c.client(
                ns,
                client,
                "produce",
                "--namesrv",
                namesrv,
                "--topic",
                TOPIC,
                "--count",
                str(MORE),
                "--start",
                str(MESSAGES),
            )
            assert res["errorCount"] == 0 and len(res["acked"]) == MORE, res
            acked |= {f"m-{i}" for i in res["acked"]}

        with tl.step("scale slaves 1 -> 2, the new slave catches up"):
            c.kubectl("-n", ns, "patch", "bg", name, "--type=merge", "-p", '{"spec":{"slaves":2}}')
            eventually(lambda: in_sync(c.status(ns, name), 2), 240, "2/2 slaves in sync")
            on_new = c.client(ns, client, "read", "--broker", slave_addr[2], "--topic", TOPIC)
            assert acked <= set(on_new["bodies"])

        with tl.step("a config change rolls the slaves first, the master last"):
            pods = (master, slave0, slave1)
            before = {p: pod_uid(c, ns, p) for p in pods}
            old_address = c.status(ns, name)["master"]["address"]
            replaced_at: dict[str, float] = {}
            config = dict(group["spec"].get("brokerConfig") or {})
            config["fileReservedTime"] = "47"  # read at startup only: needs a restart
            c.kubectl(
                "-n",
                ns,
                "patch",
                "bg",
                name,
                "--type=merge",
                "-p",
                json.dumps({"spec": {"brokerConfig": config}}),
            )
            t0 = time.monotonic()

            def rolled() -> bool:
                for p in pods:
                    if p not in replaced_at and pod_uid(c, ns, p) not in (None, before[p]):
                        replaced_at[p] = time.monotonic() - t0
                return len(replaced_at) == len(pods)

            eventually(rolled, 420, "every pod replaced", interval=0.25)
            tl.say(f"[user-path]   replaced after (s): {json.dumps(replaced_at)}")
            assert replaced_at[master] > max(replaced_at[slave0], replaced_at[slave1]), replaced_at
            eventually(
                lambda: (
                    (st := c.status(ns, name))["master"]["address"] != old_address
                    and in_sync(st, 2)
                ),
                180,
                "in sync after the roll (status of the new master pod)",
            )
            on_master = c.client(ns, client, "read", "--broker", master_addr, "--topic", TOPIC)
            assert acked <= set(on_master["bodies"])

        with tl.step("delete the BrokerGroup -> children and PVCs (per policy) gone"):
            c.kubectl("-n", ns, "delete", "pod", client, "--wait=false")
            c.kubectl("-n", ns, "delete", "bg", name, "--timeout=120s")
            eventually(
                lambda: not group_children(c, ns, name) or None,
                180,
                "the group's children garbage-collected",
            )
            policy_deleted = group["spec"]["storage"]["retentionPolicy"]["whenDeleted"]

            def pvcs() -> set[str]:
                items = c.json("-n", ns, "get", "pvc", "-l", f"brokergroup.io/group={name}")
                return {p["metadata"]["name"] for p in items["items"]}

            if policy_deleted == "Delete":
                eventually(lambda: not pvcs() or None, 120, "the PVCs deleted (whenDeleted)")
            else:
                assert pvcs() == {f"store-{master}", f"store-{slave0}", f"store-{slave1}"}
                c.kubectl("-n", ns, "delete", "pvc", "-l", f"brokergroup.io/group={name}")

        with tl.step("helm uninstall leaves nothing behind"):
            c.helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "120s")
            eventually(
                lambda: not release_leftovers(c, ns, release) or None,
                60,
                "nothing of the release left",
            )
            assert not c.json("-n", ns, "get", "bg")["items"]
            left = c.json("-n", ns, "get", "pods,statefulsets,services,pvc")["items"]
            assert not left, [f"{i['kind']}/{i['metadata']['name']}" for i in left]
            # the CRD stays (helm never deletes CRDs); whether it was here before is logged
            tl.say(f"[user-path]   CRD present before the test: {crd_existed} (kept by helm)")
        ok = True
    finally:
        tl.say(tl.table())
        if not ok:
            tl.say(diagnostics(c, ns, release))
            if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
                # groups first: their finalizer needs the operator to go away
                c.kubectl("-n", ns, "delete", "bg", "--all", "--timeout=90s", check=False)
                c.helm("uninstall", release, "--namespace", ns, check=False)


EXAMPLES = {"sync-1-slave.yaml": 1, "async-2-slaves.yaml": 2, "read-policy-auto.yaml": 2}


def test_examples_apply_cleanly(
    cluster: Cluster,
    namespace: str,
    broker_image: str,
    operator_image: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SYNC with 1 slave, ASYNC with 2 slaves, read policy auto: applied side by side, each
    becomes Ready with every slave in sync; `auto` picks an in-sync slave."""
    c, ns = cluster, namespace
    release = f"bg{ns[-6:]}"
    tl = Timeline(capsys)
    groups = {f: example(f, broker_image) for f in EXAMPLES}
    ok = False
    try:
        with tl.step("helm install (namespaced mode)"):
            c.install_operator(release, ns, operator_image, "--set", "watch.mode=namespaced")
        with tl.step(f"apply {', '.join(EXAMPLES)} -> all Ready"):
            for obj in groups.values():
                c.apply(ns, obj)
            for f, obj in groups.items():
                name, slaves = obj["metadata"]["name"], EXAMPLES[f]

                def ready(name: str = name, slaves: int = slaves) -> bool:
                    return in_sync(c.status(ns, name), slaves)

                eventually(ready, READY_BOUND, f"{f} ({name}) Ready, {slaves} slave(s) in sync")
            table = c.kubectl("-n", ns, "get", "bg", "-o", "wide")
            tl.say(table.rstrip())
        auto = c.status(ns, groups["read-policy-auto.yaml"]["metadata"]["name"])["readPolicy"]
        assert auto["mode"] == "auto" and auto["whichBrokerWhenConsumeSlowly"] in (1, 2), auto
        assert auto["slaveReadEnable"] is True and auto["applied"] is True
        modes = {f: c.group(ns, o["metadata"]["name"])["spec"] for f, o in groups.items()}
        assert modes["async-2-slaves.yaml"]["replicationMode"] == "ASYNC"
        assert modes["sync-1-slave.yaml"]["replicationMode"] == "SYNC"
        with tl.step("delete the groups, helm uninstall"):
            c.kubectl("-n", ns, "delete", "bg", "--all", "--timeout=120s")
            c.helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "120s")
            # PVCs of the groups whose policy is Retain stay; the namespace takes them
        ok = True
    finally:
        tl.say(tl.table())
        if not ok:
            tl.say(diagnostics(c, ns, release))
            if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
                c.kubectl("-n", ns, "delete", "bg", "--all", "--timeout=90s", check=False)
                c.helm("uninstall", release, "--namespace", ns, check=False)
