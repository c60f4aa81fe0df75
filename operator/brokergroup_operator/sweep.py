"""One status sweep of one group: poll its brokers, rewire, apply the read policy, take one
rolling step, and compute the new status. The I/O is here; every decision is made by the pure
modules. No kopf in this module: the kopf timer calls :func:`sweep` and posts what it returns,
and tests drive it against real broker processes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .brokerapi import BrokerAPI, BrokerAPIError
from .dledger import compute_dledger_status
from .election import assignment_from_status
from .external import ExternalDoor, external_addresses, external_peer_addresses
from .manifests import (
    dledger_peers,
    master_name,
    peer_id,
    peer_pod,
    peers_name,
    pod_dns,
    slave_name,
)
from .membership import MembershipDecision, plan_membership, reported_members
from .policy import (
    choose_read_broker,
    config_patch,
    desired_config,
    policy_status,
    subscription_group_updates,
)
from .rolling import RollDecision, StsInfo, plan_dledger_roll, plan_roll
from .settings import Settings
from .spec import GroupSpec, SpecError
from .status import BrokerReport, Event, Observation, PodInfo, compute_status
from .wiring import master_target, rewire_plan

Logger = logging.Logger | logging.LoggerAdapter[Any]
#: (group, pod) -> "host:httpListenPort" of the broker's HTTP API, or None if it cannot be reached
Resolver = Callable[[GroupSpec, PodInfo], str | None]


@dataclass
class GroupState:
    """What the operator remembers about a group between sweeps (in memory only)."""

    read_broker: int | None = None
    applied_generation: int | None = None
    apply_error: tuple[str, str] | None = None
    last_apply: float = 0.0
    #: failover groups: a rolling step asks the failover daemon to move mastership here
    switchover_to: str | None = None
    #: failover groups: the controller's condition, shown among the group's conditions
    failover_condition: dict[str, Any] | None = None
    #: children whose drift an apply did not change (the apiserver's own form of a value):
    #: (kind, name) -> the paths, so the same comparison does not cost a request per event
    settled_drift: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    #: the pod watch's last view of each broker pod, and since when (monotonic) it is not Ready
    pods_seen: dict[str, PodInfo] = field(default_factory=dict)
    not_ready_since: dict[str, float] = field(default_factory=dict)
    #: a master outage the pod watch saw begin and end since the last sweep
    master_blip: str | None = None
    #: volume expansion: the StorageExpanded condition, and claims the apiserver refused to
    #: grow to ``refused_size`` (not asked again until the size changes)
    storage_condition: dict[str, Any] | None = None
    refused_size: str | None = None
    expansion_refused: dict[str, str] = field(default_factory=dict)
    #: DLEDGER groups: (members, replicas) as the membership change has decided them, ahead
    #: of the StatefulSet index until the apply shows there (see ``membership``)
    dledger_size: tuple[int, int] | None = None


@dataclass
class SweepResult:
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)


def resolver_for(settings: Settings) -> Resolver:
    """The addressing strategy: pod IP (default) or the pod's stable DNS name."""

    def resolve(group: GroupSpec, pod: PodInfo) -> str | None:
        if settings.addressing == "dns":
            # the pod's own StatefulSet's headless Service (with failover a slave-StatefulSet
            # pod can be master)
            service = pod.name.rpartition("-")[0]
            host = pod_dns(pod.name, service, group.namespace, settings.cluster_domain)
            return f"{host}:{group.http_port}"
        return f"{pod.ip}:{group.http_port}" if pod.ip else None

    return resolve


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def poll_broker(
    brokers: BrokerAPI, resolve: Resolver, group: GroupSpec, pod: PodInfo | None
) -> BrokerReport:
    if pod is None:
        return BrokerReport(pod=None, error="pod does not exist")
    if pod.deleting:
        return BrokerReport(pod=pod, error="pod is being deleted")
    address = resolve(group, pod)
    if address is None:
        return BrokerReport(pod=pod, error="pod has no IP yet")
    try:
        return BrokerReport(pod=pod, status=await brokers.status(address))
    except BrokerAPIError as exc:
        return BrokerReport(pod=pod, error=str(exc))


