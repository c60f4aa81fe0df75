"""DLEDGER groups: a quorum of 3 or 5 peers that elect their leader themselves (DLedger).

The operator does not choose the leader; it reads each peer's ``dledger`` section of
``GET /v1/status`` and derives from it: who leads at which term, how far each peer's ledger
is behind the leader's, which pod the client Service must select (the leader, labelled
``brokergroup.io/role=master``), and the Events of a change of leader or term.

A peer's view: ``role`` (LEADER, FOLLOWER, CANDIDATE), ``term``, ``leaderId``,
``ledgerEndIndex``, ``committedIndex`` and, on the leader only, ``peers[]`` with each
follower's ``matchIndex``, ``lagEntries`` and ``live``. Only the leader knows where the
followers are, so a follower's lag is the leader's figure when there is one, else the
difference of the ledger ends the peers report themselves.

Pure: reports in, status and events out; no clock, no network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .manifests import DLEDGER_MEMBERS_ANNOTATION, peer_id, peer_pod, selector_labels
from .spec import GroupSpec
from .status import BrokerReport, Event, _condition

JSON = dict[str, Any]
LEADER = "LEADER"
#: a follower within this many entries of the leader's ledger end counts as caught up
IN_SYNC_MAX_LAG_ENTRIES = 1024


@dataclass(frozen=True)
class Leader:
    """The peer that leads, as the peers report it."""

    pod: str
    id: str
    term: int


def _view(report: BrokerReport | None) -> JSON | None:
    if report is None or report.status is None:
        return None
    view = report.status.get("dledger")
    return dict(view) if isinstance(view, Mapping) else None


def find_leader(spec: GroupSpec, reports: Sequence[BrokerReport]) -> Leader | None:
    """The reachable peer that says it is LEADER, at the highest term if two do (an old
    leader cut off from the others still thinks it leads until it hears of the new term;
    its writes cannot commit without a majority)."""
    best: Leader | None = None
    for ordinal, report in enumerate(reports):
        view = _view(report)
        if view is None or view.get("role") != LEADER:
            continue
        if report.pod is not None and report.pod.deleting:
            continue
        term = int(view.get("term") or 0)
        pod = report.pod.name if report.pod else peer_pod(spec.name, ordinal)
        if best is None or term > best.term:
            best = Leader(pod, str(view.get("selfId") or peer_id(ordinal)), term)
    return best


def leader_event(previous: tuple[str, int] | None, leader: Leader | None) -> Event | None:
    """``LeaderElected`` each time the leader or its term changes (``previous``: the
    (pod, term) last seen, None when none was)."""
    if leader is None or previous == (leader.pod, leader.term):
        return None
    was = f" (was {previous[0]} at term {previous[1]})" if previous else ""
    return Event(
        "Normal",
        "LeaderElected",
        f"{leader.pod} ({leader.id}) is leader at term {leader.term}{was}",
    )


def recorded_leader(status: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """The (pod, term) ``.status.dledger`` last recorded."""
    dledger = (status or {}).get("dledger") or {}
    if dledger.get("leader") and dledger.get("term") is not None:
        return str(dledger["leader"]), int(dledger["term"])
    return None


def role_labels(
    spec: GroupSpec, leader: Leader | None, pods: Mapping[str, str | None]
) -> dict[str, str]:
    """pod -> the role label it must get (``master`` on the leader, ``slave`` on the others),
    only where it differs; ``pods`` maps each live pod to its current label. Without a leader
    nothing changes (an election is under way: the old leader's label points at a pod that
    refuses writes, which is what a client would get from any other)."""
    if leader is None:
        return {}
    want = {pod: ("master" if pod == leader.pod else "slave") for pod in pods}
    return {pod: role for pod, role in want.items() if pods[pod] != role}


def _peer_entry(
    spec: GroupSpec,
    ordinal: int,
    report: BrokerReport,
    leader: Leader | None,
    leader_view: JSON | None,
) -> JSON:
    pod = report.pod
    own = _view(report) or {}
    ident = str(own.get("selfId") or peer_id(ordinal))
    entry: JSON = {
        "id": ident,
        "pod": pod.name if pod else peer_pod(spec.name, ordinal),
        "reachable": report.status is not None,
        "role": own.get("role"),
        "term": own.get("term"),
        "ledgerEndIndex": own.get("ledgerEndIndex"),
        "committedIndex": own.get("committedIndex"),
    }
    if pod is not None and pod.problem:
        entry["problem"] = pod.problem
    if leader is not None and ident == leader.id:
        entry["lagEntries"] = 0
        entry["live"] = True
    elif leader_view is not None:
        seen = next((p for p in leader_view.get("peers") or [] if str(p.get("id")) == ident), None)
        if seen is not None:
            entry["live"] = bool(seen.get("live"))
            if seen.get("lagEntries") is not None:
                entry["lagEntries"] = max(0, int(seen["lagEntries"]))
            if seen.get("matchIndex") is not None:
                entry["matchIndex"] = int(seen["matchIndex"])
        if "lagEntries" not in entry and own.get("ledgerEndIndex") is not None:
            end = leader_view.get("ledgerEndIndex")
            if end is not None:
                entry["lagEntries"] = max(0, int(end) - int(own["ledgerEndIndex"]))
    if "live" not in entry:
        entry["live"] = report.status is not None
    entry["inSync"] = bool(
        entry["live"]
        and entry.get("lagEntries") is not None
        and entry["lagEntries"] <= IN_SYNC_MAX_LAG_ENTRIES
    )
    return {k: v for k, v in entry.items() if v is not None}


def members_of(sts_meta: Mapping[str, Any], sts_spec: Mapping[str, Any]) -> int | None:
    """A DLEDGER group's membership size as applied to its StatefulSet: the members
    annotation, or (a StatefulSet from before membership change) how many peers its pod
    template's ``HABROKER_dLegerPeers`` names; None for any other StatefulSet."""
    annotations = sts_meta.get("annotations") or {}
    value = annotations.get(DLEDGER_MEMBERS_ANNOTATION)
    if value is not None and str(value).isdigit():
        return int(value)
    containers = ((sts_spec.get("template") or {}).get("spec") or {}).get("containers") or []
    for container in containers:
        for env in container.get("env") or []:
            if env.get("name") == "HABROKER_dLegerPeers" and env.get("value"):
                return len([p for p in str(env["value"]).split(";") if p])
    return None


