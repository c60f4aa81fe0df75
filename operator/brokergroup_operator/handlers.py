"""The kopf layer: thin handlers that feed the pure modules and carry out what they decide.

* create/update/resume: server-side apply every child (idempotent; a restart just re-applies).
* a timer per BrokerGroup: poll every broker's ``/v1/status``, rewire slaves, apply the read
  policy, take one rolling step, and patch ``.status`` only when it changed.
* indexes of our pods and StatefulSets, fed by kopf's watches, so the timer reads them from
  memory instead of listing them from the apiserver on every poll.

Nothing a user can put in a BrokerGroup makes a handler raise in a loop: spec problems and
rejected children become conditions and Events, and the timer's errors are logged and retried
on its next tick.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf
from lightkube import ApiError

from . import GROUP, PLURAL, VERSION
from .brokerapi import BrokerAPI, BrokerAPIError
from .kube import Kube
from .manifests import (
    LABEL_GROUP,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    broker_id_of_pod,
    children,
    master_name,
    pod_dns,
    slave_name,
)
from .policy import (
    choose_read_broker,
    config_patch,
    desired_config,
    policy_status,
    subscription_group_updates,
)
from .rolling import StsInfo, plan_roll
from .settings import Settings, configure_kopf
from .spec import GroupSpec, SpecError, parse_spec
from .status import BrokerReport, Observation, PodInfo, compute_status, status_patch
from .wiring import master_target, rewire_plan

# The timer interval is fixed when the decorator runs, so it is read at import.
SETTINGS = Settings.from_env()
GroupKey = tuple[str, str]


@dataclass
class GroupState:
    """What the operator remembers about a group between handler runs (in memory only)."""

    read_broker: int | None = None
    applied_generation: int | None = None
    apply_error: tuple[str, str] | None = None
    last_apply: float = 0.0


@dataclass
class Runtime:
    settings: Settings
    session: aiohttp.ClientSession
    brokers: BrokerAPI
    kube: Kube
    groups: dict[GroupKey, GroupState]

    def state(self, key: GroupKey) -> GroupState:
        return self.groups.setdefault(key, GroupState())


def _runtime(memo: kopf.Memo) -> Runtime:
    runtime: Runtime = memo["runtime"]
    return runtime


# -- lifecycle ---------------------------------------------------------------------------
@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_kopf(settings, SETTINGS)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=SETTINGS.http_concurrency, ttl_dns_cache=10),
        headers={"User-Agent": "brokergroup-operator"},
    )
    memo["runtime"] = Runtime(
        settings=SETTINGS,
        session=session,
        brokers=BrokerAPI(session, SETTINGS.http_timeout, SETTINGS.http_concurrency),
        kube=Kube.from_env(),
        groups={},
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = memo.get("runtime")
    if runtime is not None:
        await runtime.session.close()
        await runtime.kube.close()


# -- indexes -----------------------------------------------------------------------------
def _pod_ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


@kopf.index("v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
def broker_pods(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    **_: Any,
) -> dict[GroupKey, PodInfo]:
    group = labels.get(LABEL_GROUP)
    broker_id = broker_id_of_pod(name, group) if group else None
    if group is None or broker_id is None or namespace is None:
        return {}
    return {
        (namespace, group): PodInfo(
            name=name,
            broker_id=broker_id,
            uid=str(meta.get("uid", "")),
            ip=status.get("podIP"),
            ready=_pod_ready(status),
            phase=str(status.get("phase", "Pending")),
            revision=labels.get("controller-revision-hash"),
            deleting=meta.get("deletionTimestamp") is not None,
        )
    }


@kopf.index("apps", "v1", "statefulsets", labels={LABEL_MANAGED_BY: MANAGED_BY})
def broker_statefulsets(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    **_: Any,
) -> dict[GroupKey, StsInfo]:
    group = labels.get(LABEL_GROUP)
    if group is None or namespace is None:
        return {}
    return {
        (namespace, group): StsInfo(
            name=name,
            generation=int(meta.get("generation", 0)),
            observed_generation=int(status.get("observedGeneration", 0)),
            update_revision=status.get("updateRevision"),
            replicas=int(spec.get("replicas", 0)),
        )
    }


# -- reconcile ---------------------------------------------------------------------------
def _owner(body: kopf.Body) -> dict[str, Any]:
    return {"name": body.metadata.name, "uid": body.metadata.uid}


async def _apply_children(runtime: Runtime, group: GroupSpec, body: kopf.Body) -> None:
    state = runtime.state((group.namespace, group.name))
    state.last_apply = time.monotonic()
    try:
        for manifest in children(group, _owner(body), runtime.settings.cluster_domain):
            await runtime.kube.apply(manifest)
    except ApiError as exc:
        code = exc.status.code or 0
        if code >= 500 or code in (409, 429):
            raise kopf.TemporaryError(f"apply failed, will retry: {exc}", delay=10) from exc
        # The apiserver refused a child we built from this spec (e.g. a quantity the schema
        # let through): nothing to retry until the spec changes.
        state.apply_error = ("ApplyRejected", f"{exc.status.reason}: {exc}")
        kopf.warn(body, reason="ApplyRejected", message=str(exc))
        return
    state.apply_error = None
    state.applied_generation = int(body.metadata.get("generation") or 0)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def reconcile(
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    runtime = _runtime(memo)
    assert namespace is not None  # BrokerGroup is namespaced
    try:
        group = parse_spec(name, namespace, spec)
    except SpecError as exc:
        # Kept running: the old children stay as they were, the timer reports SpecValid=False.
        logger.warning("spec refused: %s", exc)
        kopf.warn(body, reason=exc.reason, message=str(exc))
        return
    await _apply_children(runtime, group, body)


# -- the status timer --------------------------------------------------------------------
def _address(runtime: Runtime, group: GroupSpec, pod: PodInfo) -> str | None:
    if runtime.settings.addressing == "dns":
        service = master_name(group.name) if pod.broker_id == 0 else slave_name(group.name)
        host = pod_dns(pod.name, service, group.namespace, runtime.settings.cluster_domain)
        return f"{host}:{group.client_port}"
    return f"{pod.ip}:{group.client_port}" if pod.ip else None


async def _poll(runtime: Runtime, group: GroupSpec, pod: PodInfo | None) -> BrokerReport:
    if pod is None:
        return BrokerReport(pod=None, error="pod does not exist")
    address = _address(runtime, group, pod)
    if address is None or pod.deleting:
        return BrokerReport(pod=pod, error="pod has no IP" if not pod.deleting else "pod deleting")
    try:
        return BrokerReport(pod=pod, status=await runtime.brokers.status(address))
    except BrokerAPIError as exc:
        return BrokerReport(pod=pod, error=str(exc))


async def _rewire(
    runtime: Runtime,
    group: GroupSpec,
    body: kopf.Body,
    slaves: Mapping[int, BrokerReport],
    master: BrokerReport,
    master_moved: bool,
    logger: kopf.Logger,
) -> None:
    target = master_target(
        group,
        runtime.settings.wiring,
        master.pod.ip if master.pod else None,
        runtime.settings.cluster_domain,
    )
    for broker_id, call in rewire_plan(target, slaves, master_moved).items():
        pod = slaves[broker_id].pod
        address = _address(runtime, group, pod) if pod else None
        if address is None:
            continue
        try:
            await runtime.brokers.set_master_address(address, call)
        except BrokerAPIError as exc:
            logger.warning("rewiring brokerId %s failed: %s", broker_id, exc)
            continue
        kopf.info(
            body,
            reason="SlaveRewired",
            message=f"slave brokerId={broker_id} now replicates from {call['haMasterAddress']}",
        )


async def _apply_read_policy(
    runtime: Runtime,
    group: GroupSpec,
    reports: Iterable[BrokerReport],
    master: BrokerReport,
    which: int,
    logger: kopf.Logger,
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
        address = _address(runtime, group, report.pod)
        if not body or address is None:
            continue
        try:
            await runtime.brokers.patch_config(address, body)
        except BrokerAPIError as exc:
            applied = False
            logger.warning("read policy on %s failed: %s", report.pod.name, exc)
    if master.pod is None or master.status is None:
        return False
    address = _address(runtime, group, master.pod)
    if address is None:
        return False
    try:
        groups = await runtime.brokers.subscription_groups(address)
        for name, update in subscription_group_updates(which, groups).items():
            await runtime.brokers.put_subscription_group(address, name, update)
    except BrokerAPIError as exc:
        logger.warning("subscription groups on %s: %s", master.pod.name, exc)
        applied = False
    return applied


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _invalid_status(
    generation: int, previous: Mapping[str, Any], exc: SpecError, now: str
) -> dict[str, Any]:
    conditions = [c for c in previous.get("conditions") or [] if c.get("type") != "SpecValid"]
    prev: Mapping[str, Any] = next(
        (c for c in previous.get("conditions") or [] if c.get("type") == "SpecValid"), {}
    )
    conditions.insert(
        0,
        {
            "type": "SpecValid",
            "status": "False",
            "reason": exc.reason,
            "message": str(exc),
            "lastTransitionTime": prev.get("lastTransitionTime", now)
            if prev.get("status") == "False"
            else now,
            "observedGeneration": generation,
        },
    )
    return {
        **previous,
        "observedGeneration": generation,
        "phase": "Invalid",
        "conditions": conditions,
    }


@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=SETTINGS.poll_interval,
    initial_delay=1.0,
    errors=kopf.ErrorsMode.IGNORED,
)
async def poll_group(
    body: kopf.Body,
    spec: kopf.Spec,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    # kopf passes each index as a kwarg named after its function
    broker_pods: kopf.Index[GroupKey, PodInfo] = kwargs["broker_pods"]
    broker_statefulsets: kopf.Index[GroupKey, StsInfo] = kwargs["broker_statefulsets"]
    runtime = _runtime(memo)
    assert namespace is not None  # BrokerGroup is namespaced
    key = (namespace, name)
    state = runtime.state(key)
    previous: dict[str, Any] = dict(status or {})
    generation = int(meta.get("generation") or 0)
    try:
        group = parse_spec(name, namespace, spec)
    except SpecError as exc:
        patch.status.update(
            status_patch(previous, _invalid_status(generation, previous, exc, _now()))
        )
        return

    stses = {s.name: s for s in broker_statefulsets.get(key, [])}
    if (
        master_name(name) not in stses or slave_name(name) not in stses
    ) and time.monotonic() - state.last_apply > 30:
        logger.info("children missing: re-applying")
        await _apply_children(runtime, group, body)

    pods = [p for p in broker_pods.get(key, []) if p.broker_id <= group.slaves]
    by_id = {p.broker_id: p for p in pods if not p.deleting}
    by_id.update({p.broker_id: p for p in pods if p.broker_id not in by_id})
    ids = list(range(0, group.slaves + 1))
    reports = await asyncio.gather(*(_poll(runtime, group, by_id.get(i)) for i in ids))
    master, slaves = reports[0], dict(zip(ids[1:], reports[1:], strict=True))

    prev_master = previous.get("master") or {}
    new_master_address = (
        f"{master.pod.ip}:{group.client_port}" if master.pod and master.pod.ip else None
    )
    master_moved = bool(
        prev_master.get("address")
        and new_master_address
        and prev_master["address"] != new_master_address
    )
    await _rewire(runtime, group, body, slaves, master, master_moved, logger)

    extra = []
    if state.apply_error:
        extra.append(
            {
                "type": "Reconciled",
                "status": "False",
                "reason": state.apply_error[0],
                "message": state.apply_error[1],
            }
        )
    else:
        extra.append(
            {"type": "Reconciled", "status": "True", "reason": "ChildrenApplied", "message": ""}
        )
    observed = state.applied_generation if state.applied_generation is not None else generation
    now = _now()
    draft, _events = compute_status(
        group,
        observed,
        Observation(master=master, slaves=slaves, extra_conditions=extra),
        previous,
        now,
    )
    current = state.read_broker
    if current is None:
        current = (previous.get("readPolicy") or {}).get("whichBrokerWhenConsumeSlowly")
    which, why = choose_read_broker(
        group.read_policy, draft["slaves"], current, runtime.settings.auto_hysteresis_bytes
    )
    if which != state.read_broker:
        logger.info("read policy: whichBrokerWhenConsumeSlowly=%s (%s)", which, why)
    state.read_broker = which
    applied = await _apply_read_policy(runtime, group, reports, master, which, logger)

    decision = plan_roll(
        [p for p in pods if p.broker_id == 0],
        [p for p in pods if p.broker_id > 0],
        stses.get(master_name(name)),
        stses.get(slave_name(name)),
        draft["slaves"],
        group.slaves,
    )
    if decision.delete:
        logger.info("rolling: %s", decision.message)
        if await runtime.kube.delete_pod(namespace, decision.delete):
            kopf.info(body, reason="RollingRestart", message=decision.message)

    final, events = compute_status(
        group,
        observed,
        Observation(
            master=master,
            slaves=slaves,
            read_policy=policy_status(group.read_policy, which, applied),
            rollout=decision.as_status(),
            extra_conditions=extra,
        ),
        previous,
        now,
    )
    for event in events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    changes = status_patch(previous, final)
    if changes:
        patch.status.update(changes)
