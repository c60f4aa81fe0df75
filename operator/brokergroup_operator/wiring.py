"""Slave wiring: which slaves must be told (again) where their master is, at runtime.

A slave starts with ``haMasterAddress`` from its environment (the master pod's stable DNS name).
The operator re-sends it through ``PUT /v1/admin/master-address`` when a slave reports another
address (spec.ports changed, wiring mode changed, a slave restored from old data), and when the
master pod moved (new IP) while a slave is not connected, so it reconnects at once instead of
waiting for its own retry backoff. Connected slaves are never touched: no restarts, no churn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .manifests import master_ha_address
from .spec import GroupSpec
from .status import BrokerReport


@dataclass(frozen=True)
class MasterTarget:
    ha_address: str  # host:haPort the slave replicates from
    http_address: str  # host:httpListenPort the slave copies metadata from


def master_target(
    spec: GroupSpec, mode: str, master_ip: str | None, cluster_domain: str
) -> MasterTarget | None:
    """Where slaves should point: the stable DNS name (``dns``) or the pod IP (``pod-ip``).

    ``pod-ip`` is for clusters whose pods cannot resolve cluster DNS; then there is no target
    until the master pod has an IP.
    """
    if mode == "pod-ip":
        if not master_ip:
            return None
        host = master_ip
    else:
        host = master_ha_address(spec, cluster_domain).rpartition(":")[0]
    return MasterTarget(f"{host}:{spec.ha_port}", f"{host}:{spec.http_port}")


def rewire_plan(
    target: MasterTarget | None,
    slaves: Mapping[int, BrokerReport],
    master_moved: bool,
) -> dict[int, dict[str, Any]]:
    """brokerId -> body of ``PUT /v1/admin/master-address`` for every slave to rewire."""
    plan: dict[int, dict[str, Any]] = {}
    if target is None:
        return plan
    body = {"haMasterAddress": target.ha_address, "masterHttpAddress": target.http_address}
    for broker_id, report in sorted(slaves.items()):
        own = (report.status or {}).get("slave")
        if own is None:
            continue  # unreachable, or not (yet) a slave: nothing we can tell it
        if own.get("masterAddress") != target.ha_address or (
            master_moved and not own.get("connected")
        ):
            plan[broker_id] = body
    return plan
