"""Pure status computation: pods + each broker's ``/v1/status`` (or the error) -> ``.status``.

The master's view of a slave (its ack offset, ``inSync``) is authoritative because it is what
SYNC_MASTER writes wait on. The classic HA protocol carries no brokerId, so the master lists
slaves by the source address of their HA connection. We match a slave by, in order: that exact
address as the slave itself reports it (``slave.localAddress``), the brokerId the slave
announced to the master, and last the host of the address against the pod's IP. When the master
cannot be reached, a slave's own report is used instead.

Nothing here reads the clock or the network: ``now`` comes in, events go out as values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .manifests import SLAVE, master_pod, selector_labels, slave_pod
from .spec import GroupSpec

JSON = dict[str, Any]


@dataclass(frozen=True)
class PodInfo:
    """What the operator needs from a Pod object (kept in a kopf index)."""

    name: str
    broker_id: int
    uid: str = ""
    ip: str | None = None
    #: the IP of the node it runs on (what a node port is reached at)
    host_ip: str | None = None
    ready: bool = False
    phase: str = "Pending"
    revision: str | None = None
    deleting: bool = False
    role: str | None = None  # the brokergroup.io/role label (failover groups)
    #: what keeps the broker container from running, as the kubelet names it
    #: ("ImagePullBackOff: ...", "CrashLoopBackOff (last exit: OOMKilled)", "Unschedulable: ...")
    problem: str | None = None
    restarts: int = 0
    #: why the container last ended ("OOMKilled", "Error (exit 1)"), if it ever did
    last_exit: str | None = None


#: container waiting reasons that mean the broker cannot run until something changes
STUCK_REASONS = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


def container_facts(
    pod_status: Mapping[str, Any], container: str
) -> tuple[str | None, int, str | None]:
    """(problem, restarts, last exit) of one container from a Pod's ``status``: the reasons
    the kubelet gives, so status and Events name ImagePullBackOff or OOMKilled instead of
    calling the broker merely unreachable."""
    problem = None
    for cond in pod_status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            problem = f"{cond.get('reason') or 'Unschedulable'}: {cond.get('message', '')}".strip()
    found: Mapping[str, Any] = next(
        (c for c in pod_status.get("containerStatuses") or [] if c.get("name") == container), {}
    )
    last = (found.get("lastState") or {}).get("terminated") or {}
    last_exit = None
    if last:
        last_exit = str(last.get("reason") or "Terminated")
        if last_exit != "OOMKilled" and last.get("exitCode") is not None:
            last_exit += f" (exit {last['exitCode']})"
    waiting = (found.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason")
    if reason in STUCK_REASONS:
        problem = str(reason)
        if reason == "CrashLoopBackOff" and last_exit:
            problem += f" (last exit: {last_exit})"
        elif waiting.get("message"):
            problem += f": {waiting['message']}"
    return problem, int(found.get("restartCount") or 0), last_exit


@dataclass(frozen=True)
class BrokerReport:
    """One broker's poll result: its pod (if any) and its status JSON or the error."""

    pod: PodInfo | None
    status: JSON | None = None
    error: str | None = None

    @property
    def reachable(self) -> bool:
        return self.status is not None


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Observation:
    """Everything compute_status needs besides the spec."""

    master: BrokerReport
    slaves: Mapping[int, BrokerReport]
    read_policy: JSON | None = None
    rollout: JSON | None = None
    spec_error: tuple[str, str] | None = None  # (reason, message)
    extra_conditions: Sequence[JSON] = field(default_factory=list)
    #: a master outage that began and ended since the last sweep (seen by the pod watch):
    #: Ready keeps its value but shows the transition and what happened
    master_blip: str | None = None


def _host(address: str | None) -> str | None:
    if not address:
        return None
    host, _, _ = address.rpartition(":")
    return host.strip("[]") or None


def _address(pod: PodInfo | None, port: int) -> str | None:
    return f"{pod.ip}:{port}" if pod is not None and pod.ip else None


def master_view_of_slaves(master_status: JSON | None) -> dict[str, JSON]:
    """The master's slave entries keyed by the host of their HA connection.

    A slave that reconnected can briefly appear twice; the entry that reported last wins.
    """
    entries: dict[str, JSON] = {}
    if not master_status:
        return entries
    for entry in (master_status.get("master") or {}).get("slaves") or []:
        host = _host(entry.get("address"))
        if host is None:
            continue
        keys = [host, f"addr:{entry['address']}"]
        if entry.get("brokerId") is not None:
            keys.append(f"id:{entry['brokerId']}")
        age = entry.get("lastReportAgeMs", 0) or 0
        for key in keys:
            old = entries.get(key)
            if old is None or age < (old.get("lastReportAgeMs", 0) or 0):
                entries[key] = entry
    return entries


