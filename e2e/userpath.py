"""The user's path on a real cluster, as code: helm install, apply an example, wait for the
group, talk to it from a client pod, read its status. ``make demo`` (e2e/demo.py) and the
end-to-end suite (e2e/tests/test_user_path.py) share it.

Only ``kubectl`` and ``helm`` are used, with whatever ``KUBECONFIG`` names, so the same code
runs on kind and on the local binary-built cluster. With the local cluster's own kubeconfig,
every call first checks that the apiserver address is still on this machine: a stopped local
cluster leaves a kubeconfig whose address is routed off-host, and nothing may be sent there.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

ROOT = Path(__file__).resolve().parent.parent
E2E_DIR = ROOT / "e2e"
LOCAL_BIN = E2E_DIR / ".cluster" / "bin"
LOCAL_KUBECONFIG = E2E_DIR / ".cluster" / "kubeconfig"
CHART = ROOT / "helm" / "brokergroup-operator"
EXAMPLES = ROOT / "examples"
CLIENT_SCRIPT = E2E_DIR / "client.py"
CRD_NAME = "brokergroups.brokergroup.io"
T = TypeVar("T")


class ClusterGone(Exception):
    """The local cluster's apiserver address is no longer on this machine."""


def find_tool(name: str, env_var: str) -> str | None:
    """$ENV_VAR, then PATH, then the local cluster's build (e2e/.cluster/bin)."""
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit
    found = shutil.which(name)
    if found:
        return found
    local = LOCAL_BIN / name
    return str(local) if local.is_file() else None


def server_host(kubeconfig: str | Path) -> str:
    config = yaml.safe_load(Path(kubeconfig).read_text())
    context_name = config.get("current-context")
    cluster_name = next(
        (c["context"]["cluster"] for c in config.get("contexts", []) if c["name"] == context_name),
        None,
    )
    cluster = next(
        (c["cluster"] for c in config["clusters"] if c["name"] == cluster_name),
        config["clusters"][0]["cluster"],
    )
    server = str(cluster["server"])
    return re.sub(r"^https?://", "", server).rsplit(":", 1)[0].strip("[]")


