"""A real kube-apiserver + etcd on 127.0.0.1 for the operator's integration tests.

No kubelet, scheduler or controllers: objects are stored and validated (schema, CEL, RBAC,
server-side apply) exactly as on a cluster, but no pod ever runs. Binaries come from
``$BROKERGROUP_KUBE_BIN`` or the local cluster's build (``e2e/.cluster/bin``); the tests skip
when neither has ``etcd`` and ``kube-apiserver``, and fail under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from habroker.local import free_port

ROOT = Path(__file__).resolve().parents[2]


def find_bin_dir() -> Path | None:
    cluster = os.environ.get("E2E_CLUSTER_DIR") or str(ROOT / "e2e" / ".cluster")
    candidates = [os.environ.get("BROKERGROUP_KUBE_BIN"), str(Path(cluster) / "bin")]
    for candidate in candidates:
        if not candidate:
            continue
        path = Path(candidate)
        if (path / "kube-apiserver").is_file() and (path / "etcd").is_file():
            return path
    return None


def require_bin_dir() -> Path:
    """:func:`find_bin_dir`, or the test fails under ``CI=true`` (``make unit`` builds the
    binaries: they are the suite's own prerequisite) and skips elsewhere, saying how to get
    them. (pytest is imported here: bench/operator_scale.py uses this module without it.)"""
    found = find_bin_dir()
    if found is None:
        import pytest

        message = (
            "no kube-apiserver/etcd binaries: run `make cluster-build` (builds them into "
            f"{ROOT / 'e2e' / '.cluster' / 'bin'}) or set BROKERGROUP_KUBE_BIN"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must test against a real apiserver, but {message}")
        print(f"SKIP: {message}")
        pytest.skip(message)
    return found


@dataclass
class ApiServer:
    workdir: Path
    bin_dir: Path
    kubeconfig: Path
    processes: list[subprocess.Popen[bytes]]
    port: int

    def kubeconfig_for(self, token: str) -> Path:
        path = self.workdir / f"kubeconfig-{token}"
        path.write_text(_kubeconfig(self.port, token))
        return path

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        kubectl = shutil.which("kubectl", path=str(self.bin_dir)) or "kubectl"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig or self.kubeconfig)}
        result = subprocess.run(
            [kubectl, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.kill()  # the apiserver takes ~70 s on SIGTERM; nothing here needs a clean exit
            proc.wait(timeout=30)


def _kubeconfig(port: int, token: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://127.0.0.1:{port}
    insecure-skip-tls-verify: true
users:
- name: {token}
  user:
    token: {token}
contexts:
- name: test
  context: {{cluster: test, user: {token}, namespace: default}}
current-context: test
"""


def start(workdir: Path, bin_dir: Path) -> ApiServer:
    workdir.mkdir(parents=True, exist_ok=True)
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    key = workdir / "sa.key"
    pub = workdir / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
        check=True,
        capture_output=True,
    )
    # token,user,uid,"groups": the admin for the tests, and the operator with only its RBAC
    (workdir / "tokens.csv").write_text(
        'admin-token,admin,admin,"system:masters"\noperator-token,brokergroup-operator,op\n'
    )
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []
    etcd = subprocess.Popen(
        [
            str(bin_dir / "etcd"),
            "--data-dir",
            str(workdir / "etcd"),
            "--listen-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer_port}",
            "--initial-cluster",
            f"default=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",
        ],
        stdout=(logs / "etcd.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    processes.append(etcd)
    apiserver = subprocess.Popen(
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--cert-dir={workdir / 'certs'}",
            f"--token-auth-file={workdir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pub}",
            f"--service-account-signing-key-file={key}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false",
        ],
        stdout=(logs / "kube-apiserver.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    processes.append(apiserver)
    server = ApiServer(workdir, bin_dir, workdir / "kubeconfig", processes, api_port)
    server.kubeconfig.write_text(_kubeconfig(api_port, "admin-token"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if apiserver.poll() is not None:
            server.stop()
            raise RuntimeError(f"kube-apiserver exited; see {logs / 'kube-apiserver.log'}")
        ok = server.kubectl("get", "--raw", "/readyz", check=False)
        if ok.returncode == 0:
            return server
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"kube-apiserver not ready in 90 s; see {logs}")
