"""The helm chart: lint, rendering with several value sets, the values schema refusing bad
values, the CRD taken from crds/ (one source of truth), and every rendered manifest validated
by a real kube-apiserver (``kubectl apply --dry-run=server --validate=strict``: the apiserver's
own OpenAPI schemas and field validation, offline).

Needs the helm binary (``$HELM``, PATH, or ``e2e/.cluster/bin/helm`` from
``make cluster-build``) and, for the apiserver checks, kube-apiserver + etcd (same place).
Without them the tests skip and say why; under CI (``CI=true``) a missing binary fails instead,
so a skip can never hide an untested chart.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.brokergroup_operator import kubeapi

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "brokergroup-operator"
CRD = ROOT / "crds" / "brokergroup.io_brokergroups.yaml"
PEERING_CRD = ROOT / "crds" / "kopf.dev_peerings.yaml"
RBAC = ROOT / "operator" / "deploy" / "rbac.yaml"
LOCAL_BIN = Path(os.environ.get("E2E_CLUSTER_DIR") or ROOT / "e2e" / ".cluster") / "bin"

# helm, kube-apiserver and etcd from `make cluster-build`: `make unit` runs these tests after it
pytestmark = pytest.mark.cluster_bins


def _missing(what: str) -> None:
    message = (
        f"{what}: run `make cluster-build` (builds helm, kube-apiserver, etcd into {LOCAL_BIN})"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must test the chart, but {message}")
    print(f"SKIP: {message}")
    pytest.skip(message)


def _helm_bin() -> str | None:
    explicit = os.environ.get("HELM")
    if explicit:
        return explicit
    local = LOCAL_BIN / "helm"
    if local.is_file():
        return str(local)
    return shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    found = _helm_bin()
    if found is None:
        _missing("no helm binary")
    assert found is not None
    return found


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


# Value sets the chart must render (and the apiserver accept). Namespaces used: "bg-system"
# (the release), "team-a", "team-b".
VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "namespaced-release-ns": ["--set", "watch.mode=namespaced"],
    "namespaced-list": [
        "--set",
        "watch.mode=namespaced",
        "--set",
        "watch.namespaces={team-a,team-b}",
    ],
    "no-networkpolicy": ["--set", "networkPolicy.enabled=false"],
    "single-replica": ["--set", "replicaCount=1"],
    "servicemonitor": [
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "serviceMonitor.labels.release=prom",
    ],
    "observability": [
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
    ],
    "own-serviceaccount": [
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=existing-sa",
        "--set",
        "rbac.create=true",
    ],
    "tuned": [
        "--set",
        "image.repository=registry.example/bg/operator",
        "--set",
        "image.tag=1.2.3",
        "--set",
        "image.pullPolicy=Always",
        "--set",
        "operator.verbose=true",
        "--set-json",  # --set makes 2.5 a string (helm parses only integers)
        "operator.pollInterval=2.5",
        "--set",
        "operator.addressing=dns",
        "--set-json",
        'operator.extraEnv=[{"name":"BROKERGROUP_AUTO_HYSTERESIS_BYTES","value":"4096"}]',
        "--set-json",
        'tolerations=[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]',
        "--set",
        "nodeSelector.kubernetes\\.io/os=linux",
        "--set",
        "fullnameOverride=bgop",
    ],
}


def render(helm: str, *args: str, release: str = "bg") -> list[dict[str, Any]]:
    out = run_helm(helm, "template", release, str(CHART), "--namespace", "bg-system", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        kinds.setdefault(d["kind"], []).append(d)
    return kinds


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def operator_rules(network_policy: bool, peering: str | None = None) -> list[dict[str, Any]]:
    """operator/deploy/rbac.yaml's rules (one standalone replica), plus the peering resource
    (``clusterkopfpeerings`` or ``kopfpeerings``) and the NetworkPolicy rule when enabled."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole")
    rules: list[dict[str, Any]] = role["rules"]
    if peering:
        rules = [
            *rules,
            {
                "apiGroups": ["kopf.dev"],
                "resources": [peering],
                "verbs": ["get", "list", "watch", "patch"],
            },
        ]
    if network_policy:
        rules = [
            *rules,
            {
                "apiGroups": ["networking.k8s.io"],
                "resources": ["networkpolicies"],
                "verbs": ["list", "watch", "create", "patch"],
            },
        ]
    return rules


# -- lint and the CRD's single source -------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint(helm: str, name: str) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *VALUE_SETS[name])
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


