"""Rolling restarts in the operator's order, never the StatefulSet controller's.

Both StatefulSets use ``updateStrategy: OnDelete``; a pod whose ``controller-revision-hash``
differs from its StatefulSet's ``updateRevision`` is outdated. The rule (Strimzi's): restart
one broker at a time, only when every other broker is Ready; slaves first (highest brokerId
first); the master last and only while a slave is in sync, so the restart never takes the last
up-to-date copy of the log away. A group without slaves has no other copy to protect: its master
is restarted when outdated (a documented outage).

With failover the master is whichever pod the assignment says (it may live in the slave
StatefulSet), each pod is compared with its own StatefulSet, and the master is not restarted at
all: mastership first moves to an up-to-date in-sync slave (a switchover, a write pause of about
a second), and the old master is then restarted as the slave it has become.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .status import PodInfo


@dataclass(frozen=True)
class StsInfo:
    """What rolling needs from a StatefulSet (kept in a kopf index)."""

    name: str
    generation: int = 0
    observed_generation: int = 0
    update_revision: str | None = None
    replicas: int = 0
    #: the size in its volumeClaimTemplates (immutable: a grown spec.storage.size is applied
    #: to the claims themselves, see ``storage``)
    claim_size: str | None = None


@dataclass(frozen=True)
class RollDecision:
    delete: str | None = None  # pod to delete now
    pending: list[str] = field(default_factory=list)  # outdated pods, in roll order
    message: str = ""
    switchover_to: str | None = None  # failover groups: move mastership here first

    def as_status(self) -> dict[str, Any] | None:
        return {"pending": self.pending, "message": self.message} if self.pending else None


def _outdated(pods: Sequence[PodInfo], stses: Mapping[str, StsInfo]) -> list[PodInfo]:
    """Pods whose revision differs from their own StatefulSet's (the name before the ordinal)."""
    out = []
    for p in pods:
        sts = stses.get(p.name.rpartition("-")[0])
        if sts is None or not sts.update_revision or p.deleting or not p.revision:
            continue
        if p.revision != sts.update_revision:
            out.append(p)
    return out


def plan_roll(
    master_pods: Sequence[PodInfo],
    slave_pods: Sequence[PodInfo],
    master_sts: StsInfo | None,
    slave_sts: StsInfo | None,
    slaves_status: Sequence[Mapping[str, Any]],
    desired_slaves: int,
    failover: bool = False,
) -> RollDecision:
    stses = {s.name: s for s in (master_sts, slave_sts) if s is not None}
    for sts in stses.values():
        if sts.observed_generation < sts.generation:
            return RollDecision(message=f"waiting for StatefulSet {sts.name} to observe its spec")
    slaves_out = sorted(_outdated(slave_pods, stses), key=lambda p: -p.broker_id)
    master_out = _outdated(master_pods, stses)
    pending = [p.name for p in slaves_out] + [p.name for p in master_out]
    if not pending:
        return RollDecision()
    everyone = list(master_pods) + list(slave_pods)
    busy = [p.name for p in everyone if p.deleting or not p.ready]
    if busy:
        return RollDecision(
            pending=pending, message=f"waiting for {', '.join(sorted(busy))} to be Ready"
        )
    if slaves_out:
        victim = slaves_out[0]
        return RollDecision(
            delete=victim.name, pending=pending, message=f"restarting slave {victim.name}"
        )
    victim = master_out[0]
    if desired_slaves == 0:
        return RollDecision(
            delete=victim.name, pending=pending, message="restarting the master (no slaves)"
        )
    in_sync = [s for s in slaves_status if s.get("inSync")]
    if failover:
        current = {p.name for p in slave_pods if p.ready and not p.deleting}
        fresh = [s for s in in_sync if s.get("pod") in current]
        if not fresh:
            return RollDecision(
                pending=pending,
                message="waiting for an up-to-date slave to be in sync before the switchover",
            )
        target = str(fresh[0]["pod"])
        return RollDecision(
            pending=pending,
            switchover_to=target,
            message=f"switching mastership to {target} before restarting {victim.name}",
        )
    if not in_sync:
        return RollDecision(
            pending=pending,
            message="waiting for a slave to be in sync before restarting the master",
        )
    return RollDecision(
        delete=victim.name,
        pending=pending,
        message=f"restarting the master; brokerId {in_sync[0]['brokerId']} is in sync",
    )
