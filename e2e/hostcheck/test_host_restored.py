"""After `down`: the host is as it was before `up` (run by e2e/run.sh after the teardown).

The snapshot taken before bring-up (E2E_HOST_BEFORE, written by `hoststate.py snapshot`) is
compared with the host now, kind by kind: addresses, routes, policy rules, links, nftables,
iptables-legacy, ipsets, sysctls, mounts, network namespaces, our cgroups. Anything that differs and
is the cluster's (its address ranges, its names) fails. Under CI=true every difference fails;
on a shared workstation, differences that are visibly someone else's (another program's
network namespace, say) are printed and tolerated.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CLUSTER = Path(__file__).resolve().parent.parent / "cluster"
CLUSTER_DIR = Path(os.environ.get("E2E_CLUSTER_DIR", CLUSTER.parent / ".cluster")).resolve()
KINDS = [
    "addresses",
    "routes",
    "rules",
    "links",
    "nftables",
    "iptables-legacy",
    "ipsets",
    "sysctls",
    "mounts",
    "netns",
    "cgroups",
]


def _hoststate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hoststate", CLUSTER / "hoststate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hoststate = _hoststate()


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    path = os.environ.get("E2E_HOST_BEFORE")
    if not path:
        pytest.fail("E2E_HOST_BEFORE is not set: e2e/run.sh takes the snapshot before `up`")
    snap: dict[str, Any] = json.loads(Path(path).read_text())
    return snap


@pytest.fixture(scope="module")
def after() -> dict[str, Any]:
    snap: dict[str, Any] = hoststate.snapshot()
    return snap


@pytest.mark.parametrize("kind", KINDS)
def test_host_as_before(kind: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    added = sorted(set(after[kind]) - set(before[kind]))
    removed = sorted(set(before[kind]) - set(after[kind]))
    if kind == "sysctls":
        # a changed value shows as one removed and one added line; those the cluster
        # writes (the kubelet's, forwarding) are its own
        touched = tuple(f"{k}=" for k in hoststate.SYSCTLS)
        ours = [s for s in added + removed if s.startswith(touched)]
    else:
        ours = [i for i in added + removed if hoststate.is_ours(kind, i)]
    assert not ours, f"{kind}: the cluster's left or lost on the host: {ours}"
    foreign = [f"+ {i}" for i in added if i not in ours] + [f"- {i}" for i in removed]
    if foreign:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"{kind} differ from before the cluster: {foreign}")
        print(f"NOTE: {kind} changed meanwhile, not by the cluster: {foreign}")


def test_nothing_of_the_cluster_on_the_host(after: dict[str, Any]) -> None:
    """Not only unchanged: nothing by the cluster's names or addresses at all."""
    assert hoststate.ours_in(after) == {}


def test_no_process_of_the_cluster_runs() -> None:
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if str(CLUSTER_DIR) + "/" in cmdline or "/bg-e2e-node" in cgroups:
            left.append(f"{proc.name}: {cmdline[:160]}")
    assert not left, left


def test_apiserver_door_is_closed() -> None:
    """Host clients' kubeconfig names 127.0.0.1:6443: refused now, and locally."""
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.settimeout(5)
        s.connect(("127.0.0.1", 6443))
