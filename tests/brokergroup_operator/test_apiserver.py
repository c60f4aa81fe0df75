"""The CRD and the operator against a real kube-apiserver + etcd (no kubelet: no pod runs).

What this proves: the schema, defaults and CEL rules as the apiserver enforces them (bad specs
are refused with a message naming the field), and the operator, running under exactly the RBAC
of operator/deploy/rbac.yaml, applies every child with the right wiring, scales, reports
SpecValid=False with an Event for what the schema cannot catch, and never crash-loops.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import kubeapi

ROOT = kubeapi.ROOT
CRD = ROOT / "crds" / "brokergroup.io_brokergroups.yaml"
PEERING_CRD = ROOT / "crds" / "kopf.dev_peerings.yaml"
RBAC = ROOT / "operator" / "deploy" / "rbac.yaml"
NS = "bgtest"

# the binaries of `make cluster-build`: `make unit` runs these tests after building them
pytestmark = pytest.mark.cluster_bins


# ConfigMap, 4 Services (master, slave, client, namesrv), 2 StatefulSets, PodDisruptionBudget
CHILDREN = 8


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeapi.ApiServer]:
    server = kubeapi.start(tmp_path_factory.mktemp("apiserver"), kubeapi.require_bin_dir())
    try:
        server.kubectl("apply", "-f", str(CRD))
        server.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/brokergroups.brokergroup.io",
            "--timeout=30s",
        )
        # the operator's ClusterRole, bound to the token user the operator runs as
        rbac = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
        # the chart adds this rule when it turns BROKERGROUP_NETWORK_POLICY on, as here
        role = next(d for d in rbac if d["kind"] == "ClusterRole")
        role["rules"].append(
            {
                "apiGroups": ["networking.k8s.io"],
                "resources": ["networkpolicies"],
                "verbs": ["list", "watch", "create", "patch"],
            }
        )
        binding = next(d for d in rbac if d["kind"] == "ClusterRoleBinding")
        binding["subjects"] = [
            {
                "kind": "User",
                "name": "brokergroup-operator",
                "apiGroup": "rbac.authorization.k8s.io",
            }
        ]
        server.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
        server.kubectl("create", "namespace", NS)
        yield server
    finally:
        server.stop()


def group(name: str = "bg", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"image": "habroker:test", **spec},
    }


def apply(api: kubeapi.ApiServer, obj: dict[str, Any], *extra: str, check: bool = True):
    return api.kubectl("apply", *extra, "-f", "-", stdin=json.dumps(obj), check=check)


def get(api: kubeapi.ApiServer, *what: str) -> dict[str, Any]:
    out = api.kubectl("get", "-n", NS, *what, "-o", "json")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def eventually(check: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (AssertionError, KeyError, IndexError, json.JSONDecodeError) as exc:
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what or check}: last={last!r}")


# -- schema: defaults and the bad-spec table ------------------------------------------------
def test_defaults_are_applied(api: kubeapi.ApiServer) -> None:
    out = apply(api, group("defaults"), "--dry-run=server", "-o", "json")
    spec = json.loads(out.stdout)["spec"]
    assert spec["replicationMode"] == "ASYNC"
    assert spec["flushDiskType"] == "ASYNC_FLUSH"
    assert spec["slaves"] == 1
    assert spec["storage"] == {
        "size": "1Gi",
        "ephemeral": False,
        "retentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
    }
    assert spec["readPolicy"] == {
        "slaveReadEnable": False,
        "whichBrokerWhenConsumeSlowly": "auto",
        "accessMessageInMemoryMaxRatio": 40,
    }
    assert spec["ports"] == {
        "client": 10911,
        "ha": 10912,
        "http": 10913,
        "external": 10915,
        "dledger": 40911,
    }
    assert "replicas" not in spec  # DLEDGER only (3 when absent)


BAD_SPECS = [
    # (spec overrides, text the apiserver's message must contain)
    ({"replicationMode": "QUORUM"}, "spec.replicationMode"),
    ({"flushDiskType": "SOMETIMES"}, "spec.flushDiskType"),
    ({"slaves": -1}, "spec.slaves"),
    ({"slaves": 17}, "spec.slaves"),
    ({"replicationMode": "SYNC", "slaves": 0}, "spec.slaves"),
    ({"image": ""}, "spec.image"),
    ({"storage": {"size": "lots"}}, "spec.storage.size"),
    (
        {"storage": {"retentionPolicy": {"whenScaled": "Maybe"}}},
        "spec.storage.retentionPolicy.whenScaled",
    ),
    ({"resources": {"limits": {"memory": "a lot"}}}, "spec.resources.limits.memory"),
    (
        {"readPolicy": {"accessMessageInMemoryMaxRatio": 101}},
        "spec.readPolicy.accessMessageInMemoryMaxRatio",
    ),
    (
        {"readPolicy": {"whichBrokerWhenConsumeSlowly": "best"}},
        "spec.readPolicy.whichBrokerWhenConsumeSlowly",
    ),
    (
        {"readPolicy": {"whichBrokerWhenConsumeSlowly": -1}},
        "spec.readPolicy.whichBrokerWhenConsumeSlowly",
    ),
    (
        {"slaves": 1, "readPolicy": {"whichBrokerWhenConsumeSlowly": 2}},
        "spec.readPolicy.whichBrokerWhenConsumeSlowly",
    ),
    ({"readPolicy": {"slaveReadEnable": "yes"}}, "spec.readPolicy.slaveReadEnable"),
    ({"brokerConfig": {"brokerId": "3"}}, "spec.brokerConfig"),
    ({"brokerConfig": {"haMasterAddress": "x:1"}}, "haMasterAddress"),
    ({"brokerConfig": {"fileReservedTime": 48}}, "spec.brokerConfig.fileReservedTime"),
    ({"ports": {"client": 70000}}, "spec.ports.client"),
    ({"ports": {"client": 10912, "ha": 10912}}, "spec.ports"),
    ({"ports": {"client": 10913}}, "spec.ports"),  # the http port's default
    ({"ports": {"ha": 20000, "http": 20000}}, "spec.ports"),
    ({"ports": {"http": 0}}, "spec.ports.http"),
    ({"brokerConfig": {"httpListenPort": "1"}}, "httpListenPort"),
    ({"unknownField": 1}, "unknownField"),
    ({"replicationMode": "DLEDGER", "replicas": 4}, "spec.replicas must be 3 or 5"),
    ({"replicationMode": "DLEDGER", "replicas": 1}, "spec.replicas"),
    ({"replicationMode": "DLEDGER", "replicas": 7}, "spec.replicas"),
    (
        {"replicationMode": "DLEDGER", "failover": {"enabled": True}},
        "spec.failover.enabled must be false when spec.replicationMode is DLEDGER",
    ),
    (
        {"replicationMode": "DLEDGER", "readPolicy": {"whichBrokerWhenConsumeSlowly": 0}},
        "must be auto when spec.replicationMode is DLEDGER",
    ),
    (
        {"replicationMode": "DLEDGER", "ports": {"dledger": 10911}},
        "spec.ports.dledger must differ",
    ),
    ({"brokerConfig": {"dLegerPeers": "n0-a:1"}}, "dLegerPeers"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD_SPECS, ids=[f for _, f in BAD_SPECS])
def test_bad_specs_are_rejected_naming_the_field(
    api: kubeapi.ApiServer, overrides: dict[str, Any], field: str
) -> None:
    result = apply(api, group("bad", **overrides), "--dry-run=server", check=False)
    assert result.returncode != 0, f"accepted: {overrides}"
    assert field in result.stderr, result.stderr


def test_bad_names_are_rejected(api: kubeapi.ApiServer) -> None:
    for name in ("x" * 46, "1group"):
        result = apply(api, group(name), "--dry-run=server", check=False)
        assert result.returncode != 0, result.stderr
        assert "metadata.name: Invalid value: must be a DNS-1035 label" in result.stderr
        assert "<nil>" not in result.stderr


def test_immutable_storage(api: kubeapi.ApiServer) -> None:
    apply(api, group("immutable", storage={"size": "1Gi"}))
    try:
        apply(api, group("immutable", storage={"size": "2048Mi"}))  # may grow
        result = apply(api, group("immutable", storage={"size": "1Gi"}), check=False)
        assert result.returncode != 0 and "spec.storage.size can only grow" in result.stderr, (
            result.stderr
        )
        result = apply(
            api, group("immutable", storage={"size": "1Gi", "ephemeral": True}), check=False
        )
        assert result.returncode != 0 and "spec.storage.ephemeral" in result.stderr, result.stderr
    finally:
        api.kubectl("delete", "-n", NS, "bg/immutable", "--wait=false")


def test_dledger_groups_keep_their_mode_and_size(api: kubeapi.ApiServer) -> None:
    """CEL transition rules: no switch between DLEDGER and SYNC/ASYNC (either way), replicas
    only 3 or 5 (changing it is a membership change), no kubectl scale on it; a classic group
    still switches between SYNC and ASYNC."""
    apply(api, group("dlfixed", replicationMode="DLEDGER", replicas=3))
    apply(api, group("classic", replicationMode="ASYNC", slaves=1))
    try:
        result = apply(api, group("dlfixed", replicationMode="SYNC", slaves=1), check=False)
        assert result.returncode != 0, result.stdout
        assert "cannot change between DLEDGER and SYNC/ASYNC" in result.stderr, result.stderr
        assert "spec.replicationMode" in result.stderr
        result = apply(api, group("classic", replicationMode="DLEDGER"), check=False)
        assert result.returncode != 0
        assert "cannot change between DLEDGER and SYNC/ASYNC" in result.stderr, result.stderr
        apply(api, group("classic", replicationMode="SYNC", slaves=1))  # still allowed
        apply(api, group("dlfixed", replicationMode="DLEDGER", replicas=5))  # a resize
        result = apply(api, group("dlfixed", replicationMode="DLEDGER", replicas=4), check=False)
        assert result.returncode != 0
        assert "spec.replicas must be 3 or 5" in result.stderr, result.stderr
        apply(api, group("dlfixed", replicationMode="DLEDGER"))  # absent means 3
        out = api.kubectl("scale", "-n", NS, "bg/dlfixed", "--replicas=2", check=False)
        assert out.returncode != 0, out.stdout
        assert "a DLEDGER group is not scaled through spec.slaves" in out.stderr, out.stderr
    finally:
        api.kubectl("delete", "-n", NS, "bg/dlfixed", "bg/classic", "--wait=false")


def test_explain(api: kubeapi.ApiServer) -> None:
    out = api.kubectl("explain", "bg.spec.readPolicy.whichBrokerWhenConsumeSlowly").stdout
    assert "most caught-up in-sync slave" in out


# -- the operator -------------------------------------------------------------------------
OPERATOR_KEY = "operator-key-for-the-apiserver-tests"


@pytest.fixture(scope="module")
def operator_metrics_port() -> int:
    from habroker.local import free_port

    return free_port()


@pytest.fixture(scope="module")
def operator(
    api: kubeapi.ApiServer, operator_metrics_port: int
) -> Iterator[subprocess.Popen[bytes]]:
    log = api.workdir / "logs" / "operator.log"
    key = api.workdir / "operator-key"
    key.write_text(OPERATOR_KEY)
    env = {
        **os.environ,
        "BROKERGROUP_ADMIN_KEY_FILE": str(key),
        "KUBECONFIG": str(api.kubeconfig_for("operator-token")),
        "BROKERGROUP_POLL_INTERVAL": "1",
        "BROKERGROUP_HTTP_TIMEOUT": "0.5",
        "BROKERGROUP_NETWORK_POLICY": "true",
        "BROKERGROUP_METRICS_PORT": str(operator_metrics_port),  # on 127.0.0.1 (the default)
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "brokergroup_operator", "-n", NS, "--verbose"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(log.read_text()[-4000:])


def children(api: kubeapi.ApiServer, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    items = get(
        api,
        "--show-managed-fields",
        "configmap,service,statefulset,poddisruptionbudget",
        "-l",
        f"brokergroup.io/group={name}",
    )
    return {(i["kind"], i["metadata"]["name"]): i for i in items["items"]}


def test_operator_applies_children_and_reports(api: kubeapi.ApiServer, operator: Any) -> None:
    apply(
        api, group("orders", replicationMode="SYNC", slaves=2, readPolicy={"slaveReadEnable": True})
    )
    found = eventually(
        lambda: len(children(api, "orders")) == CHILDREN and children(api, "orders"),
        what=f"{CHILDREN} children",
    )
    assert ("Service", "orders-namesrv") in found
    uid = get(api, "bg/orders")["metadata"]["uid"]
    for item in found.values():
        (ref,) = item["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["controller"] is True
        assert "brokergroup-operator" in json.dumps(item["metadata"].get("managedFields"))
    slave = found[("StatefulSet", "orders-slave")]
    assert slave["spec"]["replicas"] == 2
    container = slave["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (
        env["HABROKER_haMasterAddress"]
        == f"orders-master-0.orders-master.{NS}.svc.cluster.local:10912"
    )
    assert (
        env["HABROKER_masterHttpAddress"]
        == f"orders-master-0.orders-master.{NS}.svc.cluster.local:10913"
    )
    client_ports = found[("Service", "orders")]["spec"]["ports"]
    assert {p["name"]: p["port"] for p in client_ports} == {"client": 10911, "http": 10913}
    master = found[("StatefulSet", "orders-master")]
    env = {
        e["name"]: e.get("value")
        for e in master["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["HABROKER_brokerRole"] == "SYNC_MASTER"
    conf = found[("ConfigMap", "orders-config")]["data"]["broker.conf"]
    assert "slaveReadEnable=true" in conf and "bindAddress=0.0.0.0" in conf

    # no pod can run here: the status says so, with reasons
    def reported() -> dict[str, Any]:
        status = get(api, "bg/orders").get("status") or {}
        return status if status.get("phase") else {}

    status = eventually(reported, what="status")
    assert status["phase"] == "Pending"
    assert status["inSyncSlaves"] == "0/2"
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["Ready"]["status"] == "False" and cond["Ready"]["reason"] == "MasterUnreachable"
    assert cond["SpecValid"]["status"] == "True"
    assert cond["Reconciled"]["reason"] == "ChildrenApplied"
    assert [s["brokerId"] for s in status["slaves"]] == [1, 2]
    assert status["readPolicy"]["whichBrokerWhenConsumeSlowly"] == 0  # auto, nothing in sync
    # the printer columns resolve
    table = api.kubectl("get", "-n", NS, "bg", "orders").stdout
    assert "SYNC" in table and "0/2" in table

    # status is only patched on change: resourceVersion holds still while nothing changes
    rv = get(api, "bg/orders")["metadata"]["resourceVersion"]
    time.sleep(3)
    assert get(api, "bg/orders")["metadata"]["resourceVersion"] == rv


def test_operator_metrics_report_the_groups_it_sweeps(
    api: kubeapi.ApiServer, operator: Any, operator_metrics_port: int
) -> None:
    """The operator process serves /metrics, and its sweeps of a group show there (no pod runs
    here: the master is unreachable, no broker is up, the group is Pending)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    apply(api, group("observed", slaves=1))
    labels = {"namespace": NS, "brokergroup": "observed"}

    def scraped() -> dict[str, float]:
        url = f"http://127.0.0.1:{operator_metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        values = {
            s.name: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.labels == labels or (not s.labels and f.type == "counter")
        }
        return values if "brokergroup_operator_group_slaves" in values else {}

    values = eventually(scraped, what="the group in the operator's /metrics")
    assert values["brokergroup_operator_sweeps_total"] >= 1
    assert values["brokergroup_operator_group_master_reachable"] == 0
    assert values["brokergroup_operator_group_brokers_up"] == 0
    assert values["brokergroup_operator_group_slaves"] == 1
    assert values["brokergroup_operator_group_ready"] == 0


