"""Fixtures for the end-to-end suite: a real cluster, reached through KUBECONFIG.

The suite never starts a cluster itself, so it runs the same on kind and on
the binary-built local cluster: `make e2e` (or e2e/kind.sh) brings one up and
exports KUBECONFIG; set KUBECONFIG yourself to reuse any cluster that has the
images loaded. Everything goes through `kubectl`, the one tool both have.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

E2E_DIR = Path(__file__).resolve().parent.parent
LOCAL_KUBECTL = E2E_DIR / ".cluster" / "bin" / "kubectl"


class Kube:
    """kubectl with the suite's kubeconfig, JSON results and clear failures."""

    def __init__(self, kubectl: str, kubeconfig: str) -> None:
        self.kubectl = kubectl
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True) -> str:
        res = subprocess.run(
            [self.kubectl, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json"))

    def apply(self, namespace: str, *objects: dict[str, Any]) -> None:
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self.run("-n", namespace, "apply", "-f", "-", stdin=doc)

    def wait_ready(self, namespace: str, pod: str, timeout: int = 180) -> None:
        """Wait for a pod to exist and be Ready; on timeout show why it is not."""
        deadline = time.monotonic() + timeout
        while self.run("-n", namespace, "get", "pod", pod, "--ignore-not-found", "-o", "name") == "":
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {namespace}/{pod} never appeared")
            time.sleep(0.5)
        left = max(1, int(deadline - time.monotonic()))
        res = self.run(
            "-n", namespace, "wait", "--for=condition=Ready", f"pod/{pod}", f"--timeout={left}s",
            check=False, timeout=left + 30,
        )
        if f"pod/{pod} condition met" not in res:
            describe = self.run("-n", namespace, "describe", "pod", pod, check=False)
            logs = self.run("-n", namespace, "logs", pod, "--all-containers", "--tail=50", check=False)
            raise AssertionError(f"pod {namespace}/{pod} not Ready in {timeout}s\n{describe}\n--- logs ---\n{logs}")

    def exec(self, namespace: str, pod: str, *command: str, timeout: float = 60) -> str:
        return self.run("-n", namespace, "exec", pod, "--", *command, timeout=timeout)


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
    name = f"e2e-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    kube.run("label", "namespace", name, "brokergroup.io/e2e=true")
    yield name
    if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
        kube.run("delete", "namespace", name, "--wait=false", check=False)
