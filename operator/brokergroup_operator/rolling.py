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

A DLEDGER group's peers share one StatefulSet; the leader is whichever peer won the last
election. Followers are restarted first (highest ordinal first), one at a time and only while
every peer is Ready and caught up, so a majority stays up; the leader last, and never while it
leads: leadership is first transferred to an up-to-date, caught-up follower (DLedger's
leadership transfer, a write pause of an election's length), and the old leader is then
restarted as the follower it has become.
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
    #: a DLEDGER group's StatefulSet: the membership size the operator has decided (its
    #: annotation; None for other StatefulSets), see ``membership``
    members: int | None = None
    #: its pod template mounts the group's HA secret (``haAuthSecretFile``): whether the group
    #: was created with spec.security.haAuth (see ``handlers.ha_auth_of``)
    ha_auth: bool = False


@dataclass(frozen=True)
class RollDecision:
    delete: str | None = None  # pod to delete now
    pending: list[str] = field(default_factory=list)  # outdated pods, in roll order
    message: str = ""
    switchover_to: str | None = None  # failover groups: move mastership here first
    #: DLEDGER groups: transfer leadership to this pod first (its dLegerSelfId: ``transferee``)
    transfer_to: str | None = None
    transferee: str | None = None

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


def plan_dledger_roll(
    pods: Sequence[PodInfo], sts: StsInfo | None, dledger: Mapping[str, Any]
) -> RollDecision:
    """The next step of a DLEDGER group's rolling update. ``dledger`` is ``.status.dledger``
    as just computed: ``leader`` (pod) and ``peers[]`` with ``pod``, ``id``, ``live`` and
    ``inSync``."""
    if sts is None:
        return RollDecision()
    if sts.observed_generation < sts.generation:
        return RollDecision(message=f"waiting for StatefulSet {sts.name} to observe its spec")
    stale = {p.name for p in _outdated(pods, {sts.name: sts})}
    if not stale:
        return RollDecision()
    leader = dledger.get("leader")

    def ordinal(name: str) -> int:
        tail = name.rpartition("-")[2]
        return int(tail) if tail.isdigit() else -1

    followers = sorted((n for n in stale if n != leader), key=lambda n: -ordinal(n))
    pending = followers + ([str(leader)] if leader in stale else [])
    busy = [p.name for p in pods if p.deleting or not p.ready]
    if busy:
        return RollDecision(
            pending=pending, message=f"waiting for {', '.join(sorted(busy))} to be Ready"
        )
    if not leader:
        return RollDecision(pending=pending, message="waiting for the peers to elect a leader")
    peers = list(dledger.get("peers") or [])
    behind = [str(p.get("pod")) for p in peers if not p.get("inSync")]
    if behind:
        return RollDecision(
            pending=pending,
            message=f"waiting for {', '.join(sorted(behind))} to catch up with the leader",
        )
    if followers:
        victim = followers[0]
        return RollDecision(delete=victim, pending=pending, message=f"restarting follower {victim}")
    fresh = [
        p for p in peers if p.get("pod") != leader and p.get("pod") not in stale and p.get("inSync")
    ]
    if not fresh:
        return RollDecision(
            pending=pending,
            message="waiting for an up-to-date follower to be caught up before the transfer",
        )
    target = min(fresh, key=lambda p: (int(p.get("lagEntries") or 0), ordinal(str(p["pod"]))))
    return RollDecision(
        pending=pending,
        transfer_to=str(target["pod"]),
        transferee=str(target["id"]),
        message=f"transferring leadership to {target['pod']} ({target['id']}) before "
        f"restarting {leader}",
    )
