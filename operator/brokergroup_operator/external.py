"""External access: where clients outside the cluster reach each broker.

Each broker has its own Service (``<pod>-external``, NodePort or LoadBalancer) on its external
listener. The address a client outside is told is the pod's node IP and the node port (the
Service's ``Local`` traffic policy answers there), or the load balancer's address and the
port. The operator computes the brokerId -> address map from the Services and pods it watches
and hands it to every broker (PUT /v1/admin/external-addresses), whose external listener
answers routes with it.  A DLEDGER group's brokerIds follow the leader, so its map goes by
peer (dLegerSelfId -> address) and each peer numbers it when it answers a route.

Pure: Services and pods in, addresses and stale Services out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .manifests import (
    EXTERNAL_PORT_NAME,
    external_service_name,
    group_pods,
    peer_id,
    peer_pod,
)
from .spec import GroupSpec
from .status import PodInfo


@dataclass(frozen=True)
class ExternalDoor:
    """One per-broker external Service, as the operator's index keeps it."""

    name: str
    type: str
    node_port: int | None = None
    #: the load balancer's IP or hostname, once the cloud gave one
    ingress: str | None = None


def external_door(name: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> ExternalDoor:
    port: Mapping[str, Any] = next(
        (p for p in spec.get("ports") or [] if p.get("name") == EXTERNAL_PORT_NAME), {}
    )
    ingress = ((status.get("loadBalancer") or {}).get("ingress") or [{}])[0]
    return ExternalDoor(
        name=name,
        type=str(spec.get("type", "ClusterIP")),
        node_port=int(port["nodePort"]) if port.get("nodePort") else None,
        ingress=ingress.get("ip") or ingress.get("hostname") or None,
    )


def external_address(spec: GroupSpec, pod: PodInfo, door: ExternalDoor | None) -> str | None:
    """How a client outside reaches this pod's broker, or None while it cannot (no node
    yet, no node port or load balancer address yet)."""
    if door is None or door.type != spec.external_access:
        return None
    if door.type == "NodePort":
        if pod.host_ip and door.node_port:
            return f"{pod.host_ip}:{door.node_port}"
        return None
    return f"{door.ingress}:{spec.external_port}" if door.ingress else None


def external_addresses(
    spec: GroupSpec, pods: Sequence[PodInfo], doors: Sequence[ExternalDoor]
) -> dict[int, str]:
    """brokerId -> external address for every broker that has one (``pods`` carry the
    brokerIds in force: with failover, the controller's assignment)."""
    if not spec.external_access:
        return {}
    by_name = {d.name: d for d in doors}
    out: dict[int, str] = {}
    for pod in pods:
        if pod.deleting:
            continue
        address = external_address(spec, pod, by_name.get(external_service_name(pod.name)))
        if address is not None:
            out[pod.broker_id] = address
    return dict(sorted(out.items()))


def external_peer_addresses(
    spec: GroupSpec, pods: Sequence[PodInfo | None], doors: Sequence[ExternalDoor]
) -> dict[str, str]:
    """dLegerSelfId -> external address of every DLEDGER peer that has one; ``pods[i]`` is
    the pod of ordinal i (None while it has none)."""
    if not spec.external_access:
        return {}
    by_name = {d.name: d for d in doors}
    out: dict[str, str] = {}
    for ordinal, pod in enumerate(pods):
        if pod is None or pod.deleting:
            continue
        address = external_address(spec, pod, by_name.get(external_service_name(pod.name)))
        if address is not None:
            out[peer_id(ordinal)] = address
    return out


def stale_doors(
    spec: GroupSpec, doors: Sequence[ExternalDoor], peers: int | None = None
) -> list[str]:
    """External Services of brokers the group no longer has (scaled down), or all of them
    once external access is turned off.  ``peers``: a DLEDGER group's replicas in force (a
    peer that a membership change has not removed yet keeps its Service)."""
    wanted: set[str] = set()
    if spec.external_access:
        pods = group_pods(spec)
        if spec.dledger and peers is not None:
            pods = [peer_pod(spec.name, i) for i in range(max(spec.replicas, peers))]
        wanted = {external_service_name(p) for p in pods}
    return sorted(d.name for d in doors if d.name not in wanted)
