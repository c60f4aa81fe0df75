"""Who is master: the assignment the operator keeps in ``.status.failover``, and the election.

With ``spec.failover.enabled`` the operator is the group's controller (RocketMQ 5's idea, for
classic groups): which pod is master, every pod's brokerId and the current epoch are state the
operator owns, not facts derived from StatefulSet names. Each change of master bumps the epoch;
brokers refuse calls from an older epoch, so an old master that wakes up cannot be confirmed by
a stale decision.

Pure: no I/O, no clock. :mod:`failover` carries the decisions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .manifests import master_pod, slave_pod
from .spec import GroupSpec

JSON = dict[str, Any]


@dataclass(frozen=True)
class Assignment:
    """Master pod, brokerId per pod, and the epoch every broker is told."""

    epoch: int
    master: str
    broker_ids: Mapping[str, int]
    #: brokerIds the master reported in sync at its last report (only these may be elected)
    in_sync: frozenset[int] = field(default_factory=frozenset)

    def broker_id(self, pod: str) -> int | None:
        return self.broker_ids.get(pod)

    def pod_of(self, broker_id: int) -> str | None:
        return next((p for p, i in self.broker_ids.items() if i == broker_id), None)

    @property
    def slaves(self) -> list[str]:
        """Slave pods in brokerId order."""
        return sorted((p for p in self.broker_ids if p != self.master), key=self.broker_ids.get)  # type: ignore[arg-type]

    def to_status(self) -> JSON:
        return {
            "epoch": self.epoch,
            "master": self.master,
            "brokerIds": dict(sorted(self.broker_ids.items())),
            "inSyncSet": sorted(self.in_sync),
        }


def default_assignment(spec: GroupSpec) -> Assignment:
    """The StatefulSets' own layout: ``<group>-master-0`` is brokerId 0, slave k is k + 1."""
    ids = {master_pod(spec.name): 0}
    ids.update({slave_pod(spec.name, i): i for i in range(1, spec.slaves + 1)})
    return Assignment(epoch=1, master=master_pod(spec.name), broker_ids=ids)


def assignment_from_status(spec: GroupSpec, status: Mapping[str, Any] | None) -> Assignment:
    """The recorded assignment fitted to the spec's current size.

    A scale-up adds pods with their default brokerId (or the lowest free one); a scale-down
    drops slave pods the StatefulSet no longer has. The master is never dropped here.
    """
    recorded = (status or {}).get("failover") or {}
    base = default_assignment(spec)
    if not recorded.get("master") or not recorded.get("brokerIds"):
        return base
    ids = {str(p): int(i) for p, i in dict(recorded["brokerIds"]).items()}
    master = str(recorded["master"])
    wanted = set(base.broker_ids)
    ids = {p: i for p, i in ids.items() if p in wanted or p == master}
    for pod in sorted(wanted - set(ids), key=base.broker_ids.__getitem__):
        taken = set(ids.values())
        default = base.broker_ids[pod]
        ids[pod] = (
            default
            if default not in taken
            else next(i for i in range(1, len(ids) + 2) if i not in taken)
        )
    return Assignment(
        epoch=max(1, int(recorded.get("epoch") or 1)),
        master=master,
        broker_ids=ids,
        in_sync=frozenset(int(i) for i in recorded.get("inSyncSet") or []),
    )


def promote(current: Assignment, pod: str) -> Assignment:
    """``pod`` becomes master (brokerId 0) at the next epoch; the old master takes its id."""
    if pod not in current.broker_ids:
        raise ValueError(f"{pod} is not a member of the group")
    ids = dict(current.broker_ids)
    ids[current.master], ids[pod] = ids[pod], 0
    return Assignment(epoch=current.epoch + 1, master=pod, broker_ids=ids, in_sync=frozenset())


@dataclass(frozen=True)
class Candidate:
    """A slave as the election sees it after every reachable slave was fenced."""

    pod: str
    broker_id: int
    max_offset: int
    in_sync: bool  # in the master's in-sync set at its last report


@dataclass(frozen=True)
class Election:
    winner: Candidate | None
    reason: str


def elect(candidates: Iterable[Candidate], preferred: str | None = None) -> Election:
    """The in-sync slave with the highest offset; ties go to ``preferred``, then the lowest
    brokerId. Never a slave outside the in-sync set: it may lack acknowledged messages."""
    pool = list(candidates)
    eligible = [c for c in pool if c.in_sync]
    if not eligible:
        if not pool:
            return Election(None, "no slave is reachable")
        names = ", ".join(sorted(c.pod for c in pool))
        return Election(
            None, f"no reachable slave was in the master's in-sync set (reachable: {names})"
        )
    best = max(c.max_offset for c in eligible)
    top = sorted(
        (c for c in eligible if c.max_offset == best),
        key=lambda c: (c.pod != preferred, c.broker_id),
    )
    winner = top[0]
    others = [c for c in pool if c is not winner]
    why = f"in sync with the highest offset {winner.max_offset}"
    if len(top) > 1:
        why += (
            " (tie: " + ("preferredMaster" if winner.pod == preferred else "lowest brokerId") + ")"
        )
    if others:
        why += "; others: " + ", ".join(
            f"{c.pod}@{c.max_offset}{'' if c.in_sync else ' (not in sync)'}" for c in others
        )
    return Election(winner, why)


def with_in_sync(current: Assignment, in_sync: Iterable[int]) -> Assignment:
    return replace(current, in_sync=frozenset(in_sync))