def test_operator_scales_and_reapplies(api: kubeapi.ApiServer, operator: Any) -> None:
    apply(api, group("scale", slaves=1))
    eventually(
        lambda: children(api, "scale")[("StatefulSet", "scale-slave")]["spec"]["replicas"] == 1
    )
    apply(api, group("scale", slaves=3))
    eventually(
        lambda: children(api, "scale")[("StatefulSet", "scale-slave")]["spec"]["replicas"] == 3,
        what="scale up",
    )
    eventually(lambda: len(get(api, "bg/scale")["status"]["slaves"]) == 3, what="3 slave entries")
    apply(api, group("scale", slaves=0))
    eventually(
        lambda: children(api, "scale")[("StatefulSet", "scale-slave")]["spec"]["replicas"] == 0,
        what="scale down",
    )


def repaired_events(api: kubeapi.ApiServer, group_name: str) -> list[str]:
    return [
        e["message"]
        for e in get(api, "events")["items"]
        if e["involvedObject"]["name"] == group_name and e["reason"] == "ChildRepaired"
    ]


def test_drift_is_repaired(api: kubeapi.ApiServer, operator: Any) -> None:
    """Every kind of child, deleted or edited by hand, is restored at once (the watch, not the
    status poll: the checks allow less than the 30 s fallback), each with a ChildRepaired Event
    naming it."""
    apply(api, group("drift", slaves=2))
    eventually(lambda: len(children(api, "drift")) == CHILDREN, what="children")
    # a restart asked earlier: a repaired child keeps it (or repairing would roll the brokers)
    api.kubectl("annotate", "-n", NS, "bg/drift", "brokergroup.io/restart=r1")
    eventually(
        lambda: (
            children(api, "drift")[("StatefulSet", "drift-slave")]["spec"]["template"]["metadata"][
                "annotations"
            ].get("brokergroup.io/restart")
            == "r1"
        ),
        what="the restart annotation in the pod templates",
    )
    eventually(lambda: get(api, "networkpolicy/drift-brokers"), what="the NetworkPolicy")
    deleted = [
        ("ConfigMap", "configmap/drift-config"),
        ("Service", "service/drift"),
        ("Service", "service/drift-namesrv"),
        ("Service", "service/drift-master"),
        ("PodDisruptionBudget", "poddisruptionbudget/drift"),
        ("NetworkPolicy", "networkpolicy/drift-brokers"),
        ("StatefulSet", "statefulset/drift-slave"),
    ]
    for kind, ref in deleted:
        uid = get(api, ref)["metadata"]["uid"]
        api.kubectl("delete", "-n", NS, ref, "--wait=true")
        back = eventually(
            lambda ref=ref, uid=uid: (obj := get(api, ref))["metadata"]["uid"] != uid and obj,
            timeout=15,
            what=f"{ref} recreated",
        )
        assert back["metadata"]["ownerReferences"][0]["name"] == "drift"
        name = ref.split("/")[1]
        eventually(
            lambda kind=kind, name=name: any(
                m.startswith(f"{kind} {name} was deleted") for m in repaired_events(api, "drift")
            ),
            timeout=15,
            what=f"ChildRepaired for {ref}",
        )

    # edits: the overwritten broker.conf, a StatefulSet scaled to 0, a retargeted Service,
    # a loosened PDB, an opened NetworkPolicy
    conf = get(api, "configmap/drift-config")["data"]["broker.conf"]
    edits = [
        ("configmap/drift-config", {"data": {"broker.conf": "bindAddress=127.0.0.1\n"}}),
        ("service/drift", {"spec": {"selector": {"app.kubernetes.io/component": "slave"}}}),
        ("poddisruptionbudget/drift", {"spec": {"maxUnavailable": 3}}),
        ("networkpolicy/drift-brokers", {"spec": {"ingress": [{}]}}),
    ]
    for ref, body in edits:
        api.kubectl("patch", "-n", NS, ref, "--type=merge", "-p", json.dumps(body))
    api.kubectl("scale", "-n", NS, "statefulset/drift-slave", "--replicas=0")
    api.kubectl("scale", "-n", NS, "statefulset/drift-master", "--replicas=0")

    def restored() -> dict[str, bool]:
        kids = children(api, "drift")
        policy = get(api, "networkpolicy/drift-brokers")
        return {
            "config": kids[("ConfigMap", "drift-config")]["data"]["broker.conf"] == conf,
            "selector": kids[("Service", "drift")]["spec"]["selector"]
            == {"brokergroup.io/group": "drift", "app.kubernetes.io/component": "master"},
            "pdb": kids[("PodDisruptionBudget", "drift")]["spec"]["maxUnavailable"] == 1,
            "slaves": kids[("StatefulSet", "drift-slave")]["spec"]["replicas"] == 2,
            "master": kids[("StatefulSet", "drift-master")]["spec"]["replicas"] == 1,
            "policy": len(policy["spec"]["ingress"]) == 2,
        }

    eventually(lambda: all((r := restored()).values()) or r, timeout=15, what="edits reverted")
    for sts in ("drift-master", "drift-slave"):
        template = children(api, "drift")[("StatefulSet", sts)]["spec"]["template"]
        assert template["metadata"]["annotations"]["brokergroup.io/restart"] == "r1", sts
    messages = repaired_events(api, "drift")
    for kind, name, field in [
        ("ConfigMap", "drift-config", "data.broker.conf"),
        ("Service", "drift", "spec.selector"),
        ("PodDisruptionBudget", "drift", "spec.maxUnavailable"),
        ("StatefulSet", "drift-slave", "spec.replicas"),
        ("StatefulSet", "drift-master", "spec.replicas"),
    ]:
        assert any(
            m.startswith(f"{kind} {name} was changed outside the operator") and field in m
            for m in messages
        ), (kind, name, messages)

    # what the operator does not own is not drift: a label of someone else's stays, no Event
    before = len(repaired_events(api, "drift"))
    api.kubectl("label", "-n", NS, "service/drift", "team=payments")
    time.sleep(3)
    assert get(api, "service/drift")["metadata"]["labels"]["team"] == "payments"
    assert len(repaired_events(api, "drift")) == before


