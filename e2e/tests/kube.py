"""kubectl for the end-to-end suite: JSON results, clear failures, patient waits.

Everything goes through `kubectl`, the one tool every cluster we run on has
(kind or the local binary-built cluster), so the suite needs no client library.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest

from e2e.userpath import address_is_local


def unavailable(reason: str) -> NoReturn:
    """Skip when the suite cannot run here (no cluster, node elsewhere) — but in CI, where
    `make test` brings the cluster up itself, that is a failure, never a quiet skip."""
    if os.environ.get("CI") == "true":
        raise AssertionError(f"CI must run this test, but {reason}")
    print(f"SKIP: {reason}")
    pytest.skip(reason)


def outside_pod_network() -> str:
    """The local cluster's control-plane namespace (``E2E_POD_NETWORK_NETNS``): it reaches the
    nodes but no pod address, as a client outside the cluster would; :func:`unavailable`
    elsewhere."""
    outside = os.environ.get("E2E_POD_NETWORK_NETNS", "")
    if not os.path.exists(outside):
        unavailable(
            "not the local cluster (E2E_POD_NETWORK_NETNS unset): no namespace outside the pod "
            "network to run the Java client from"
        )
    return outside


class ClusterGone(AssertionError):
    """The apiserver's address is no longer on this machine: the cluster was stopped."""


class Kube:
    """kubectl with the suite's kubeconfig, JSON results and clear failures.

    Our machines may only talk to themselves, and a stopped local cluster's
    kubeconfig points at an address that is then routed off the machine: every
    call first checks that the apiserver is still local (E2E_ALLOW_REMOTE_APISERVER=1
    lifts this for a remote cluster elsewhere)."""

    def __init__(self, kubectl: str, kubeconfig: str) -> None:
        self.kubectl = kubectl
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}
        self.local_only = os.environ.get("E2E_ALLOW_REMOTE_APISERVER") != "1"
        server = self._kubectl_offline(
            "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
        )
        self.server_host = urlsplit(server).hostname or ""
        self.check_local()

    def _kubectl_offline(self, *args: str) -> str:
        res = subprocess.run(
            [self.kubectl, *args], capture_output=True, text=True, env=self.env, timeout=30
        )
        if res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout.strip()

    def check_local(self) -> None:
        if self.local_only and not address_is_local(self.server_host):
            raise ClusterGone(
                f"the apiserver address {self.server_host!r} is not on this machine "
                "(cluster stopped?); refusing to send traffic off the machine"
            )

    def run(
        self, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True
    ) -> str:
        self.check_local()
        res = subprocess.run(
            [self.kubectl, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}"
            )
        return res.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json"))

    def apply(self, namespace: str, *objects: dict[str, Any]) -> None:
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self.run("-n", namespace, "apply", "-f", "-", stdin=doc)

    def wait_ready(self, namespace: str, pod: str, timeout: float = 180) -> None:
        """Wait for a pod to be Ready; fail early, with its story, if it cannot be."""
        deadline = time.monotonic() + timeout
        while True:
            # not created yet (a StatefulSet adds pods one by one): kubectl prints nothing
            out = self.run("-n", namespace, "get", "pod", pod, "--ignore-not-found", "-o", "json")
            obj = json.loads(out) if out.strip() else {}
            status = obj.get("status", {}) if obj else {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            if conditions.get("Ready") == "True":
                return
            problem = _stuck(status)
            if problem or time.monotonic() > deadline:
                why = problem or f"not Ready in {timeout:.0f}s"
                describe = self.run("-n", namespace, "describe", "pod", pod, check=False)
                logs = self.run(
                    "-n", namespace, "logs", pod, "--all-containers", "--tail=40", check=False
                )
                raise AssertionError(
                    f"pod {namespace}/{pod}: {why}\n{describe}\n--- logs ---\n{logs}"
                )
            time.sleep(1)

    def exec(self, namespace: str, pod: str, *command: str, timeout: float = 60) -> str:
        return self.run("-n", namespace, "exec", pod, "--", *command, timeout=timeout)


# Waiting reasons that will not fix themselves within a test's patience.
_HOPELESS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


def _stuck(status: dict[str, Any]) -> str | None:
    for c in status.get("containerStatuses", []) + status.get("initContainerStatuses", []):
        waiting = c.get("state", {}).get("waiting", {})
        if waiting.get("reason") in _HOPELESS:
            hint = (
                " (is the image loaded into the cluster?)" if "Image" in waiting["reason"] else ""
            )
            return f"container {c['name']}: {waiting['reason']}: {waiting.get('message', '')}{hint}"
        if c.get("restartCount", 0) >= 2:
            return f"container {c['name']} restarted {c['restartCount']} times"
    return None
