"""Rolling restarts in the operator's order, never the StatefulSet controller's.

Both StatefulSets use ``updateStrategy: OnDelete``; a pod whose ``controller-revision-hash``
differs from its StatefulSet's ``updateRevision`` is outdated. The rule (Strimzi's): restart
one broker at a time, only when every other broker is Ready; slaves first (highest brokerId
first); the master last and only while a slave is in sync, so the restart never takes the last
up-to-date copy of the log away. A group without slaves has no other copy to protect: its master
is restarted when outdated (a documented outage).
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


@dataclass(frozen=True)
class RollDecision:
    delete: str | None = None  # pod to delete now
    pending: list[str] = field(default_factory=list)  # outdated pods, in roll order
    message: str = ""

    def as_status(self) -> dict[str, Any] | None:
        return {"pending": self.pending, "message": self.message} if self.pending else None


def _outdated(pods: Sequence[PodInfo], sts: StsInfo | None) -> list[PodInfo]:
    if sts is None or not sts.update_revision:
        return []
    return [p for p in pods if p.revision and p.revision != sts.update_revision and not p.deleting]


def plan_roll(
    master_pods: Sequence[PodInfo],
    slave_pods: Sequence[PodInfo],
    master_sts: StsInfo | None,
    slave_sts: StsInfo | None,
    slaves_status: Sequence[Mapping[str, Any]],
    desired_slaves: int,
) -> RollDecision:
    for sts in (master_sts, slave_sts):
        if sts is not None and sts.observed_generation < sts.generation:
            return RollDecision(message=f"waiting for StatefulSet {sts.name} to observe its spec")
    slaves_out = sorted(_outdated(slave_pods, slave_sts), key=lambda p: -p.broker_id)
    master_out = _outdated(master_pods, master_sts)
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