async def _rewire(
    brokers: BrokerAPI,
    resolve: Resolver,
    settings: Settings,
    group: GroupSpec,
    slaves: Mapping[int, BrokerReport],
    master: BrokerReport,
    master_moved: bool,
    logger: Logger,
) -> list[Event]:
    target = master_target(
        group, settings.wiring, master.pod.ip if master.pod else None, settings.cluster_domain
    )
    events = []
    for broker_id, call in rewire_plan(target, slaves, master_moved).items():
        pod = slaves[broker_id].pod
        address = resolve(group, pod) if pod else None
        if address is None:
            continue
        try:
            await brokers.set_master_address(address, call)
        except BrokerAPIError as exc:
            logger.warning("rewiring brokerId %s failed: %s", broker_id, exc)
            continue
        events.append(
            Event(
                "Normal",
                "SlaveRewired",
                f"slave brokerId={broker_id} now replicates from {call['haMasterAddress']}",
            )
        )
    return events


async def _apply_read_policy(
    brokers: BrokerAPI,
    resolve: Resolver,
    group: GroupSpec,
    reports: Iterable[BrokerReport],
    master: BrokerReport,
    which: int,
    logger: Logger,
) -> bool:
    """Runtime config on every reachable broker, whichBrokerWhenConsumeSlowly on the master's
    subscription groups (slaves copy them). True when everything is in force."""
    applied = True
    desired = desired_config(group.read_policy)
    for report in reports:
        if report.pod is None or report.status is None:
            applied = False
            continue
        body = config_patch(desired, report.status)
        address = resolve(group, report.pod)
        if not body or address is None:
            continue
        try:
            await brokers.patch_config(address, body)
        except BrokerAPIError as exc:
            applied = False
            logger.warning("read policy on %s failed: %s", report.pod.name, exc)
    if master.pod is None or master.status is None:
        return False
    address = resolve(group, master.pod)
    if address is None:
        return False
    try:
        groups = await brokers.subscription_groups(address)
        for name, update in subscription_group_updates(which, groups).items():
            await brokers.put_subscription_group(address, name, update)
    except BrokerAPIError as exc:
        logger.warning("subscription groups on %s: %s", master.pod.name, exc)
        applied = False
    return applied


def invalid_status(
    generation: int, previous: Mapping[str, Any], exc: SpecError, now: str
) -> dict[str, Any]:
    """The previous status with SpecValid=False and phase Invalid (brokers keep running)."""
    conditions = [c for c in previous.get("conditions") or [] if c.get("type") != "SpecValid"]
    prev: Mapping[str, Any] = next(
        (c for c in previous.get("conditions") or [] if c.get("type") == "SpecValid"), {}
    )
    since = prev.get("lastTransitionTime", now) if prev.get("status") == "False" else now
    conditions.insert(
        0,
        {
            "type": "SpecValid",
            "status": "False",
            "reason": exc.reason,
            "message": str(exc),
            "lastTransitionTime": since,
            "observedGeneration": generation,
        },
    )
    return {
        **previous,
        "observedGeneration": generation,
        "phase": "Invalid",
        "conditions": conditions,
    }


def _reconciled_condition(state: GroupState) -> dict[str, Any]:
    if state.apply_error:
        reason, message = state.apply_error
        return {"type": "Reconciled", "status": "False", "reason": reason, "message": message}
    return {"type": "Reconciled", "status": "True", "reason": "ChildrenApplied", "message": ""}


