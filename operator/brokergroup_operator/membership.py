"""DLEDGER groups: changing spec.replicas (3 ↔ 5) one peer at a time, never losing quorum.

Two numbers describe where a group is: ``members``, the membership the operator has decided
(the first ``members`` peers; the ConfigMap's ``dLegerPeers`` and what every peer is told),
and ``replicas``, how many pods the peers StatefulSet runs.  One step moves ``members`` by one
toward spec.replicas; it is finished when every running peer reports that membership, and only
then do the pods follow (a new pod is created after every member knows it, a leaving pod is
removed after every member has forgotten it).  Two memberships that differ by one peer always
share a majority, so whatever mix of the old and the new list the peers hold during a step,
no two leaders can be elected in one term and no committed entry is lost (the single-server
change of Raft, Ongaro's thesis §4.1).  A step starts only when the group has a leader, every
peer is live and caught up and no rolling restart is pending; a leaving leader first hands
leadership to a caught-up peer.

Pure: the peers' reports in, one decision out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .manifests import peer_id

JSON = dict[str, Any]


@dataclass(frozen=True)
class MembershipDecision:
    members: int
    replicas: int
    #: pod -> ``dLegerPeers`` to put on it (``PUT /v1/admin/dledger/peers``)
    tell: dict[str, str] = field(default_factory=dict)
    #: (leader pod, transferee id): move leadership off the peer that leaves
    transfer: tuple[str, str] | None = None
    message: str = ""

    @property
    def changing(self) -> bool:
        return bool(self.message)


def reported_members(report_status: Mapping[str, Any] | None) -> list[str] | None:
    """The membership a peer reports (its ``dledger.peers`` ids), None when it does not."""
    view = (report_status or {}).get("dledger")
    if not isinstance(view, Mapping) or not isinstance(view.get("peers"), list):
        return None
    return [str(p.get("id")) for p in view["peers"]]


def plan_membership(
    target: int,
    members: int,
    replicas: int,
    views: Sequence[tuple[str, list[str] | None]],
    dledger: Mapping[str, Any],
    peers_text: str,
    *,
    rolling: bool = False,
) -> MembershipDecision:
    """The next step toward ``target`` peers.

    ``views[i]``: (pod, the membership it reports or None if it does not answer) for each pod
    the StatefulSet runs (ordinal i); ``dledger`` is ``.status.dledger`` as just computed
    (``leader`` pod, ``peers[]`` with ``pod``, ``id``, ``live``, ``inSync``); ``peers_text``
    the ``dLegerPeers`` of ``members`` peers.
    """
    want = [peer_id(i) for i in range(members)]
    tell = {pod: peers_text for pod, seen in views if seen is not None and seen != want}
    if tell:
        return MembershipDecision(
            members,
            replicas,
            tell,
            message=f"telling {', '.join(sorted(tell))} the membership {';'.join(want)}",
        )
    confirmed = [pod for pod, seen in views[: min(members, replicas)] if seen == want]
    if len(confirmed) < min(members, replicas):
        count = min(members, replicas)
        silent = [pod for pod, seen in views[:count] if seen is None]
        silent += [f"peer {peer_id(i)} (no pod yet)" for i in range(len(views), count)]
        if members == replicas == target:
            return MembershipDecision(members, replicas)  # a peer is down: not a change
        return MembershipDecision(
            members,
            replicas,
            message=f"waiting for {', '.join(silent)} to answer before the next step",
        )
    if replicas != members:
        verb = "starting" if replicas < members else "removing"
        pods = [views[i][0] for i in range(members, replicas)] if replicas > members else []
        what = ", ".join(pods) or f"peer {peer_id(members - 1)}"
        return MembershipDecision(
            members,
            members,
            message=f"{verb} {what}: every member knows the membership {';'.join(want)}",
        )
    if members == target:
        return MembershipDecision(members, replicas)
    # a new step: only from a healthy, settled group
    leader = dledger.get("leader")
    peers = list(dledger.get("peers") or [])
    resize = f"{members} → {target} peers"
    if rolling:
        return MembershipDecision(
            members, replicas, message=f"{resize}: waiting for the rolling restart to finish"
        )
    if not leader:
        return MembershipDecision(members, replicas, message=f"{resize}: waiting for a leader")
    behind = sorted(
        str(p.get("pod"))
        for p in peers
        if not p.get("live") or not p.get("inSync") or p.get("role") not in ("LEADER", "FOLLOWER")
    )
    if behind or len(peers) < members:
        return MembershipDecision(
            members,
            replicas,
            message=f"{resize}: waiting for {', '.join(behind) or 'every peer'} to be live, "
            "caught up and following the leader",
        )
    if members < target:
        return MembershipDecision(
            members + 1, replicas, message=f"{resize}: adding {peer_id(members)}"
        )
    leaving = views[members - 1][0]
    if leader == leaving:
        fresh = [p for p in peers if p.get("pod") != leaving and p.get("inSync")]
        best = min(fresh, key=lambda p: (int(p.get("lagEntries") or 0), str(p.get("pod"))))
        return MembershipDecision(
            members,
            replicas,
            transfer=(leaving, str(best["id"])),
            message=f"{resize}: moving leadership from {leaving} to {best['pod']} before it leaves",
        )
    return MembershipDecision(
        members - 1, replicas, message=f"{resize}: removing {peer_id(members - 1)}"
    )