def test_crd_comes_from_crds_dir(helm: str, tmp_path: Path) -> None:
    """The chart's crds/ holds a symlink to crds/, never a copy; `helm package` and
    `helm template --include-crds` carry the file byte for byte."""
    for source in (CRD, PEERING_CRD):
        link = CHART / "crds" / source.name
        assert link.is_symlink(), f"{link} must be a symlink to {source} (a copy would drift)"
        assert link.resolve() == source.resolve()
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        [CRD.name, PEERING_CRD.name]
    )

    run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("brokergroup-operator-*.tgz")
    with tarfile.open(archive) as tar:
        for source in (CRD, PEERING_CRD):
            member = tar.extractfile(f"brokergroup-operator/crds/{source.name}")
            assert member is not None
            assert member.read() == source.read_bytes()

    rendered = render(helm, "--include-crds")
    crds = [d for d in rendered if d["kind"] == "CustomResourceDefinition"]
    expected = [yaml.safe_load(CRD.read_text())]
    expected += [d for d in yaml.safe_load_all(PEERING_CRD.read_text()) if d]
    assert sorted(crds, key=lambda d: d["metadata"]["name"]) == sorted(
        expected, key=lambda d: d["metadata"]["name"]
    )


# -- rendering -------------------------------------------------------------------------------
def test_defaults(helm: str) -> None:
    kinds = by_kind(render(helm))
    assert sorted(kinds) == [
        "ClusterKopfPeering",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "NetworkPolicy",
        "Secret",
        "ServiceAccount",
    ]
    (dep,) = kinds["Deployment"]
    spec = dep["spec"]
    # two replicas under kopf peering: one active, one standby, on different nodes if possible
    assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    (peering,) = kinds["ClusterKopfPeering"]
    assert peering["metadata"]["name"] == "bg-brokergroup-operator-bg-system"
    assert env_of(dep)["BROKERGROUP_PEERING"] == peering["metadata"]["name"]
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    )
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "bg-brokergroup-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    (container,) = pod["containers"]
    assert container["image"] == "brokergroup/operator:dev"
    assert container["imagePullPolicy"] == "IfNotPresent"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["limits"]["memory"] == "256Mi"
    # kopf's health endpoint and the operator's /metrics
    assert [p["containerPort"] for p in container["ports"]] == [8080, 8081]
    env = env_of(dep)
    assert "WATCH_NAMESPACE" not in env  # cluster-wide
    assert env["BROKERGROUP_NETWORK_POLICY"] == "true"
    assert env["BROKERGROUP_ADDRESSING"] == "pod-ip"

    (role,) = kinds["ClusterRole"]
    assert role["rules"] == operator_rules(network_policy=True, peering="clusterkopfpeerings")
    (binding,) = kinds["ClusterRoleBinding"]
    assert (
        binding["roleRef"]["name"]
        == role["metadata"]["name"]
        == "bg-brokergroup-operator-bg-system"
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "bg-brokergroup-operator", "namespace": "bg-system"}
    ]
    (policy,) = kinds["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == (dep["spec"]["selector"]["matchLabels"])
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": "health"}, {"protocol": "TCP", "port": "metrics"}]}
    ]


def test_rbac_is_exactly_what_the_operator_uses(helm: str) -> None:
    """Same rules as operator/deploy/rbac.yaml (which the operator's apiserver test runs
    under); the NetworkPolicy rule only when the operator creates policies."""
    (role,) = by_kind(
        render(helm, "--set", "networkPolicy.enabled=false", "--set", "replicaCount=1")
    )["ClusterRole"]
    assert role["rules"] == operator_rules(network_policy=False)
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if "secrets" in rule["resources"]:  # the groups' admin tokens: written, never read
            assert rule["resources"] == ["secrets"] and rule["verbs"] == ["create", "patch"]


def test_namespaced_mode(helm: str) -> None:
    kinds = by_kind(render(helm, *VALUE_SETS["namespaced-list"]))
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    assert sorted(r["metadata"]["namespace"] for r in kinds["Role"]) == ["team-a", "team-b"]
    for role in kinds["Role"]:
        assert role["rules"] == operator_rules(network_policy=True, peering="kopfpeerings")
    for binding in kinds["RoleBinding"]:
        assert binding["subjects"][0]["namespace"] == "bg-system"
    (dep,) = kinds["Deployment"]
    assert env_of(dep)["WATCH_NAMESPACE"] == "team-a,team-b"
    # a namespaced operator peers through a KopfPeering in every namespace it watches
    assert "ClusterKopfPeering" not in kinds
    assert sorted(p["metadata"]["namespace"] for p in kinds["KopfPeering"]) == ["team-a", "team-b"]
    assert {p["metadata"]["name"] for p in kinds["KopfPeering"]} == {
        env_of(dep)["BROKERGROUP_PEERING"]
    }

    kinds = by_kind(render(helm, *VALUE_SETS["namespaced-release-ns"]))
    assert [r["metadata"]["namespace"] for r in kinds["Role"]] == ["bg-system"]
    assert env_of(kinds["Deployment"][0])["WATCH_NAMESPACE"] == "bg-system"


