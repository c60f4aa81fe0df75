"""While the local cluster runs, the host's namespace holds nothing of it but "unreachable"
routes for its ranges, and the cluster's namespaces have no way out.

Only for the local cluster (e2e/run.sh sets E2E_POD_NETWORK_NETNS); nothing is sent anywhere:
routes and addresses are read, not probed. After `down`, e2e/hostcheck checks the rest.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from e2e.userpath import server_host

CLUSTER = Path(__file__).resolve().parent.parent / "cluster"
RANGES = ["10.201.0.0/24", "10.244.0.0/16", "10.96.0.0/16"]
NAMESPACES = ["bg-e2e-lan", "bg-e2e-cp", "bg-e2e-node1", "bg-e2e-node2", "bg-e2e-node3"]

pytestmark = pytest.mark.skipif(
    not os.environ.get("E2E_POD_NETWORK_NETNS"),
    reason="not the local cluster (E2E_POD_NETWORK_NETNS unset): nothing of it on this host",
)


def _hoststate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hoststate", CLUSTER / "hoststate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ip_json(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
    items: list[dict[str, Any]] = json.loads(out or "[]")
    return items


def test_host_routes_every_cluster_range_to_unreachable() -> None:
    routes = ip_json("-4", "route", "show", "table", "main")
    unreachable = {r["dst"] for r in routes if r.get("type") == "unreachable"}
    assert set(RANGES) <= unreachable, routes
    # and no other route of the host leads into them
    for r in routes:
        dst = r.get("dst", "")
        if dst in RANGES or dst == "default":
            continue
        net = ipaddress.ip_network(dst, strict=False)
        assert not any(net.overlaps(ipaddress.ip_network(x)) for x in RANGES), r


def test_host_has_no_address_link_or_rule_of_the_cluster() -> None:
    hoststate = _hoststate()
    ours = hoststate.ours_in(hoststate.snapshot())
    for kind in ("addresses", "links", "nftables", "iptables-legacy", "rules"):
        assert kind not in ours, ours[kind]
    # the only routes of the cluster's on the host: the unreachable ones
    for route in ours.get("routes", []):
        assert json.loads(route).get("type") == "unreachable", route


def test_host_clients_name_loopback_only() -> None:
    assert server_host(os.environ["KUBECONFIG"]) == "127.0.0.1"


@pytest.mark.parametrize("netns", NAMESPACES)
def test_cluster_namespaces_have_no_way_out(netns: str) -> None:
    """No default route; every route stays within the cluster's ranges."""
    routes = ip_json("-n", netns, "-4", "route", "show", "table", "main")
    for r in routes:
        assert r["dst"] != "default", f"{netns}: {r}"
        net = ipaddress.IPv4Network(r["dst"], strict=False)
        assert any(net.subnet_of(ipaddress.IPv4Network(x)) for x in RANGES), f"{netns}: {r}"