def peer_selector(group: str) -> str:
    """``.status.selector`` of a DLEDGER group: every peer (the group's pods)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(group).items()))


def compute_dledger_status(
    spec: GroupSpec,
    generation: int,
    reports: Sequence[BrokerReport],
    previous: Mapping[str, Any] | None,
    now: str,
    *,
    rollout: JSON | None = None,
    extra_conditions: Sequence[JSON] = (),
) -> tuple[JSON, list[Event]]:
    """``.status`` of a DLEDGER group from its peers' reports (``reports[i]``: ordinal i),
    and the Events of its transitions (LeaderElected is the leader daemon's)."""
    previous = previous or {}
    prev_conditions = {c.get("type"): c for c in previous.get("conditions") or [] if c}
    leader = find_leader(spec, reports)
    leader_report = next(
        (r for r in reports if r.pod is not None and leader and r.pod.name == leader.pod), None
    )
    leader_view = _view(leader_report)
    peers = [_peer_entry(spec, i, report, leader, leader_view) for i, report in enumerate(reports)]
    majority = spec.replicas // 2 + 1
    live = [p for p in peers if p.get("live")]
    followers = [p for p in peers if leader is None or p["pod"] != leader.pod]
    behind = [p for p in followers if not p.get("inSync")]
    caught_up = [p for p in followers if p.get("inSync")]
    terms = [int(p["term"]) for p in peers if p.get("term") is not None]

    dledger: JSON = {
        "group": spec.name,
        "leader": leader.pod if leader else None,
        "leaderId": leader.id if leader else None,
        "term": leader.term if leader else (max(terms) if terms else None),
        "committedIndex": (leader_view or {}).get("committedIndex"),
        "ledgerEndIndex": (leader_view or {}).get("ledgerEndIndex"),
        "peers": peers,
    }
    if dledger["committedIndex"] is None:
        dledger["committedIndex"] = (previous.get("dledger") or {}).get("committedIndex")
    dledger = {k: v for k, v in dledger.items() if v is not None}

    master_out: JSON = {
        "pod": leader.pod if leader else None,
        "reachable": leader_report is not None,
    }
    if leader_report is not None and leader_report.pod is not None:
        if leader_report.pod.ip:
            master_out["address"] = f"{leader_report.pod.ip}:{spec.client_port}"
        mstatus = leader_report.status or {}
        if mstatus.get("maxOffset") is not None:
            master_out["maxOffset"] = int(mstatus["maxOffset"])
    master_out = {k: v for k, v in master_out.items() if v is not None}
    slaves = []
    for ordinal, (peer, report) in enumerate(zip(peers, reports, strict=True)):
        if leader is not None and peer["pod"] == leader.pod:
            continue
        broker_id = (report.status or {}).get("brokerId")
        entry: JSON = {
            "brokerId": int(broker_id) if broker_id is not None else ordinal + 1,
            "pod": peer["pod"],
            "connected": bool(peer.get("live")),
            "inSync": bool(peer.get("inSync")),
        }
        if report.pod is not None and report.pod.ip:
            entry["address"] = f"{report.pod.ip}:{spec.client_port}"
        if peer.get("problem"):
            entry["problem"] = peer["problem"]
        slaves.append(entry)

    # -- conditions ----------------------------------------------------------------------
    cond = [_condition("SpecValid", True, "SpecAccepted", "", prev_conditions, now, generation)]
    leader_pod_ready = bool(leader_report and leader_report.pod and leader_report.pod.ready)
    reachable = sum(1 for p in peers if p["reachable"])
    if leader is None:
        ready = (
            False,
            "NoLeader",
            f"no peer is leader: {reachable}/{spec.replicas} peers answer, a leader needs "
            f"{majority} to elect it",
        )
    elif not leader_pod_ready:
        ready = (False, "LeaderNotReady", f"leader {leader.pod} is not Ready")
    else:
        ready = (True, "LeaderServing", f"leader {leader.pod} ({leader.id}) serves writes")
    cond.append(_condition("Ready", *ready, prev_conditions, now, generation))
    if leader is None:
        repl = (False, "NoLeader", "no leader replicates")
    elif len(live) < majority:
        repl = (
            False,
            "QuorumLost",
            f"{len(live)}/{spec.replicas} peers live: a write needs {majority}",
        )
    elif len(live) < spec.replicas:
        down = ", ".join(p["pod"] for p in peers if not p.get("live"))
        repl = (True, "QuorumLive", f"{len(live)}/{spec.replicas} peers live; not live: {down}")
    else:
        repl = (True, "AllPeersLive", f"{spec.replicas}/{spec.replicas} peers live")
    cond.append(_condition("Replicating", *repl, prev_conditions, now, generation))
    if behind:
        sync = (
            False,
            "PeersBehind",
            f"{len(caught_up)}/{spec.replicas - 1} followers caught up; behind: "
            + ", ".join(p["pod"] for p in behind),
        )
    else:
        sync = (True, "AllPeersCaughtUp", f"{len(caught_up)} followers caught up")
    cond.append(_condition("InSync", *sync, prev_conditions, now, generation))
    for extra in extra_conditions:
        cond.append(
            _condition(
                extra["type"],
                extra["status"] == "True",
                extra.get("reason", ""),
                extra.get("message", ""),
                prev_conditions,
                now,
                generation,
            )
        )

    # -- phase ---------------------------------------------------------------------------
    if rollout and rollout.get("pending"):
        phase = "Updating"
    elif not ready[0]:
        had = (previous.get("dledger") or {}).get("leader")
        phase = "Unavailable" if had else "Pending"
    elif not behind and len(live) == spec.replicas:
        phase = "Running"
    else:
        phase = "Degraded"

    status: JSON = {
        "observedGeneration": generation,
        "phase": phase,
        "inSyncSlaves": f"{len(caught_up)}/{spec.replicas - 1}",
        "slaveReplicas": sum(1 for r in reports if r.pod is not None and not r.pod.deleting),
        "selector": peer_selector(spec.name),
        "conditions": cond,
        "master": master_out,
        "slaves": slaves,
        "dledger": dledger,
    }
    if rollout and rollout.get("pending"):
        status["rollout"] = dict(rollout)
    return status, dledger_events(previous, status)


def dledger_events(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[Event]:
    """``LeaderLost`` when a group that had a leader has none; followers falling behind
    or catching up (``PeerBehind``, ``PeerCaughtUp``). Nothing on the very first status."""
    events: list[Event] = []
    before = previous.get("dledger")
    if before is None:
        return events
    after = status.get("dledger") or {}
    if before.get("leader") and not after.get("leader"):
        events.append(
            Event(
                "Warning",
                "LeaderLost",
                f"no peer is leader any more (was {before['leader']} at term "
                f"{before.get('term')}): an election is under way",
            )
        )
    old = {p.get("id"): p for p in before.get("peers") or []}
    for peer in after.get("peers") or []:
        was = old.get(peer.get("id"))
        if was is None or not after.get("leader"):
            continue
        if was.get("inSync") and not peer.get("inSync"):
            events.append(
                Event(
                    "Warning",
                    "PeerBehind",
                    f"{peer['pod']} ({peer['id']}) fell behind the leader: "
                    f"{peer.get('lagEntries', '?')} entries, live={peer.get('live')}",
                )
            )
        elif not was.get("inSync") and peer.get("inSync"):
            events.append(
                Event("Normal", "PeerCaughtUp", f"{peer['pod']} ({peer['id']}) caught up")
            )
    return events