def address_is_local(host: str) -> bool:
    """True if connecting to ``host`` stays on this machine (loopback or one of its addresses).

    A stopped local cluster's addresses route off the machine, so every client here checks
    before it calls. Binding a socket to an address succeeds only for an address this machine
    holds; names are resolved first."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        if ipaddress.ip_address(sockaddr[0]).is_loopback:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((sockaddr[0], 0))
            except OSError:
                return False
    return bool(infos)


def is_local_cluster_config(kubeconfig: str | Path) -> bool:
    try:
        return Path(kubeconfig).resolve() == LOCAL_KUBECONFIG.resolve()
    except OSError:
        return False


class Cluster:
    """kubectl and helm against one kubeconfig; JSON results; clear failures."""

    def __init__(self, kubeconfig: str, kubectl: str, helm: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.kubectl_bin = kubectl
        self.helm_bin = helm
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}
        self.guard_host = server_host(kubeconfig) if is_local_cluster_config(kubeconfig) else None

    def check(self) -> None:
        if self.guard_host is not None and not address_is_local(self.guard_host):
            raise ClusterGone(
                f"the local cluster's apiserver {self.guard_host} is not on this machine "
                "(cluster stopped?): refusing to send anything there"
            )

    def _run(
        self, argv: list[str], stdin: str | None, timeout: float, check: bool
    ) -> subprocess.CompletedProcess[str]:
        self.check()
        res = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and res.returncode != 0:
            raise AssertionError(
                f"{Path(argv[0]).name} {' '.join(argv[1:])} failed ({res.returncode}): "
                f"{res.stderr.strip()}"
            )
        return res

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True
    ) -> str:
        return self._run([self.kubectl_bin, *args], stdin, timeout, check).stdout

    def json(self, *args: str) -> Any:
        out = self.kubectl(*args, "-o", "json")
        return json.loads(out) if out.strip() else None

    def helm(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        if self.helm_bin is None:
            raise AssertionError("no helm binary: run `make cluster-build` or put helm on PATH")
        res = self._run([self.helm_bin, *args], None, timeout, check)
        return res.stdout

    def apply(self, namespace: str, obj: dict[str, Any]) -> None:
        self.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(obj))

    # -- the chart ---------------------------------------------------------------------------
    def install_operator(
        self,
        release: str,
        namespace: str,
        image: str,
        *values: str,
        timeout: str = "180s",
    ) -> str:
        repository, _, tag = image.rpartition(":")
        if not repository or "/" in tag:
            repository, tag = image, "dev"
        return self.helm(
            "upgrade",
            "--install",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            f"image.repository={repository}",
            "--set",
            f"image.tag={tag}",
            *values,
            "--wait",
            "--timeout",
            timeout,
        )

    @contextlib.contextmanager
    def example_group(
        self,
        example_name: str,
        release: str,
        broker_image: str,
        operator_image: str,
        slaves: int,
    ) -> Iterator[tuple[str, str]]:
        """A namespace of its own with the chart (namespaced mode) and one example group, in
        sync: yields (namespace, group name); removes all of it afterwards (unless
        E2E_KEEP_NAMESPACES=1)."""
        ns = f"e2e-{release}-{os.urandom(3).hex()}"
        self.kubectl("create", "namespace", ns)
        obj = example(example_name, broker_image)
        obj["spec"]["storage"]["size"] = "64Mi"
        name = obj["metadata"]["name"]
        try:
            self.install_operator(release, ns, operator_image, "--set", "watch.mode=namespaced")
            self.apply(ns, obj)
            eventually(lambda: in_sync(self.status(ns, name), slaves), 240, "the group in sync")
            yield ns, name
        finally:
            if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
                self.kubectl("-n", ns, "delete", "bg", "--all", "--timeout=120s", check=False)
                self.helm("uninstall", release, "--namespace", ns, "--wait", check=False)
                self.kubectl("delete", "namespace", ns, "--wait=false", check=False)

    # -- a group -----------------------------------------------------------------------------
    def group(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self.json("-n", namespace, "get", "bg", name)
        return obj if isinstance(obj, dict) else {}

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.group(namespace, name).get("status") or {})

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.json("-n", namespace, "get", "pod", name, "--ignore-not-found")
        return obj if isinstance(obj, dict) and obj else None

    def client_pod(self, namespace: str, image: str, name: str = "bg-client") -> str:
        """A pod of the broker image that only waits: `exec` runs e2e/client.py in it."""
        self.apply(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "bg-client"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "client",
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "infinity"],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        )
        self.kubectl(
            "-n", namespace, "wait", f"pod/{name}", "--for=condition=Ready", "--timeout=120s"
        )
        return name

    def client(self, namespace: str, pod: str, *args: str, timeout: float = 180) -> Any:
        """Run e2e/client.py in the client pod; its one JSON line."""
        out = self.kubectl(
            "-n",
            namespace,
            "exec",
            "-i",
            pod,
            "--",
            "python3",
            "-",
            *args,
            stdin=CLIENT_SCRIPT.read_text(),
            timeout=timeout,
        )
        return json.loads(out.strip().splitlines()[-1])


def example(name: str, broker_image: str | None = None) -> dict[str, Any]:
    """An example BrokerGroup from examples/, with the broker image swapped if asked."""
    (obj,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    if broker_image:
        obj["spec"]["image"] = broker_image
    return dict(obj)


def eventually(
    check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.5
) -> T:
    """Call ``check`` until it returns something truthy; fail with the last answer."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            answer = check()
            if answer:
                return answer
            last = answer
        except ClusterGone:
            raise
        except (AssertionError, KeyError, IndexError, TypeError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}: last={last!r}"
            )
        time.sleep(interval)


def condition(status: dict[str, Any], kind: str) -> str | None:
    for c in status.get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def in_sync(status: dict[str, Any], slaves: int) -> bool:
    """Ready, every slave connected, in sync and fully caught up with the master."""
    if condition(status, "Ready") != "True" or status.get("inSyncSlaves") != f"{slaves}/{slaves}":
        return False
    top = status.get("master", {}).get("maxOffset")
    entries = status.get("slaves") or []
    return len(entries) == slaves and all(
        s.get("connected") and s.get("inSync") and s.get("ackOffset") == top for s in entries
    )