def slave_entry(
    broker_id: int,
    report: BrokerReport,
    master_max: int | None,
    master_view: Mapping[str, JSON],
    master_reachable: bool,
    spec: GroupSpec,
    group: str,
) -> JSON:
    pod = report.pod
    entry: JSON = {
        "brokerId": broker_id,
        "pod": pod.name if pod else slave_pod(group, broker_id),
        "address": _address(pod, spec.client_port),
        "ackOffset": None,
        "lagBytes": None,
        "connected": False,
        "inSync": False,
    }
    if pod is not None and pod.problem:
        entry["problem"] = pod.problem
    own = (report.status or {}).get("slave") or {}
    if own.get("divergence"):
        entry["divergence"] = str(own["divergence"].get("reason") or own["divergence"])
    seen = master_view.get(f"addr:{own.get('localAddress')}") or master_view.get(f"id:{broker_id}")
    if seen is None and pod is not None and pod.ip:
        seen = master_view.get(pod.ip)
    if seen is not None:
        entry["ackOffset"] = int(seen.get("ackOffset", 0))
        entry["connected"] = True
        entry["inSync"] = bool(seen.get("inSync", False))
        if master_max is not None:
            entry["lagBytes"] = max(0, master_max - entry["ackOffset"])
        elif seen.get("lagBytes") is not None:
            entry["lagBytes"] = int(seen["lagBytes"])
        # in sync means caught up: the master's own rule (haMaxGapNotInSync, a recent report)
        # and no more than spec.inSyncMaxLagBytes behind
        if entry.get("lagBytes", 0) > spec.in_sync_max_lag_bytes:
            entry["inSync"] = False
    elif report.status is not None:
        # The master does not list it (or cannot be reached): trust the slave's own view of
        # its offset, but it is only "connected" if the master is unreachable to check.
        max_offset = own.get("maxOffset", report.status.get("maxOffset"))
        entry["ackOffset"] = int(max_offset) if max_offset is not None else None
        entry["connected"] = bool(own.get("connected")) and not master_reachable
        if master_max is not None and entry["ackOffset"] is not None:
            entry["lagBytes"] = max(0, master_max - entry["ackOffset"])
    return {k: v for k, v in entry.items() if v is not None}


def _condition(
    ctype: str,
    ok: bool,
    reason: str,
    message: str,
    previous: Mapping[str, JSON],
    now: str,
    generation: int,
    flipped: bool = False,
) -> JSON:
    """``flipped``: the condition went the other way and back since the last status (an
    outage shorter than a poll), so it transitions now although its value is unchanged."""
    status = "True" if ok else "False"
    prev = previous.get(ctype)
    changed = prev is None or prev.get("status") != status or flipped
    since = now if changed or prev is None else prev.get("lastTransitionTime")
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now,
        "observedGeneration": generation,
    }


def _ids(entries: Sequence[JSON]) -> str:
    return ", ".join(str(e["brokerId"]) for e in entries)