def bound_claim(api: kubeapi.ApiServer, group_name: str, pod: str, storage_class: str) -> str:
    """What the StatefulSet controller and a provisioner would make (neither runs here): a
    claim with the group's labels, bound to a volume of the class."""
    claim = f"store-{pod}"
    component = "master" if "-master-" in pod else "slave"
    api.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pv-{NS}-{claim}"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class, "hostPath": {"path": f"/nonexistent/{claim}"},
            "claimRef": {"namespace": NS, "name": claim},
        },
    }))  # fmt: skip
    apply(api, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": NS, "labels": {
            "app.kubernetes.io/managed-by": "brokergroup-operator",
            "brokergroup.io/group": group_name, "app.kubernetes.io/component": component,
        }},
        "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
            "volumeName": f"pv-{NS}-{claim}", "resources": {"requests": {"storage": "1Gi"}},
        },
    })  # fmt: skip
    set_claim_status(api, claim, "1Gi")
    return claim


def set_claim_status(api: kubeapi.ApiServer, claim: str, capacity: str) -> None:
    status = {"status": {"phase": "Bound", "capacity": {"storage": capacity}}}
    api.kubectl(
        "patch", "-n", NS, f"pvc/{claim}", "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


def condition(api: kubeapi.ApiServer, name: str, ctype: str) -> dict[str, Any]:
    status = get(api, f"bg/{name}").get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def test_volume_expansion(api: kubeapi.ApiServer, operator: Any) -> None:
    """A grown spec.storage.size is asked of every bound claim (the StatefulSets keep their
    immutable template), the condition follows the claims, and a StorageClass without
    expansion is reported with the apiserver's refusal."""
    for name, grows in (("grows", True), ("fixed", False)):
        api.kubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": "example.com/none",
            "allowVolumeExpansion": grows,
        }))  # fmt: skip
    apply(api, group("expand", slaves=1, storage={"size": "1Gi", "storageClassName": "grows"}))
    eventually(lambda: len(children(api, "expand")) == CHILDREN, what="children")
    claims = [bound_claim(api, "expand", p, "grows") for p in ("expand-master-0", "expand-slave-0")]
    eventually(
        lambda: condition(api, "expand", "StorageExpanded").get("reason") == "AtRequestedSize",
        what="StorageExpanded at 1Gi",
    )
    apply(api, group("expand", slaves=1, storage={"size": "2Gi", "storageClassName": "grows"}))
    for claim in claims:
        eventually(
            lambda claim=claim: (
                get(api, f"pvc/{claim}")["spec"]["resources"]["requests"]["storage"] == "2Gi"
            ),
            what=f"{claim} asked for 2Gi",
        )
    cond = eventually(
        lambda: (
            (c := condition(api, "expand", "StorageExpanded")).get("reason") == "Expanding" and c
        ),
        what="Expanding",
    )
    assert "store-expand-master-0 1Gi" in cond["message"]
    kids = children(api, "expand")
    for sts in ("expand-master", "expand-slave"):
        template = kids[("StatefulSet", sts)]["spec"]["volumeClaimTemplates"][0]
        assert template["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert condition(api, "expand", "Reconciled")["status"] == "True"
    for claim in claims:  # the resizer's work (no CSI driver here)
        set_claim_status(api, claim, "2Gi")
    eventually(
        lambda: condition(api, "expand", "StorageExpanded").get("reason") == "AtRequestedSize",
        what="StorageExpanded at 2Gi",
    )

    apply(api, group("stuck", slaves=0, storage={"size": "1Gi", "storageClassName": "fixed"}))
    eventually(lambda: len(children(api, "stuck")) == CHILDREN, what="children")
    claim = bound_claim(api, "stuck", "stuck-master-0", "fixed")
    apply(api, group("stuck", slaves=0, storage={"size": "3Gi", "storageClassName": "fixed"}))
    cond = eventually(
        lambda: (
            (c := condition(api, "stuck", "StorageExpanded")).get("reason") == "ExpansionRefused"
            and c
        ),
        what="ExpansionRefused",
    )
    assert claim in cond["message"] and "must support resize" in cond["message"], cond
    assert get(api, f"pvc/{claim}")["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_external_access_services(api: kubeapi.ApiServer, operator: Any) -> None:
    """One NodePort Service per broker (the apiserver allocates the node ports); scaling
    down deletes the removed slave's, turning external access off deletes them all."""

    def doors() -> dict[str, dict[str, Any]]:
        items = get(api, "services", "-l", "app.kubernetes.io/component=external,"
                    "brokergroup.io/group=outside")["items"]  # fmt: skip
        return {i["metadata"]["name"]: i for i in items}

    spec = {"slaves": 2, "externalAccess": {"type": "NodePort"}}
    apply(api, group("outside", **spec))
    found = eventually(lambda: len(d := doors()) == 3 and d, what="three external Services")
    for name, svc in found.items():
        assert svc["spec"]["ports"][0]["nodePort"] > 0, svc
        assert svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] + "-external" == name
    conf = get(api, "configmap/outside-config")["data"]["broker.conf"]
    assert "externalListenPort=10915" in conf.splitlines()
    apply(api, group("outside", **{**spec, "slaves": 1}))
    eventually(
        lambda: sorted(doors()) == ["outside-master-0-external", "outside-slave-0-external"],
        what="the removed slave's Service deleted",
    )
    apply(api, group("outside", slaves=1))
    eventually(lambda: not doors(), what="every external Service deleted")
    result = apply(api, group("outside", slaves=1, externalAccess={"type": "Ingress"}), check=False)
    assert result.returncode != 0 and "spec.externalAccess.type" in result.stderr


def test_dledger_external_access_services(api: kubeapi.ApiServer, operator: Any) -> None:
    """A DLEDGER group's peers get one external Service each (the apiserver accepts the spec:
    brokerIds follow the leader, and the peers map them); off again, they go."""

    def doors() -> list[str]:
        items = get(api, "services", "-l", "app.kubernetes.io/component=external,"
                    "brokergroup.io/group=quorum-out")["items"]  # fmt: skip
        return sorted(i["metadata"]["name"] for i in items)

    spec = {"replicationMode": "DLEDGER", "replicas": 3}
    apply(api, group("quorum-out", **spec, externalAccess={"type": "NodePort"}))
    want = [f"quorum-out-peers-{i}-external" for i in range(3)]
    eventually(lambda: doors() == want, what="an external Service per peer")
    conf = get(api, "configmap/quorum-out-config")["data"]["broker.conf"]
    assert "externalListenPort=10915" in conf.splitlines()
    apply(api, group("quorum-out", **spec))
    eventually(lambda: not doors(), what="every external Service deleted")


def test_what_the_schema_cannot_catch_becomes_a_condition(
    api: kubeapi.ApiServer, operator: Any
) -> None:
    apply(api, group("typo", brokerConfig={"haMaxGapNotInSnyc": "1"}))

    def invalid() -> dict[str, Any]:
        status = get(api, "bg/typo").get("status") or {}
        return status if status.get("phase") == "Invalid" else {}

    status = eventually(invalid, what="phase Invalid")
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["SpecValid"]["reason"] == "InvalidBrokerConfig"
    assert "did you mean haMaxGapNotInSync" in cond["SpecValid"]["message"]
    assert cond["SpecValid"]["message"].count("spec.brokerConfig") == 1  # said once
    events = eventually(
        lambda: [
            e
            for e in get(api, "events")["items"]
            if e["involvedObject"]["name"] == "typo" and e["reason"] == "InvalidBrokerConfig"
        ],
        what="InvalidBrokerConfig event",
    )
    assert "spec.brokerConfig" in events[0]["message"]
    assert not children(api, "typo")  # nothing half-built
    # fixing the spec recovers without restarting anything
    apply(api, group("typo", brokerConfig={"haMaxGapNotInSync": "1048576"}))
    eventually(lambda: len(children(api, "typo")) == CHILDREN, what="children after the fix")
    eventually(lambda: get(api, "bg/typo")["status"]["phase"] != "Invalid", what="valid again")
    assert operator.poll() is None  # still running: no crash loop


def test_rocketmq_keys_habroker_lacks_are_accepted_with_a_warning_event(
    api: kubeapi.ApiServer, operator: Any
) -> None:
    apply(api, group("javaconf", brokerConfig={"sendMessageThreadPoolNums": "16"}))
    eventually(lambda: len(children(api, "javaconf")) == CHILDREN, what="children")
    events = eventually(
        lambda: [
            e
            for e in get(api, "events")["items"]
            if e["involvedObject"]["name"] == "javaconf"
            and e["reason"] == "BrokerConfigNotImplemented"
        ],
        what="BrokerConfigNotImplemented event",
    )
    assert events[0]["type"] == "Warning"
    assert "sendMessageThreadPoolNums" in events[0]["message"]
    conf = get(api, "configmap/javaconf-config")["data"]["broker.conf"]
    assert "sendMessageThreadPoolNums=16" in conf.splitlines()


def test_delete_is_not_blocked(api: kubeapi.ApiServer, operator: Any) -> None:
    apply(api, group("gone"))
    eventually(lambda: children(api, "gone"), what="children")
    eventually(
        lambda: "brokergroup.io/finalizer" in get(api, "bg/gone")["metadata"].get("finalizers", []),
        what="finalizer",
    )
    api.kubectl("delete", "-n", NS, "bg/gone", "--timeout=30s")
    # (children are removed by the garbage collector, which runs in kube-controller-manager:
    # not here; the on-cluster e2e test checks that.)


def test_failover_group_records_its_assignment_and_waits_without_an_eligible_slave(
    api: kubeapi.ApiServer, operator: Any
) -> None:
    """No pod can run here: the failover daemon records the default assignment through the
    status subresource (under the operator's RBAC), says no slave can be promoted, and spends
    no epoch on it however long the master stays away."""
    apply(api, group("ledger", replicationMode="SYNC", slaves=2,
                     failover={"enabled": True, "masterLostSeconds": 1}))  # fmt: skip
    found = eventually(
        lambda: len(children(api, "ledger")) == CHILDREN and children(api, "ledger"),
        what="children",
    )
    assert found[("Service", "ledger")]["spec"]["selector"]["brokergroup.io/role"] == "master"
    assert (
        "enableControllerMode=true" in found[("ConfigMap", "ledger-config")]["data"]["broker.conf"]
    )

    def waiting() -> dict[str, Any]:
        status = get(api, "bg/ledger").get("status") or {}
        cond = {c["type"]: c for c in status.get("conditions") or []}
        return status if cond.get("Failover", {}).get("reason") == "NoEligibleSlave" else {}

    status = eventually(waiting, what="the Failover condition")
    assert status["failover"] == {
        "epoch": 1,
        "master": "ledger-master-0",
        "brokerIds": {"ledger-master-0": 0, "ledger-slave-0": 1, "ledger-slave-1": 2},
        "inSyncSet": [],
    }
    time.sleep(3)
    assert get(api, "bg/ledger")["status"]["failover"]["epoch"] == 1
    table = api.kubectl("get", "-n", NS, "bg", "ledger").stdout
    assert "MASTER" in table.splitlines()[0]
    api.kubectl("delete", "-n", NS, "bg/ledger", "--timeout=30s")


def test_dledger_group_children_and_status(api: kubeapi.ApiServer, operator: Any) -> None:
    """A DLEDGER group of 5: one peers StatefulSet whose pods find each other by stable DNS,
    the client Service on the leader's label; no pod runs here, so no leader, and the status
    says so (NoLeader, the LEADER and TERM columns exist)."""
    apply(api, group("quorum", replicationMode="DLEDGER", replicas=5))
    found = eventually(
        lambda: len(children(api, "quorum")) == 6 and children(api, "quorum"),
        what="6 children",
    )
    assert set(found) == {
        ("ConfigMap", "quorum-config"),
        ("Service", "quorum-peers"),
        ("Service", "quorum"),
        ("Service", "quorum-namesrv"),
        ("StatefulSet", "quorum-peers"),
        ("PodDisruptionBudget", "quorum"),
    }
    sts = found[("StatefulSet", "quorum-peers")]
    assert sts["spec"]["replicas"] == 5
    assert sts["metadata"]["annotations"]["brokergroup.io/dledger-members"] == "5"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    conf = found[("ConfigMap", "quorum-config")]["data"]["broker.conf"]
    (line,) = [x for x in conf.splitlines() if x.startswith("dLegerPeers=")]
    peers = line.partition("=")[2].replace("\\", "").split(";")
    assert peers[4] == f"n4-quorum-peers-4.quorum-peers.{NS}.svc.cluster.local:40911"
    assert "HABROKER_dLegerSelfId=n${HOSTNAME##*-}" in container["command"][-1]
    assert found[("Service", "quorum")]["spec"]["selector"] == {
        "brokergroup.io/group": "quorum",
        "brokergroup.io/role": "master",
    }
    conf = found[("ConfigMap", "quorum-config")]["data"]["broker.conf"]
    assert "enableDLegerCommitLog=true" in conf.splitlines()

    def reported() -> dict[str, Any]:
        status = get(api, "bg/quorum").get("status") or {}
        return status if status.get("dledger") else {}

    status = eventually(reported, what="status.dledger")
    assert [p["pod"] for p in status["dledger"]["peers"]] == [f"quorum-peers-{i}" for i in range(5)]
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["Ready"]["reason"] == "NoLeader"
    assert status["phase"] == "Pending"
    header = api.kubectl("get", "-n", NS, "bg", "quorum").stdout.splitlines()[0]
    assert "LEADER" in header and "TERM" in header
    api.kubectl("delete", "-n", NS, "bg/quorum", "--timeout=30s")


def test_template_reaches_the_statefulsets(api: kubeapi.ApiServer, operator: Any) -> None:
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    apply(
        api,
        group(
            "placed",
            slaves=2,
            template={
                "pod": {
                    "metadata": {"labels": {"team": "mq"}},
                    "tolerations": [toleration],
                    "securityContext": {"runAsUser": 20000},
                },
                "slave": {"nodeSelector": {"kubernetes.io/hostname": "node-b"}},
            },
        ),
    )
    found = eventually(
        lambda: len(children(api, "placed")) == CHILDREN and children(api, "placed"),
        what="children",
    )
    master = found[("StatefulSet", "placed-master")]["spec"]["template"]
    slave = found[("StatefulSet", "placed-slave")]["spec"]["template"]
    for pod in (master, slave):
        assert pod["metadata"]["labels"]["team"] == "mq"
        assert pod["spec"]["tolerations"] == [toleration]
        assert pod["spec"]["securityContext"]["runAsUser"] == 20000
        assert pod["spec"]["securityContext"]["fsGroup"] == 10001
        anti = pod["spec"]["affinity"]["podAntiAffinity"]
        (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert slave["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert "nodeSelector" not in master["spec"]

    # the schema refuses the operator's own labels, naming the field
    bad = group(
        "placed", template={"master": {"metadata": {"labels": {"brokergroup.io/role": "x"}}}}
    )
    out = apply(api, bad, check=False)
    assert out.returncode != 0
    assert "spec.template.master.metadata.labels" in out.stderr


def test_kubectl_scale_sets_the_slaves(api: kubeapi.ApiServer, operator: Any) -> None:
    apply(api, group("scaled", slaves=1))
    eventually(lambda: "slaveReplicas" in (get(api, "bg/scaled").get("status") or {}))
    api.kubectl("scale", "-n", NS, "bg/scaled", "--replicas=3")
    assert get(api, "bg/scaled")["spec"]["slaves"] == 3
    eventually(
        lambda: children(api, "scaled")[("StatefulSet", "scaled-slave")]["spec"]["replicas"] == 3,
        what="the slave StatefulSet scaled",
    )
    raw = f"/apis/brokergroup.io/v1alpha1/namespaces/{NS}/brokergroups/scaled/scale"
    scale = json.loads(api.kubectl("get", "--raw", raw).stdout)
    # no kubelet here: no slave pod exists, and the status says so
    assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 0
    # an autoscaler finds the slave pods by the selector the scale subresource gives
    assert scale["status"]["selector"] == (
        "app.kubernetes.io/component=slave,brokergroup.io/group=scaled"
    )
    # the schema still holds through the scale subresource
    out = api.kubectl("scale", "-n", NS, "bg/scaled", "--replicas=17", check=False)
    assert out.returncode != 0 and "spec.slaves" in out.stderr, out.stderr


def test_restart_annotation_reaches_the_pod_templates(
    api: kubeapi.ApiServer, operator: Any
) -> None:
    apply(api, group("bounce", slaves=1))

    def templates() -> dict[str, dict[str, str]]:
        found = children(api, "bounce")
        return {
            sts: found[("StatefulSet", f"bounce-{sts}")]["spec"]["template"]["metadata"][
                "annotations"
            ]
            for sts in ("master", "slave")
        }

    before = eventually(lambda: len(children(api, "bounce")) == CHILDREN and templates())
    assert all("brokergroup.io/restart" not in a for a in before.values())
    for value in ("2026-01-01T00:00:00Z", "again"):
        api.kubectl(
            "annotate", "-n", NS, "bg/bounce", f"brokergroup.io/restart={value}", "--overwrite"
        )
        eventually(
            lambda v=value: all(a.get("brokergroup.io/restart") == v for a in templates().values()),
            what=f"restart={value} in both pod templates",
        )
    # the timer's re-apply of a deleted child keeps it (no second roll)
    api.kubectl("delete", "-n", NS, "statefulset/bounce-slave")
    eventually(
        lambda: templates()["slave"].get("brokergroup.io/restart") == "again",
        timeout=60,
        what="re-applied slave StatefulSet with the annotation",
    )


# -- operator HA: two replicas under kopf peering ------------------------------------------
HA_NS = "bgha"
PEERING = "bg-ha"


def start_operator(api: kubeapi.ApiServer, log: Path, *args: str, **env: str) -> Any:
    environ = {
        **os.environ,
        "KUBECONFIG": str(api.kubeconfig_for("operator-token")),
        "BROKERGROUP_POLL_INTERVAL": "1",
        "BROKERGROUP_HTTP_TIMEOUT": "0.5",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "brokergroup_operator", *args, "--verbose"],
        env=environ,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


def stop_operator(proc: Any) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def peering_state(log: Path) -> str:
    """What kopf last logged about peering: running (resumed) or paused (the initial state)."""
    state = "paused"
    for line in log.read_text().splitlines():
        if "Resuming operations" in line:
            state = "running"
        elif "Pausing operations" in line or "Pausing all operators" in line:
            state = "paused"
    return state


def test_peered_replicas_take_turns(api: kubeapi.ApiServer) -> None:
    """What the chart runs with replicaCount > 1: only one replica handles BrokerGroups; the
    other takes over when the first stops."""
    api.kubectl("apply", "-f", str(PEERING_CRD))
    api.kubectl("wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev", "--timeout=30s")
    api.kubectl("create", "namespace", HA_NS)
    # the chart's extra rule for a namespaced operator with peering, and its peering object
    peering_rbac = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "peering", "namespace": HA_NS},
            "rules": [
                {
                    "apiGroups": ["kopf.dev"],
                    "resources": ["kopfpeerings"],
                    "verbs": ["get", "list", "watch", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "peering", "namespace": HA_NS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "peering",
            },
            "subjects": [
                {
                    "kind": "User",
                    "name": "brokergroup-operator",
                    "apiGroup": "rbac.authorization.k8s.io",
                }
            ],
        },
        {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering",
            "metadata": {"name": PEERING, "namespace": HA_NS},
        },
    ]
    api.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(peering_rbac))
    logs = [api.workdir / "logs" / f"operator-ha-{i}.log" for i in (0, 1)]
    procs = [start_operator(api, log, "-n", HA_NS, BROKERGROUP_PEERING=PEERING) for log in logs]
    try:

        def peers() -> int:
            out = api.kubectl("get", "-n", HA_NS, f"kopfpeering/{PEERING}", "-o", "json")
            return len(json.loads(out.stdout).get("status") or {})

        eventually(lambda: peers() == 2, what="both replicas in the peering object")

        # kopf starts every replica paused until it has seen its peers; once both records are
        # in, the one of highest priority runs and the other is (or goes back to) paused
        def running() -> list[int]:
            return [i for i, log in enumerate(logs) if peering_state(log) == "running"]

        (active,) = eventually(lambda: len(running()) == 1 and running(), what="one replica")
        standby = 1 - active
        time.sleep(2)
        assert running() == [active]

        doc = group("ha", slaves=1)
        doc["metadata"]["namespace"] = HA_NS
        apply(api, doc)

        def applied() -> bool:
            sts = api.kubectl("get", "-n", HA_NS, "statefulset", "ha-slave", check=False)
            return sts.returncode == 0

        eventually(applied, what="the active replica applies the children")
        assert "reconcile" in logs[active].read_text()
        time.sleep(2)  # polls of the active replica happen meanwhile
        assert "reconcile" not in logs[standby].read_text()
        assert "poll_group" not in logs[standby].read_text()

        # the active one leaves cleanly (its record goes with it): the standby takes over
        stop_operator(procs[active])
        eventually(lambda: peering_state(logs[standby]) == "running", what="the standby resuming")
        api.kubectl("scale", "-n", HA_NS, "bg/ha", "--replicas=2")

        def scaled() -> bool:
            out = api.kubectl(
                "get", "-n", HA_NS, "statefulset", "ha-slave", "-o", "jsonpath={.spec.replicas}"
            )
            return out.stdout == "2"

        eventually(scaled, what="the former standby handles the scale")
    finally:
        for proc in procs:
            stop_operator(proc)
        for log in logs:
            print(log.name, log.read_text()[-3000:])


def test_operator_has_no_errors_in_its_log(api: kubeapi.ApiServer, operator: Any) -> None:
    log = (api.workdir / "logs" / "operator.log").read_text().splitlines()
    # (the one refusal test_volume_expansion provokes on purpose is the admission plugin's)
    expected = "persistentvolumeclaims/store-stuck-master-0"
    bad = [
        line
        for line in log
        if (" 403 " in line or "Forbidden" in line or "Traceback" in line)
        and expected not in line
        and " httpcore2." not in line  # raw response lines: httpx2 logs each with its URL
    ]
    bad += [line for line in log if " ERROR " in line]
    assert not bad, "\n".join(bad[:20])


def test_admin_token_secret_written_never_readable_by_the_operator(
    api: kubeapi.ApiServer, operator: Any
) -> None:
    """Under the deploy RBAC (secrets: create, patch) the operator writes each group's admin
    token Secret, derived from its key and the group's uid, and could not read one back; the
    brokers' broker.conf names the mounted file; the token is in no log line."""
    from brokergroup_operator.admin_token import group_token

    apply(api, group("guarded", replicationMode="ASYNC", slaves=1))
    secret = eventually(
        lambda: get(api, "secret", "-l", "brokergroup.io/group=guarded")["items"],
        what="the admin token Secret",
    )[0]
    uid = get(api, "bg/guarded")["metadata"]["uid"]
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert token == group_token(OPERATOR_KEY.encode(), NS, "guarded", uid)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == uid
    conf = eventually(lambda: children(api, "guarded").get(("ConfigMap", "guarded-config")))
    assert "adminTokenFile=/etc/habroker-admin/token" in conf["data"]["broker.conf"]
    as_operator = api.kubeconfig_for("operator-token")
    for verb in ("get", "list", "watch"):
        out = api.kubectl("auth", "can-i", verb, "secrets", "-n", NS, kubeconfig=as_operator,
                          check=False)  # fmt: skip
        assert out.stdout.strip() == "no", (verb, out.stdout)
    time.sleep(2)
    assert token not in (api.workdir / "logs" / "operator.log").read_text()
    api.kubectl("delete", "-n", NS, "bg/guarded", "--timeout=30s")