async def sweep(
    *,
    brokers: BrokerAPI,
    settings: Settings,
    group: GroupSpec,
    pods: Sequence[PodInfo],
    statefulsets: Mapping[str, StsInfo],
    previous: Mapping[str, Any],
    state: GroupState,
    generation: int,
    delete_pod: Callable[[str], Awaitable[bool]] | None,
    logger: Logger,
    resolve: Resolver | None = None,
    now: str | None = None,
    external_doors: Sequence[ExternalDoor] = (),
    apply_dledger_size: Callable[[tuple[int, int]], Awaitable[None]] | None = None,
    dledger_peers_text: Callable[[int], str] | None = None,
) -> SweepResult:
    resolve = resolve or resolver_for(settings)
    now = now or now_iso()
    if group.dledger:
        return await _sweep_dledger(
            brokers=brokers,
            settings=settings,
            group=group,
            pods=pods,
            sts=statefulsets.get(peers_name(group.name)),
            previous=previous,
            state=state,
            generation=generation,
            delete_pod=delete_pod,
            logger=logger,
            resolve=resolve,
            now=now,
            apply_size=apply_dledger_size,
            peers_text=dledger_peers_text,
            external_doors=external_doors,
        )
    if group.failover_enabled:
        # brokerIds are the controller's assignment, not the pods' names
        assignment = assignment_from_status(group, previous)
        pods = [
            replace(p, broker_id=assignment.broker_ids[p.name])
            for p in pods
            if p.name in assignment.broker_ids
        ]
    pods = [p for p in pods if p.broker_id <= group.slaves]
    by_id = {p.broker_id: p for p in pods if not p.deleting}
    by_id.update({p.broker_id: p for p in pods if p.broker_id not in by_id})
    ids = list(range(0, group.slaves + 1))
    reports = await asyncio.gather(
        *(poll_broker(brokers, resolve, group, by_id.get(i)) for i in ids)
    )
    master, slaves = reports[0], dict(zip(ids[1:], reports[1:], strict=True))

    prev_master = previous.get("master") or {}
    new_address = f"{master.pod.ip}:{group.client_port}" if master.pod and master.pod.ip else None
    moved = bool(
        prev_master.get("address") and new_address and prev_master["address"] != new_address
    )
    events = (
        []  # the failover controller tells every broker its role and master
        if group.failover_enabled
        else await _rewire(brokers, resolve, settings, group, slaves, master, moved, logger)
    )

    extra = [_reconciled_condition(state)]
    if group.failover_enabled and state.failover_condition:
        extra.append(state.failover_condition)
    if state.storage_condition:
        extra.append(state.storage_condition)
    blip, state.master_blip = state.master_blip, None
    observed = state.applied_generation if state.applied_generation is not None else generation
    draft, _ = compute_status(
        group, observed, Observation(master, slaves, extra_conditions=extra), previous, now
    )
    current = state.read_broker
    if current is None:
        current = (previous.get("readPolicy") or {}).get("whichBrokerWhenConsumeSlowly")
    which, why = choose_read_broker(
        group.read_policy, draft["slaves"], current, settings.auto_hysteresis_bytes
    )
    if which != state.read_broker:
        logger.info("read policy: whichBrokerWhenConsumeSlowly=%s (%s)", which, why)
    state.read_broker = which
    applied = await _apply_read_policy(brokers, resolve, group, reports, master, which, logger)

    decision = plan_roll(
        [p for p in pods if p.broker_id == 0],
        [p for p in pods if p.broker_id > 0],
        statefulsets.get(master_name(group.name)),
        statefulsets.get(slave_name(group.name)),
        draft["slaves"],
        group.slaves,
        failover=group.failover_enabled,
    )
    if decision.switchover_to and state.switchover_to != decision.switchover_to:
        logger.info("rolling: %s", decision.message)
        state.switchover_to = decision.switchover_to
        events.append(Event("Normal", "RollingSwitchover", decision.message))
    if decision.delete and delete_pod is not None:
        logger.info("rolling: %s", decision.message)
        if await delete_pod(decision.delete):
            events.append(Event("Normal", "RollingRestart", decision.message))

    external = external_addresses(group, pods, external_doors)
    await _tell_external_addresses(brokers, resolve, group, reports, external, logger)

    final, transitions = compute_status(
        group,
        observed,
        Observation(
            master=master,
            slaves=slaves,
            read_policy=policy_status(group.read_policy, which, applied),
            rollout=decision.as_status(),
            extra_conditions=extra,
            master_blip=blip,
        ),
        previous,
        now,
    )
    if external:
        _show_external(final, external)
    return SweepResult(status=final, events=events + transitions)


async def _tell_external_addresses(
    brokers: BrokerAPI,
    resolve: Resolver,
    group: GroupSpec,
    reports: Iterable[BrokerReport],
    external: Mapping[int, str] | Mapping[str, str],
    logger: Logger,
    *,
    by_peer: bool = False,
) -> None:
    """Every reachable broker gets the group's external address map when its own differs
    (all of them answer routes on their external listener): by brokerId, or in a DLEDGER
    group (``by_peer``) by dLegerSelfId."""
    if not group.external_access:
        return
    want = {str(k): v for k, v in external.items()}
    shown = "externalPeerAddrs" if by_peer else "externalAddrs"
    for report in reports:
        if report.pod is None or report.status is None:
            continue
        if (report.status.get(shown) or {}) == want:
            continue
        address = resolve(group, report.pod)
        if address is None:
            continue
        try:
            if by_peer:
                await brokers.set_external_peer_addresses(address, want)
            else:
                await brokers.set_external_addresses(address, {int(k): v for k, v in want.items()})
            logger.info("external addresses on %s: %s", report.pod.name, want or "none yet")
        except BrokerAPIError as exc:
            logger.warning("external addresses on %s failed: %s", report.pod.name, exc)