def slave_selector(group: str) -> str:
    """``.status.selector``, the scale subresource's label selector (what a
    HorizontalPodAutoscaler reads pod metrics by): the slave StatefulSet's pods."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(group, SLAVE).items()))


def slave_replicas(slaves: Mapping[int, BrokerReport]) -> int:
    """``.status.slaveReplicas``, the scale subresource's current count: slave pods that
    exist and are not being deleted (``kubectl scale`` sets ``spec.slaves``)."""
    return sum(1 for r in slaves.values() if r.pod is not None and not r.pod.deleting)


def compute_status(
    spec: GroupSpec,
    generation: int,
    obs: Observation,
    previous: Mapping[str, Any] | None,
    now: str,
) -> tuple[JSON, list[Event]]:
    """The new ``.status`` and the Events its transitions deserve."""
    previous = previous or {}
    prev_conditions = {c.get("type"): c for c in previous.get("conditions") or [] if c}
    master = obs.master
    mstatus = master.status or {}
    master_reachable = master.reachable and bool(mstatus.get("master") is not None)
    master_max = int(mstatus["maxOffset"]) if master_reachable and "maxOffset" in mstatus else None
    view = master_view_of_slaves(mstatus if master_reachable else None)

    master_out: JSON = {
        "pod": master.pod.name if master.pod else master_pod(spec.name),
        "reachable": master_reachable,
    }
    if master.pod and master.pod.ip:
        master_out["address"] = f"{master.pod.ip}:{spec.client_port}"
    if master_max is not None:
        master_out["maxOffset"] = master_max
        if mstatus.get("confirmOffset") is not None:
            master_out["confirmOffset"] = int(mstatus["confirmOffset"])
    elif (previous.get("master") or {}).get("maxOffset") is not None:
        # keep the last known offset visible while the master is away
        master_out["maxOffset"] = previous["master"]["maxOffset"]

    slaves = [
        slave_entry(
            bid,
            obs.slaves.get(bid, BrokerReport(pod=None)),
            master_max,
            view,
            master_reachable,
            spec,
            spec.name,
        )
        for bid in range(1, spec.slaves + 1)
    ]
    in_sync = [s for s in slaves if s.get("inSync")]
    connected = [s for s in slaves if s.get("connected")]
    lags = [s["lagBytes"] for s in slaves if s.get("lagBytes") is not None]
    max_lag = max(lags) if lags else 0

    # -- conditions ----------------------------------------------------------------------
    cond = []
    if obs.spec_error:
        reason, message = obs.spec_error
        cond.append(
            _condition("SpecValid", False, reason, message, prev_conditions, now, generation)
        )
    else:
        cond.append(
            _condition("SpecValid", True, "SpecAccepted", "", prev_conditions, now, generation)
        )

    master_pod_ready = bool(master.pod and master.pod.ready)
    if master.pod is not None and master.pod.problem:
        master_out["problem"] = master.pod.problem
    if not master_reachable and master.pod is not None and master.pod.problem:
        reason = master.pod.problem.split(":")[0].split(" ")[0]
        ready = (False, reason, f"master {master_out['pod']}: {master.pod.problem}")
    elif not master_reachable:
        why = master.error or ("no master pod" if master.pod is None else "not polled yet")
        ready = (False, "MasterUnreachable", f"master {master_out['pod']}: {why}")
    elif not master_pod_ready:
        ready = (False, "MasterNotReady", f"master {master_out['pod']} is not Ready")
    elif spec.replication_mode == "SYNC" and not in_sync:
        ready = (
            False,
            "NoInSyncSlave",
            "SYNC master has no in-sync slave: writes are not replicated",
        )
    else:
        ready = (True, "MasterServing", f"master {master_out['pod']} serves writes")
        if obs.master_blip:
            ready = (True, "MasterRecovered", f"{ready[2]}; since the last poll: {obs.master_blip}")
    cond.append(
        _condition("Ready", *ready, prev_conditions, now, generation, flipped=bool(obs.master_blip))
    )

    if spec.slaves == 0:
        repl = (False, "NoSlaves", "spec.slaves is 0")
        sync = (False, "NoSlaves", "spec.slaves is 0")
    else:
        missing = [s for s in slaves if not s.get("connected")]
        if missing:
            repl = (
                bool(connected),
                "SlavesDisconnected",
                f"{len(connected)}/{spec.slaves} slaves connected; "
                f"not connected: brokerId {_ids(missing)}",
            )
        else:
            repl = (True, "AllSlavesConnected", f"{spec.slaves} slaves connected")
        behind = [s for s in slaves if not s.get("inSync")]
        if behind:
            sync = (
                False,
                "SlavesOutOfSync",
                f"{len(in_sync)}/{spec.slaves} slaves in sync; behind: brokerId {_ids(behind)}",
            )
        else:
            sync = (True, "AllSlavesInSync", f"{spec.slaves} slaves in sync")
    cond.append(_condition("Replicating", *repl, prev_conditions, now, generation))
    cond.append(_condition("InSync", *sync, prev_conditions, now, generation))
    diverged = [s for s in slaves if s.get("divergence")]
    history = (
        (
            False,
            "SlaveDiverged",
            f"brokerId {_ids(diverged)} refuse(s) the master: {diverged[0]['divergence']}",
        )
        if diverged
        else (True, "OneHistory", "every reachable slave's log is a prefix of the master's")
    )
    cond.append(_condition("HistoryConsistent", *history, prev_conditions, now, generation))
    for extra in obs.extra_conditions:
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
    if obs.spec_error:
        phase = "Invalid"
    elif obs.rollout and obs.rollout.get("pending"):
        phase = "Updating"
    elif not master_reachable or not master_pod_ready:
        phase = "Pending" if not (previous.get("master") or {}).get("reachable") else "Unavailable"
    elif ready[0] and (spec.slaves == 0 or len(in_sync) == spec.slaves):
        phase = "Running"
    else:
        phase = "Degraded"

    status: JSON = {
        "observedGeneration": generation,
        "phase": phase,
        "inSyncSlaves": f"{len(in_sync)}/{spec.slaves}",
        "slaveReplicas": slave_replicas(obs.slaves),
        "selector": slave_selector(spec.name),
        "maxLagBytes": max_lag,
        "conditions": cond,
        "master": master_out,
        "slaves": slaves,
    }
    if obs.read_policy is not None:
        status["readPolicy"] = dict(obs.read_policy)
    if obs.rollout and obs.rollout.get("pending"):
        status["rollout"] = dict(obs.rollout)
    return status, transition_events(previous, status)


def transition_events(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[Event]:
    """Events for what changed between two statuses (nothing on the very first status)."""
    events: list[Event] = []
    prev_master = previous.get("master") or {}
    new_master = status.get("master") or {}
    if (
        prev_master.get("address")
        and new_master.get("address")
        and prev_master["address"] != new_master["address"]
    ):
        events.append(
            Event(
                "Normal",
                "MasterChanged",
                f"master {new_master.get('pod')} moved from {prev_master['address']} "
                f"to {new_master['address']}"
                if prev_master.get("pod") == new_master.get("pod")
                else f"master is now {new_master.get('pod')} at {new_master['address']} "
                f"(was {prev_master.get('pod')} at {prev_master['address']})",
            )
        )
    if prev_master.get("reachable") and not new_master.get("reachable"):
        events.append(
            Event("Warning", "MasterUnreachable", f"master {new_master.get('pod')} does not answer")
        )
    prev_slaves = {s.get("brokerId"): s for s in previous.get("slaves") or []}
    for slave in status.get("slaves") or []:
        before = prev_slaves.get(slave["brokerId"])
        if before is None:
            continue
        who = f"slave brokerId={slave['brokerId']} ({slave['pod']})"
        if before.get("connected") and not slave.get("connected"):
            events.append(
                Event("Warning", "SlaveDisconnected", f"{who} disconnected from the master")
            )
        elif before.get("inSync") and not slave.get("inSync"):
            events.append(
                Event(
                    "Warning",
                    "SlaveOutOfSync",
                    f"{who} fell out of sync: {slave.get('lagBytes', '?')} bytes behind",
                )
            )
        if not before.get("inSync") and slave.get("inSync"):
            events.append(Event("Normal", "SlaveCaughtUp", f"{who} caught up and is in sync"))
    prev_read = (previous.get("readPolicy") or {}).get("whichBrokerWhenConsumeSlowly")
    new_read = (status.get("readPolicy") or {}).get("whichBrokerWhenConsumeSlowly")
    if prev_read is not None and new_read is not None and prev_read != new_read:
        events.append(
            Event(
                "Normal",
                "ReadPolicyChanged",
                f"slow consumers now read from brokerId {new_read} (was {prev_read})",
            )
        )
    return events


def pod_transitions(
    old: PodInfo | None, new: PodInfo | None, role: str, not_ready_for: float | None
) -> list[Event]:
    """Events for one broker pod's change as the pod watch saw it (between status polls, so
    a two-second outage is not missed). ``not_ready_for``: seconds since it stopped being
    Ready, if it did."""
    seen = new or old
    who = f"{role} {seen.name if seen is not None else '?'}"
    events: list[Event] = []
    was_ready = old is not None and old.ready
    if was_ready and (new is None or not new.ready or new.deleting):
        why = (
            "deleted"
            if new is None or new.deleting
            else (new.problem or "its readiness probe fails")
        )
        events.append(Event("Warning", "BrokerNotReady", f"{who} is not Ready: {why}"))
    elif new is not None and new.ready and not was_ready and not_ready_for is not None:
        events.append(
            Event("Normal", "BrokerReady", f"{who} is Ready again after {not_ready_for:.1f} s")
        )
    if new is not None and new.problem and (old is None or old.problem != new.problem):
        events.append(Event("Warning", "BrokerPodFailing", f"{who}: {new.problem}"))
    if new is not None and old is not None and new.restarts > old.restarts:
        last = f"; last exit: {new.last_exit}" if new.last_exit else ""
        events.append(
            Event(
                "Warning",
                "BrokerRestarted",
                f"{who}'s broker container restarted (restart {new.restarts}{last})",
            )
        )
    return events


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> JSON:
    """A merge patch turning ``old`` into ``new`` (empty when nothing changed).

    Top-level keys that disappeared are set to None so the merge patch removes them.
    """
    old = old or {}
    patch: JSON = {k: v for k, v in new.items() if old.get(k) != v}
    for key in old:
        if key not in new and key in MANAGED_STATUS_KEYS:
            patch[key] = None
    return patch


MANAGED_STATUS_KEYS = frozenset(
    {
        "observedGeneration",
        "phase",
        "inSyncSlaves",
        "slaveReplicas",
        "selector",
        "maxLagBytes",
        "conditions",
        "master",
        "slaves",
        "readPolicy",
        "rollout",
        "dledger",
    }
)