def test_single_replica_is_standalone(helm: str) -> None:
    kinds = by_kind(render(helm, *VALUE_SETS["single-replica"]))
    assert "ClusterKopfPeering" not in kinds and "KopfPeering" not in kinds
    (dep,) = kinds["Deployment"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert "BROKERGROUP_PEERING" not in env_of(dep)
    assert "affinity" not in dep["spec"]["template"]["spec"]
    (role,) = kinds["ClusterRole"]
    assert role["rules"] == operator_rules(network_policy=True)


def test_peering_settings_reach_the_operator(helm: str) -> None:
    """The rendered BROKERGROUP_PEERING turns kopf peering on, under the rendered name."""
    from brokergroup_operator.settings import Settings

    (dep,) = by_kind(render(helm))["Deployment"]
    settings = Settings.from_env(env_of(dep))
    assert settings.peering == "bg-brokergroup-operator-bg-system"


def test_network_policy_off(helm: str) -> None:
    kinds = by_kind(render(helm, *VALUE_SETS["no-networkpolicy"]))
    assert "NetworkPolicy" not in kinds
    assert env_of(kinds["Deployment"][0])["BROKERGROUP_NETWORK_POLICY"] == "false"


def test_service_monitor(helm: str) -> None:
    kinds = by_kind(render(helm, *VALUE_SETS["servicemonitor"]))
    (sm,) = kinds["ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["namespaceSelector"] == {"any": True}
    assert sm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "habroker",
        "app.kubernetes.io/managed-by": "brokergroup-operator",
    }
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    namespaced = by_kind(
        render(helm, *VALUE_SETS["namespaced-list"], "--set", "serviceMonitor.enabled=true")
    )["ServiceMonitor"][0]
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_service_monitor_selects_what_the_operator_labels() -> None:
    """The ServiceMonitor's selector and port name match the operator's Services."""
    from brokergroup_operator import manifests
    from brokergroup_operator.spec import parse_spec

    group = parse_spec("orders", "team-a", {"image": "x", "slaves": 1})
    services = [
        c
        for c in manifests.children(group, {"name": "orders", "uid": "u"})
        if c["kind"] == "Service"
    ]
    scraped = []
    for svc in services:
        labels = svc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "habroker"
        assert labels["app.kubernetes.io/managed-by"] == "brokergroup-operator"
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        if manifests.HTTP_PORT_NAME not in ports:
            # the namesrv Service: no http port, so the ServiceMonitor makes no target of it
            assert set(ports) == {manifests.NAMESRV_PORT_NAME}
            continue
        assert ports["http"]["port"] == group.http_port == 10913
        scraped.append(svc)
    # the port the ServiceMonitor scrapes is the one the broker serves /metrics on
    conf = manifests.broker_properties(group)
    assert conf["httpListenPort"] == "10913" and conf["listenPort"] == "10911"
    names = {s["metadata"]["name"] for s in scraped}
    assert names == {"orders", "orders-master", "orders-slave"}  # the relabel regex keeps 2


def test_own_service_account_and_tuned_values(helm: str) -> None:
    kinds = by_kind(render(helm, *VALUE_SETS["own-serviceaccount"]))
    assert "ServiceAccount" not in kinds
    assert kinds["ClusterRoleBinding"][0]["subjects"][0]["name"] == "existing-sa"
    assert kinds["Deployment"][0]["spec"]["template"]["spec"]["serviceAccountName"] == "existing-sa"

    kinds = by_kind(render(helm, *VALUE_SETS["tuned"]))
    (dep,) = kinds["Deployment"]
    assert dep["metadata"]["name"] == "bgop"
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/bg/operator:1.2.3"
    assert container["imagePullPolicy"] == "Always"
    assert container["args"] == ["--verbose"]
    env = env_of(dep)
    assert env["BROKERGROUP_POLL_INTERVAL"] == "2.5"
    assert env["BROKERGROUP_ADDRESSING"] == "dns"
    assert env["BROKERGROUP_AUTO_HYSTERESIS_BYTES"] == "4096"
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"


def test_operator_settings_in_the_chart_are_valid() -> None:
    """Every BROKERGROUP_* value the chart renders by default is accepted by the operator."""
    from brokergroup_operator.settings import Settings

    helm = _helm_bin()
    if helm is None:
        _missing("no helm binary")
    assert helm is not None
    (dep,) = by_kind(render(helm))["Deployment"]
    settings = Settings.from_env(env_of(dep))
    assert settings.network_policy is True and settings.poll_interval == 5.0


# -- the values schema -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "watch.mode=everywhere"], "watch.mode"),
        (["--set", "operatr.verbose=true"], "operatr"),  # a typo of a top-level key
        (["--set", "operator.addressing=ip"], "operator.addressing"),
        (["--set", "operator.pollInterval=0"], "operator.pollInterval"),
        (["--set", "securityContext.readOnlyRootFilesystem=false"], "readOnlyRootFilesystem"),
        (["--set", "podSecurityContext.runAsNonRoot=false"], "runAsNonRoot"),
        (["--set", "image.pullPolicy=Sometimes"], "image.pullPolicy"),
        (["--set", "watch.namespaces={Team_A}"], "watch.namespaces"),
        (["--set", "serviceMonitor.interval=30"], "serviceMonitor.interval"),
        (["--set", "networkPolicy.enabled=yes"], "networkPolicy.enabled"),
        (["--set", "operator.metricsPort=8080"], "operator.metricsPort"),  # kopf's health port
        (["--set", "prometheusRule.enable=true"], "prometheusRule"),
        (["--set", "replicaCount=0"], "replicaCount"),
    ],
)
def test_values_schema_rejects(helm: str, args: list[str], message: str) -> None:
    result = run_helm(helm, "template", "bg", str(CHART), *args, check=False)
    assert result.returncode != 0, f"{args} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