def _show_external_peers(status: dict[str, Any], external: Mapping[str, str]) -> None:
    """Each peer's external address in .status.dledger.peers, the leader's in .status.master
    and the followers' in .status.slaves (the same pods)."""
    by_pod: dict[str, str] = {}
    for peer in (status.get("dledger") or {}).get("peers") or []:
        if peer.get("id") in external:
            peer["externalAddress"] = by_pod[peer["pod"]] = external[peer["id"]]
    if status.get("master", {}).get("pod") in by_pod:
        status["master"]["externalAddress"] = by_pod[status["master"]["pod"]]
    for entry in status.get("slaves") or []:
        if entry.get("pod") in by_pod:
            entry["externalAddress"] = by_pod[entry["pod"]]


def _show_external(status: dict[str, Any], external: Mapping[int, str]) -> None:
    if 0 in external:
        status["master"]["externalAddress"] = external[0]
    for entry in status.get("slaves") or []:
        if entry.get("brokerId") in external:
            entry["externalAddress"] = external[entry["brokerId"]]


async def _sweep_dledger(
    *,
    brokers: BrokerAPI,
    settings: Settings,
    group: GroupSpec,
    pods: Sequence[PodInfo],
    sts: StsInfo | None,
    previous: Mapping[str, Any],
    state: GroupState,
    generation: int,
    delete_pod: Callable[[str], Awaitable[bool]] | None,
    logger: Logger,
    resolve: Resolver,
    now: str,
    apply_size: Callable[[tuple[int, int]], Awaitable[None]] | None = None,
    peers_text: Callable[[int], str] | None = None,
    external_doors: Sequence[ExternalDoor] = (),
) -> SweepResult:
    """A DLEDGER group's sweep: poll every peer, apply the read policy, take one rolling step
    (a follower's restart, or a leadership transfer away from an outdated leader) or one
    membership step toward spec.replicas."""
    by_name = {p.name: p for p in pods}
    size = dledger_size(group, sts, state)
    names = [peer_pod(group.name, i) for i in range(size[1])]
    reports = list(
        await asyncio.gather(*(poll_broker(brokers, resolve, group, by_name.get(n)) for n in names))
    )
    target = group.replicas
    group = replace(group, replicas=size[1])  # the status describes the pods there are
    extra = [_reconciled_condition(state)]
    if state.storage_condition:
        extra.append(state.storage_condition)
    state.master_blip = None  # the Ready condition follows the leader, not one pod
    observed = state.applied_generation if state.applied_generation is not None else generation
    draft, _ = compute_dledger_status(
        group, observed, reports, previous, now, extra_conditions=extra
    )
    leader_pod = (draft.get("dledger") or {}).get("leader")
    leader = next((r for r in reports if r.pod is not None and r.pod.name == leader_pod), None)
    events: list[Event] = []

    current = state.read_broker
    if current is None:
        current = (previous.get("readPolicy") or {}).get("whichBrokerWhenConsumeSlowly")
    which, why = choose_read_broker(
        group.read_policy, draft["slaves"], current, settings.auto_hysteresis_bytes
    )
    if which != state.read_broker:
        logger.info("read policy: whichBrokerWhenConsumeSlowly=%s (%s)", which, why)
    state.read_broker = which
    applied = False
    if leader is not None:
        applied = await _apply_read_policy(brokers, resolve, group, reports, leader, which, logger)

    resizing = size != (target, target)
    # one change at a time: a rolling restart waits for a membership change to finish
    decision = (
        RollDecision()
        if resizing
        else plan_dledger_roll(list(pods), sts, draft.get("dledger") or {})
    )
    if decision.transfer_to and decision.transferee and leader is not None and leader.pod:
        address = resolve(group, leader.pod)
        if address is not None:
            logger.info("rolling: %s", decision.message)
            try:
                await brokers.leadership_transfer(address, decision.transferee)
            except BrokerAPIError as exc:
                logger.warning("leadership transfer to %s failed: %s", decision.transfer_to, exc)
                events.append(
                    Event(
                        "Warning",
                        "LeadershipTransferFailed",
                        f"to {decision.transfer_to} ({decision.transferee}): {exc}",
                    )
                )
            else:
                events.append(
                    Event(
                        "Normal",
                        "LeadershipTransferred",
                        f"{decision.transfer_to} ({decision.transferee}) leads; "
                        f"{leader.pod.name} is restarted next as a follower",
                    )
                )
    if decision.delete and delete_pod is not None:
        logger.info("rolling: %s", decision.message)
        if await delete_pod(decision.delete):
            events.append(Event("Normal", "RollingRestart", decision.message))

    change = await _membership_step(
        brokers,
        resolve,
        group,
        target,
        size,
        reports,
        draft.get("dledger") or {},
        rolling=bool(decision.pending),
        peers_text=peers_text or (lambda n: dledger_peers(group, settings.cluster_domain, n)),
        state=state,
        apply_size=apply_size,
        logger=logger,
        events=events,
    )

    external = external_peer_addresses(group, [by_name.get(n) for n in names], external_doors)
    await _tell_external_addresses(brokers, resolve, group, reports, external, logger, by_peer=True)

    final, transitions = compute_dledger_status(
        group,
        observed,
        reports,
        previous,
        now,
        rollout=decision.as_status(),
        extra_conditions=extra,
    )
    final["readPolicy"] = policy_status(group.read_policy, which, applied)
    if external:
        _show_external_peers(final, external)
    final["dledger"]["members"] = change.members
    if change.changing:
        final["dledger"]["membership"] = change.message
        if final["phase"] == "Running":
            final["phase"] = "Updating"
    return SweepResult(status=final, events=events + transitions)


