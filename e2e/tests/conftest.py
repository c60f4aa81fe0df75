"""Fixtures for the end-to-end suite: a real cluster, reached through KUBECONFIG.

The suite never starts a cluster itself, so it runs the same on kind and on
the binary-built local cluster: `make e2e` (or e2e/kind.sh) brings one up and
exports KUBECONFIG; set KUBECONFIG yourself to reuse any cluster that has the
images loaded.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.tests.kube import Kube
from e2e.userpath import Cluster, find_tool

E2E_DIR = Path(__file__).resolve().parent.parent
LOCAL_KUBECTL = E2E_DIR / ".cluster" / "bin" / "kubectl"


def _kubectl() -> str:
    explicit = os.environ.get("E2E_KUBECTL")
    if explicit:
        return explicit
    found = shutil.which("kubectl")
    if found:
        return found
    if LOCAL_KUBECTL.exists():
        return str(LOCAL_KUBECTL)
    pytest.exit("no kubectl: put one on PATH or set E2E_KUBECTL", returncode=2)


@pytest.fixture(scope="session")
def kube() -> Kube:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        pytest.exit(
            "KUBECONFIG is not set: run `make e2e` (local cluster), e2e/kind.sh (kind), "
            "or export KUBECONFIG to reuse a cluster that has the images loaded",
            returncode=2,
        )
    k = Kube(_kubectl(), kubeconfig)
    k.run("get", "--raw", "/readyz", timeout=30)
    return k


@pytest.fixture(scope="session")
def broker_image() -> str:
    return os.environ.get("BROKER_IMAGE", "brokergroup/habroker:dev")


@pytest.fixture(scope="session")
def operator_image() -> str:
    return os.environ.get("OPERATOR_IMAGE", "brokergroup/operator:dev")


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (kept with E2E_KEEP_NAMESPACES=1)."""
    name = (
        f"e2e-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    )
    kube.run("create", "namespace", name)
    kube.run("label", "namespace", name, "brokergroup.io/e2e=true")
    yield name
    if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
        kube.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def cluster(kube: Kube) -> Cluster:
    """The user's tools against the cluster: kubectl and helm (the chart-installed tests)."""
    helm = find_tool("helm", "HELM")
    if helm is None:
        pytest.fail("no helm binary: `make cluster-build` builds one into e2e/.cluster/bin")
    return Cluster(kube.env["KUBECONFIG"], kube.kubectl, helm)