# -- validated by a real kube-apiserver ------------------------------------------------------
@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeapi.ApiServer]:
    server = kubeapi.start(tmp_path_factory.mktemp("apiserver"), kubeapi.require_bin_dir())
    try:
        server.kubectl("apply", "--server-side", "-f", str(CRD), "-f", str(PEERING_CRD))
        server.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/brokergroups.brokergroup.io",
            "crd/clusterkopfpeerings.kopf.dev",
            "crd/kopfpeerings.kopf.dev",
            "--timeout=30s",
        )
        for ns in ("bg-system", "team-a", "team-b"):
            server.kubectl("create", "namespace", ns)
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_manifests_pass_the_apiserver(
    helm: str, api: kubeapi.ApiServer, name: str
) -> None:
    """`kubectl apply --dry-run=server --validate=strict`: the apiserver checks every object
    against its own schemas (unknown or misplaced fields are errors, not silently dropped).
    prometheus-operator's kinds (ServiceMonitor, PodMonitor, PrometheusRule) are the exception:
    their CRDs are not available offline, so only their shape is checked (here and in
    test_observability.py)."""
    docs = [
        d
        for d in render(helm, *VALUE_SETS[name])
        if not d["apiVersion"].startswith("monitoring.coreos.com/")
    ]
    assert docs
    result = api.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(docs), result.stdout


def test_a_field_typo_is_caught_by_the_apiserver(helm: str, api: kubeapi.ApiServer) -> None:
    """The dry run really validates: a misspelled field in a rendered object is refused."""
    (dep,) = by_kind(render(helm))["Deployment"]
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    result = api.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        stdin=json.dumps(dep),
        check=False,
    )
    assert result.returncode != 0
    assert "readinesProbe" in result.stderr


def test_examples_pass_the_apiserver(api: kubeapi.ApiServer) -> None:
    """Every example is accepted by the CRD's schema and CEL rules as it is."""
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        result = api.kubectl(
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-n",
            "team-a",
            "-f",
            str(path),
            check=False,
        )
        assert result.returncode == 0, f"{path.name}: {result.stderr}"


def test_operator_key_secret_is_generated_mounted_and_can_be_brought(helm: str) -> None:
    """The operator key every group's admin token derives from: a generated Secret mounted
    read-only into the operator, named by BROKERGROUP_ADMIN_KEY_FILE; with
    operatorKey.existingSecret the chart makes none and mounts that one."""
    kinds = by_kind(render(helm))
    (secret,) = kinds["Secret"]
    assert secret["metadata"]["name"].endswith("-key")
    key = base64.b64decode(secret["data"]["key"])
    assert len(key) >= 16
    (dep,) = kinds["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "key")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    (container,) = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "key")
    assert mount["readOnly"] is True
    assert env_of(dep)["BROKERGROUP_ADMIN_KEY_FILE"] == mount["mountPath"] + "/key"
    own = by_kind(render(helm, "--set", "operatorKey.existingSecret=mine"))
    assert "Secret" not in own
    pod = own["Deployment"][0]["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "key")["secret"]["secretName"] == "mine"