def dledger_size(group: GroupSpec, sts: StsInfo | None, state: GroupState) -> tuple[int, int]:
    """(members, replicas) of a DLEDGER group: what the last membership step decided, else
    what its StatefulSet shows, else (a new group) spec.replicas for both."""
    if state.dledger_size is not None:
        return state.dledger_size
    if sts is not None and sts.members is not None:
        return sts.members, sts.replicas
    return group.replicas, group.replicas


#: membership steps one sweep may take in a row (tell, then start or remove a pod)
MEMBERSHIP_STEPS_PER_SWEEP = 3


async def _membership_step(
    brokers: BrokerAPI,
    resolve: Resolver,
    group: GroupSpec,
    target: int,
    size: tuple[int, int],
    reports: Sequence[BrokerReport],
    dledger: Mapping[str, Any],
    *,
    rolling: bool,
    peers_text: Callable[[int], str],
    state: GroupState,
    apply_size: Callable[[tuple[int, int]], Awaitable[None]] | None,
    logger: Logger,
    events: list[Event],
) -> MembershipDecision:
    """Take the membership change as far as it can go now (see ``membership``)."""
    views = [(peer_pod(group.name, i), reported_members(r.status)) for i, r in enumerate(reports)]
    members, replicas = size
    decision = MembershipDecision(members, replicas)
    for _ in range(MEMBERSHIP_STEPS_PER_SWEEP):
        decision = plan_membership(
            target,
            members,
            replicas,
            views,
            dledger,
            peers_text(members),
            rolling=rolling,
        )
        if decision.changing:
            logger.info("membership: %s", decision.message)
        if (decision.members, decision.replicas) != (members, replicas):
            if apply_size is None:
                return decision
            state.dledger_size = (decision.members, decision.replicas)
            await apply_size(state.dledger_size)
            if decision.members != members:
                verb = "joins" if decision.members > members else "leaves"
                who = peer_id(max(decision.members, members) - 1)
                events.append(
                    Event(
                        "Normal",
                        "MembershipChanged",
                        f"{who} {verb}: the membership is now {decision.members} peers "
                        f"(spec.replicas {target})",
                    )
                )
            members, replicas = decision.members, decision.replicas
            views = views[:replicas]
            continue
        if decision.transfer is not None:
            leaving, transferee = decision.transfer
            address = next(
                (resolve(group, r.pod) for r in reports if r.pod and r.pod.name == leaving), None
            )
            if address is not None:
                try:
                    await brokers.leadership_transfer(address, transferee)
                except BrokerAPIError as exc:
                    logger.warning("membership: leadership transfer failed: %s", exc)
            return decision
        if not decision.tell:
            return decision
        told = False
        for i, (pod, _seen) in enumerate(views):
            peers = decision.tell.get(pod)
            report = reports[i]
            address = resolve(group, report.pod) if peers and report.pod else None
            if address is None:
                continue
            try:
                answer = await brokers.set_dledger_peers(address, peers or "")
            except BrokerAPIError as exc:
                logger.warning("membership: telling %s failed: %s", pod, exc)
                continue
            held = [item.partition("-")[0] for item in str(answer.get("peers", "")).split(";")]
            views[i] = (pod, [h for h in held if h])
            told = True
        if not told:
            return decision
    return decision
