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
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import aiohttp
import kopf
from lightkube import ApiError

from . import GROUP, KIND, PLURAL, VERSION, metrics
from .admin_token import group_ha_secret, group_token, load_key
from .brokerapi import BrokerAPI, BrokerAPIError
from .dledger import (
    find_leader,
    leader_event,
    members_of,
    recorded_leader,
    role_labels,
)
from .drift import describe, drifted, find_child
from .election import Assignment, assignment_from_status
from .external import external_door, stale_doors
from .failover import FailoverController, MasterAddresses
from .kube import Kube
from .manifests import (
    EXTERNAL,
    HA_SECRET_VOLUME,
    LABEL_COMPONENT,
    LABEL_GROUP,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    MASTER,
    PEER,
    RESTART_ANNOTATION,
    SLAVE,
    SWITCHOVER_ANNOTATION,
    broker_id_of_pod,
    children,
    master_name,
    peer_pod,
    peers_name,
    pod_dns,
    slave_name,
)
from .rolling import StsInfo
from .settings import Settings, configure_kopf
from .spec import GroupSpec, SpecError, broker_config_warnings, check_children, parse_spec
from .status import PodInfo, container_facts, pod_transitions, status_patch
from .storage import ClaimInfo, claim_info, storage_condition, to_grow
from .sweep import (
    GroupState,
    dledger_size,
    invalid_status,
    now_iso,
    poll_broker,
    resolver_for,
    sweep,
)

#: one DEBUG line per group sweep (``brokergroup-operator --log-sweeps``)
SWEEP_LOG = logging.getLogger("brokergroup_operator.sweeps")
# The timer interval is fixed when the decorator runs, so it is read at import.
SETTINGS = Settings.from_env()
GroupKey = tuple[str, str]
T = TypeVar("T")


@dataclass
class Runtime:
    settings: Settings
    session: aiohttp.ClientSession
    brokers: BrokerAPI
    kube: Kube
    groups: dict[GroupKey, GroupState]
    #: the brokergroup.io/restart value each group's children were last applied with
    restarts: dict[GroupKey, str | None] = field(default_factory=dict)
    #: the operator key the groups' admin tokens derive from (None: no admin authentication)
    admin_key: bytes | None = None

    def state(self, key: GroupKey) -> GroupState:
        return self.groups.setdefault(key, GroupState())

    def admin_token(self, namespace: str, name: str, uid: str) -> str | None:
        """The group's admin token (its Secret's, which its brokers require)."""
        if self.admin_key is None:
            return None
        return group_token(self.admin_key, namespace, name, uid)

    def ha_secret(self, namespace: str, name: str, uid: str) -> str | None:
        """The group's HA secret (its Secret's, which its brokers' handshake uses)."""
        if self.admin_key is None:
            return None
        return group_ha_secret(self.admin_key, namespace, name, uid)

    def brokers_for(self, body: kopf.Body) -> BrokerAPI:
        """The broker client that sends this group's admin token."""
        meta = body.metadata
        return self.brokers.with_token(
            self.admin_token(str(meta.namespace), str(meta.name), str(meta.uid))
        )


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
    admin_key = load_key(SETTINGS.admin_key_file) if SETTINGS.admin_key_file else None
    if admin_key is None:
        logging.getLogger(__name__).warning(
            "BROKERGROUP_ADMIN_KEY_FILE is not set: brokers run without admin authentication "
            "(anyone who reaches a broker's HTTP port may call /v1/admin/*)"
        )
    memo["runtime"] = Runtime(
        settings=SETTINGS,
        session=session,
        brokers=BrokerAPI(session, SETTINGS.http_timeout, SETTINGS.http_concurrency),
        kube=Kube.from_env(),
        groups={},
        admin_key=admin_key,
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


def _pod_info(
    name: str, broker_id: int, labels: Mapping[str, str], meta: Mapping[str, Any],
    status: Mapping[str, Any],
) -> PodInfo:  # fmt: skip
    problem, restarts, last_exit = container_facts(status, "broker")
    return PodInfo(
        name=name,
        broker_id=broker_id,
        uid=str(meta.get("uid", "")),
        ip=status.get("podIP"),
        host_ip=status.get("hostIP"),
        ready=_pod_ready(status),
        phase=str(status.get("phase", "Pending")),
        revision=labels.get("controller-revision-hash"),
        deleting=meta.get("deletionTimestamp") is not None,
        role=labels.get(LABEL_ROLE),
        problem=problem,
        restarts=restarts,
        last_exit=last_exit,
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
    return {(namespace, group): _pod_info(name, broker_id, labels, meta, status)}


@kopf.on.event("v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def watch_broker_pod(
    event: Mapping[str, Any],
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    memo: kopf.Memo,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """Every change of a broker pod as it happens, not at the next poll: Events for a pod
    that stops or starts being Ready, restarts or cannot run (with the kubelet's reason), and
    a master outage shorter than a poll kept for the next sweep's Ready condition."""
    group = labels.get(LABEL_GROUP)
    broker_id = broker_id_of_pod(name, group) if group else None
    index: kopf.Index[GroupKey, GroupRef] = kwargs["broker_groups"]
    if group is None or broker_id is None or namespace is None:
        return
    ref = next(iter(index.get((namespace, group), [])), None)
    if ref is None or ref.deleting:
        return
    state = _runtime(memo).state((namespace, group))
    old = state.pods_seen.get(name)
    new = (
        None if event.get("type") == "DELETED" else _pod_info(name, broker_id, labels, meta, status)
    )
    if new is None:
        state.pods_seen.pop(name, None)
    else:
        state.pods_seen[name] = new
    if event.get("type") is None:
        return  # the listing at startup: a baseline, not a change
    role = (new.role if new else None) or (old.role if old else None)
    if role is None and name.startswith(peers_name(group) + "-"):
        role = PEER  # a DLEDGER peer the leader daemon has not labelled yet
    role = role or (MASTER if broker_id == 0 else SLAVE)
    now = time.monotonic()
    since = state.not_ready_since.get(name)
    events = pod_transitions(old, new, role, now - since if since is not None else None)
    if new is not None and new.ready and not new.deleting:
        state.not_ready_since.pop(name, None)
        if since is not None and role == MASTER:
            state.master_blip = f"master {name} was not Ready for {now - since:.1f} s"
    elif since is None and (old is None or old.ready):
        state.not_ready_since[name] = now
    for item in events:
        logger.info("%s: %s", item.reason, item.message)
        kopf.event(_group_body(ref), type=item.type, reason=item.reason, message=item.message)


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
            claim_size=next(
                (
                    t["spec"]["resources"]["requests"].get("storage")
                    for t in spec.get("volumeClaimTemplates") or []
                    if (t.get("metadata") or {}).get("name") == "store"
                ),
                None,
            ),
            members=members_of(meta, spec),
            ha_auth=any(
                v.get("name") == HA_SECRET_VOLUME
                for v in ((spec.get("template") or {}).get("spec") or {}).get("volumes") or []
            ),
        )
    }


def _by_group(
    build: Callable[[str, Mapping[str, Any], Mapping[str, Any]], T],
) -> Callable[..., dict[GroupKey, T]]:
    """A kopf index function keyed by the object's group label: ``build(name, spec, status)``."""

    def index(
        name: str,
        namespace: str | None,
        labels: Mapping[str, str],
        spec: Mapping[str, Any],
        status: Mapping[str, Any],
        **_: Any,
    ) -> dict[GroupKey, T]:
        group = labels.get(LABEL_GROUP)
        if group is None or namespace is None:
            return {}
        return {(namespace, group): build(name, spec, status)}

    return index


#: per-broker external Services: node ports and load-balancer addresses
external_services = kopf.index(
    "v1", "services", labels={LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: EXTERNAL},
    id="external_services",
)(_by_group(external_door))  # fmt: skip
#: the brokers' volume claims (volume expansion)
broker_claims = kopf.index(
    "v1", "persistentvolumeclaims", labels={LABEL_MANAGED_BY: MANAGED_BY}, id="broker_claims"
)(_by_group(claim_info))


@dataclass(frozen=True)
class GroupRef:
    """What a child's watch needs of its owner: the spec to rebuild it from, and identity."""

    name: str
    namespace: str
    uid: str
    spec: Mapping[str, Any]
    deleting: bool
    #: its brokergroup.io/restart annotation: part of every child it is rebuilt into
    restart: str | None = None


@kopf.index(GROUP, VERSION, PLURAL)
def broker_groups(
    name: str, namespace: str | None, meta: Mapping[str, Any], spec: Mapping[str, Any], **_: Any
) -> dict[GroupKey, GroupRef]:
    if namespace is None:
        return {}
    return {
        (namespace, name): GroupRef(
            name=name,
            namespace=namespace,
            uid=str(meta.get("uid", "")),
            spec=dict(spec),
            deleting=meta.get("deletionTimestamp") is not None,
            restart=(meta.get("annotations") or {}).get(RESTART_ANNOTATION),
        )
    }


def _group_body(ref: GroupRef) -> kopf.Body:
    """Enough of a BrokerGroup for kopf to post an Event on it from another resource's
    handler."""
    return kopf.Body(
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
        }
    )


# -- reconcile ---------------------------------------------------------------------------
def _parse(
    name: str, namespace: str, spec: Mapping[str, Any], stses: kopf.Index[GroupKey, StsInfo]
) -> GroupSpec:
    """The spec, checked on its own and against the group's StatefulSets (a group cannot move
    between DLEDGER and SYNC/ASYNC, nor change its number of DLedger peers)."""
    group = parse_spec(name, namespace, spec)
    check_children(group, [s.name for s in stses.get((namespace, name), [])])
    return group


def _owner(body: kopf.Body) -> dict[str, Any]:
    return {"name": body.metadata.name, "uid": body.metadata.uid}


def _desired(
    runtime: Runtime,
    group: GroupSpec,
    owner: Mapping[str, Any],
    stses: kopf.Index[GroupKey, StsInfo],
) -> list[dict[str, Any]]:
    """Every child as the operator wants it, StatefulSets at the claim size they have."""
    mine: list[StsInfo] = list(stses.get((group.namespace, group.name), []))
    sizes = {s.name: s.claim_size for s in mine if s.claim_size is not None}
    peers = next((s for s in mine if s.name == peers_name(group.name)), None)
    state = runtime.state((group.namespace, group.name))
    return children(
        group,
        owner,
        runtime.settings.cluster_domain,
        network_policies=runtime.settings.network_policy,
        claim_sizes=sizes,
        dledger_size=dledger_size(group, peers, state) if group.dledger else None,
        admin_token=runtime.admin_token(group.namespace, group.name, str(owner["uid"])),
        ha_secret=(
            runtime.ha_secret(group.namespace, group.name, str(owner["uid"]))
            if ha_auth_of(group, mine)
            else None
        ),
    )


def ha_auth_of(group: GroupSpec, stses: Sequence[StsInfo]) -> bool:
    """Whether the group's brokers authenticate HA connections: spec.security.haAuth when its
    StatefulSets are created, then what they were created with. Switching a running group
    either way cannot be rolled (a restarted slave and the old master would refuse each
    other, and the master is restarted only while a slave is in sync), and groups created
    before the handshake existed keep the classic protocol."""
    if not stses:
        return group.ha_auth
    return all(s.ha_auth for s in stses)


async def _apply_children(
    runtime: Runtime, group: GroupSpec, body: kopf.Body, stses: kopf.Index[GroupKey, StsInfo]
) -> None:
    # every apply carries the restart annotation, or a re-apply would roll the brokers again
    group = replace(group, restart=(body.metadata.annotations or {}).get(RESTART_ANNOTATION))
    state = runtime.state((group.namespace, group.name))
    state.last_apply = time.monotonic()
    try:
        for manifest in _desired(runtime, group, _owner(body), stses):
            await runtime.kube.apply(manifest)
    except ApiError as exc:
        metrics.count_error("apply")
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
    runtime.restarts[(group.namespace, group.name)] = group.restart


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
    **kwargs: Any,
) -> None:
    runtime = _runtime(memo)
    assert namespace is not None  # BrokerGroup is namespaced
    try:
        group = _parse(name, namespace, spec, kwargs["broker_statefulsets"])
    except SpecError as exc:
        # Kept running: the old children stay as they were, the timer reports SpecValid=False.
        logger.warning("spec refused: %s", exc)
        kopf.warn(body, reason=exc.reason, message=str(exc))
        return
    for warning in broker_config_warnings(group):
        kopf.warn(
            body, reason="BrokerConfigNotImplemented", message=f"spec.brokerConfig: {warning}"
        )
    mine = list(kwargs["broker_statefulsets"].get((namespace, name), []))
    if not group.dledger and mine and ha_auth_of(group, mine) != group.ha_auth:
        kopf.warn(
            body,
            reason="HAAuthFixedAtCreation",
            message=(
                f"spec.security.haAuth={str(group.ha_auth).lower()} is not applied: the group's "
                f"brokers were created with it {'on' if ha_auth_of(group, mine) else 'off'}, and "
                "a rolling restart cannot switch it (docs/operator.md)"
            ),
        )
    await _apply_children(runtime, group, body, kwargs["broker_statefulsets"])


@kopf.on.event(GROUP, VERSION, PLURAL)
async def restart_requested(
    event: kopf.RawEvent,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **kwargs: Any,
) -> None:
    """``kubectl annotate bg NAME brokergroup.io/restart=<new value>``: re-apply, so the value
    reaches the pod templates, both StatefulSets get a new updateRevision and the timer's
    rolling step restarts every broker in its safe order (slaves first; the master last, or
    by switchover).

    A raw-event handler, not ``on.update``: kopf leaves annotations under its own prefix
    (``brokergroup.io/``) out of the diff an update handler sees. Groups not applied yet since
    the operator started are left to the resume handler, which applies the value anyway.
    """
    runtime: Runtime | None = memo.get("runtime")
    if runtime is None or namespace is None or event.get("type") == "DELETED":
        return
    key = (namespace, name)
    wanted = (body.metadata.annotations or {}).get(RESTART_ANNOTATION)
    if key not in runtime.restarts or runtime.restarts[key] == wanted:
        return
    try:
        group = _parse(name, namespace, spec, kwargs["broker_statefulsets"])
    except SpecError as exc:
        logger.warning("restart requested but the spec is refused: %s", exc)
        return
    logger.info("restart requested (%s=%s): rolling every broker", RESTART_ANNOTATION, wanted)
    # recorded first: a child the apiserver rejects is not re-tried on every event (the next
    # spec change applies the value anyway); a transient failure is retried on the next event
    previous, runtime.restarts[key] = runtime.restarts[key], wanted
    try:
        await _apply_children(runtime, group, body, kwargs["broker_statefulsets"])
    except kopf.TemporaryError:
        runtime.restarts[key] = previous
        raise


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def forget(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Drop the in-memory state of a deleted group. ``optional``: this handler never holds up
    a deletion (the children go with the owner through the garbage collector)."""
    runtime: Runtime | None = memo.get("runtime")
    if runtime is not None and namespace is not None:
        runtime.groups.pop((namespace, name), None)
        metrics.forget(namespace, name)
        runtime.restarts.pop((namespace, name), None)


# -- drift: every child watched, restored when deleted or edited -------------------------
async def repair_child(
    kind: str, event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **kwargs: Any
) -> None:
    """Apply a child again when it was deleted or a field the operator owns changed, and
    say so with a ``ChildRepaired`` Event on the group. Called for every watch event of a
    child (and for each child listed at startup, which repairs what drifted meanwhile)."""
    index: kopf.Index[GroupKey, GroupRef] = kwargs["broker_groups"]
    logger: kopf.Logger = kwargs["logger"]
    namespace, name = body.metadata.namespace, body.metadata.name
    group_name = (body.metadata.labels or {}).get(LABEL_GROUP)
    if namespace is None or name is None or group_name is None:
        return
    ref = next(iter(index.get((namespace, group_name), [])), None)
    owners = {o.get("uid") for o in body.metadata.get("ownerReferences") or []}
    if ref is None or ref.deleting or ref.uid not in owners:
        return  # not ours, or its group is going: the garbage collector's business
    try:
        group = _parse(ref.name, namespace, ref.spec, kwargs["broker_statefulsets"])
    except SpecError:
        return  # the reconcile handler reports it; the children stay as last applied
    group = replace(group, restart=ref.restart)
    runtime = _runtime(memo)
    desired = find_child(
        _desired(runtime, group, {"name": ref.name, "uid": ref.uid}, kwargs["broker_statefulsets"]),
        kind,
        name,
    )
    if desired is None:
        return
    state = runtime.state((namespace, ref.name))
    deleted = event.get("type") == "DELETED"
    paths: list[str] | None = None
    if deleted:
        if not await runtime.kube.group_alive(namespace, ref.name, ref.uid):
            return
    else:
        paths = drifted(desired, body)
        if not paths or state.settled_drift.get((kind, name)) == tuple(paths):
            return
    try:
        version = await runtime.kube.apply(desired)
    except ApiError as exc:
        logger.warning(
            "repairing %s %s failed (the next event or sweep retries): %s", kind, name, exc
        )
        return
    if paths is not None and version == body.metadata.get("resourceVersion"):
        # the apiserver holds the value in its own form: nothing was repaired
        state.settled_drift[(kind, name)] = tuple(paths)
        return
    state.settled_drift.pop((kind, name), None)
    message = describe(kind, name, paths)
    logger.info("repaired: %s", message)
    kopf.event(_group_body(ref), type="Normal", reason="ChildRepaired", message=message)


def _watch_children() -> None:
    """One event handler per kind of child (NetworkPolicy only when the operator makes them:
    without that setting it has no RBAC to watch them)."""
    kinds = [
        ("ConfigMap", ("v1", "configmaps")),
        ("Service", ("v1", "services")),
        ("StatefulSet", ("apps", "v1", "statefulsets")),
        ("PodDisruptionBudget", ("policy", "v1", "poddisruptionbudgets")),
    ]
    if SETTINGS.network_policy:
        kinds.append(("NetworkPolicy", ("networking.k8s.io", "v1", "networkpolicies")))
    for kind, resource in kinds:

        async def handler(
            event: Mapping[str, Any],
            body: kopf.Body,
            memo: kopf.Memo,
            _kind: str = kind,
            **kwargs: Any,
        ) -> None:
            await repair_child(_kind, event, body, memo, **kwargs)

        handler.__name__ = handler.__qualname__ = f"repair_{kind.lower()}"
        kopf.on.event(*resource, labels={LABEL_MANAGED_BY: MANAGED_BY}, id=handler.__name__)(
            handler
        )


_watch_children()


# -- the status timer --------------------------------------------------------------------
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
        group = _parse(name, namespace, spec, broker_statefulsets)
    except SpecError as exc:
        invalid = invalid_status(generation, previous, exc, now_iso())
        patch.status.update(status_patch(previous, invalid))
        return

    stses = {s.name: s for s in broker_statefulsets.get(key, [])}
    wanted = [peers_name(name)] if group.dledger else [master_name(name), slave_name(name)]
    missing = any(sts not in stses for sts in wanted)
    if missing and time.monotonic() - state.last_apply > 30:
        logger.info("children missing: re-applying")
        await _apply_children(runtime, group, body, broker_statefulsets)
    await _expand_volumes(runtime, group, list(kwargs["broker_claims"].get(key, [])), logger)
    doors = list(kwargs["external_services"].get(key, []))
    peers = dledger_size(group, stses.get(peers_name(name)), state)[1] if group.dledger else None
    for stale in stale_doors(group, doors, peers):
        logger.info("deleting %s: the group no longer has that broker or external access", stale)
        await runtime.kube.delete_service(namespace, stale)

    async def delete_pod(pod: str) -> bool:
        return await runtime.kube.delete_pod(namespace, pod)

    async def apply_dledger_size(size: tuple[int, int]) -> None:
        # the sweep has put ``size`` in the group's state: _desired renders it
        await _apply_children(runtime, group, body, broker_statefulsets)

    started = time.monotonic()
    result = await sweep(
        brokers=runtime.brokers_for(body),
        settings=runtime.settings,
        group=group,
        pods=list(broker_pods.get(key, [])),
        statefulsets=stses,
        previous=previous,
        state=state,
        generation=generation,
        delete_pod=delete_pod,
        logger=logger,
        external_doors=doors,
        apply_dledger_size=apply_dledger_size,
    )
    metrics.observe_sweep(namespace, name, result.status, time.monotonic() - started)
    metrics.observe_events(namespace, name, result.events)
    for event in result.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    changes = status_patch(previous, result.status)
    if changes:
        patch.status.update(changes)
    # parsed by bench/operator_scale.py: how long one group's sweep takes
    SWEEP_LOG.debug(
        "sweep %s/%s done in %.1f ms (status %s)",
        namespace,
        name,
        (time.monotonic() - started) * 1000,
        "changed" if changes else "unchanged",
    )


async def _expand_volumes(
    runtime: Runtime, group: GroupSpec, claims: list[ClaimInfo], logger: kopf.Logger
) -> None:
    """Ask every bound claim smaller than spec.storage.size for the new size; the outcome is
    the StorageExpanded condition (refusals are kept until the spec changes)."""
    state = runtime.state((group.namespace, group.name))
    if group.ephemeral:
        state.storage_condition = None
        return
    if state.refused_size != group.storage_size:
        state.refused_size, state.expansion_refused = group.storage_size, {}
    for claim in to_grow(group.storage_size, claims):
        if claim in state.expansion_refused:
            continue
        try:
            await runtime.kube.resize_claim(group.namespace, claim, group.storage_size)
        except ApiError as exc:
            if (exc.status.code or 0) >= 500 or exc.status.code in (409, 429):
                logger.warning("resizing %s failed, retrying: %s", claim, exc)
                continue
            state.expansion_refused[claim] = str(exc.status.message or exc)
            logger.warning("resizing %s refused: %s", claim, exc.status.message)
            continue
        logger.info("asked %s for %s", claim, group.storage_size)
    state.storage_condition = storage_condition(group.storage_size, claims, state.expansion_refused)


# -- the failover daemon -----------------------------------------------------------------
#: seconds between two probes of a failover group's brokers
FAILOVER_TICK = 1.0


def _failover_enabled(spec: kopf.Spec, **_: Any) -> bool:
    return bool((spec.get("failover") or {}).get("enabled"))


@kopf.daemon(
    GROUP,
    VERSION,
    PLURAL,
    when=_failover_enabled,
    cancellation_timeout=10.0,
    initial_delay=1.0,
)
async def failover_daemon(
    body: kopf.Body,
    spec: kopf.Spec,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    """The controller of one failover group: probe every second, keep roles at the assignment,
    promote when the master is lost, carry out switchovers (annotation or rolling update)."""
    broker_pods: kopf.Index[GroupKey, PodInfo] = kwargs["broker_pods"]
    runtime = _runtime(memo)
    assert namespace is not None
    key = (namespace, name)
    controller: FailoverController | None = None
    latest: Assignment | None = None

    async def persist(assignment: Assignment) -> None:
        nonlocal latest
        await runtime.kube.patch_group_status(namespace, name, {"failover": assignment.to_status()})
        latest = assignment

    while not stopped:
        try:
            group = parse_spec(name, namespace, spec)
        except SpecError:
            await stopped.wait(FAILOVER_TICK)
            continue
        pods = {p.name: p for p in broker_pods.get(key, [])}
        members = KubeMembers(group, pods, runtime.settings)
        if controller is None:
            controller = FailoverController(
                brokers=runtime.brokers_for(body),
                spec=group,
                members=members,
                persist=persist,
                delete_pod=lambda pod: runtime.kube.delete_pod(namespace, pod),
                logger=logger,
            )
        controller.spec, controller.members = group, members
        recorded = assignment_from_status(group, status)
        # our own last write wins over a status kopf has not delivered yet, unless the
        # group's size changed since
        assignment = (
            latest
            if latest is not None
            and latest.epoch >= recorded.epoch
            and set(latest.broker_ids) == set(recorded.broker_ids)
            else recorded
        )
        state = runtime.state(key)
        try:
            if not status.get("failover"):
                await persist(assignment)  # the default layout, recorded once
            assignment = await controller.tick(assignment)
            target = (body.metadata.annotations or {}).get(SWITCHOVER_ANNOTATION)
            if target or state.switchover_to:
                assignment = await controller.switchover(
                    assignment, str(target or state.switchover_to)
                )
                state.switchover_to = None
                if target:
                    await runtime.kube.annotate_group(
                        namespace, name, {SWITCHOVER_ANNOTATION: None}
                    )
            await _label_roles(runtime, namespace, assignment, pods)
        except (ApiError, BrokerAPIError) as exc:
            metrics.count_error("failover")
            logger.warning("failover tick failed, retrying: %s", exc)
        metrics.observe_events(namespace, name, controller.events)
        for event in controller.events:
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
        controller.events.clear()
        state.failover_condition = dict(controller.condition)
        await stopped.wait(FAILOVER_TICK)


async def _label_roles(
    runtime: Runtime, namespace: str, assignment: Assignment, pods: Mapping[str, PodInfo]
) -> None:
    """The role label on every pod (the client Service selects role=master)."""
    for pod in pods.values():
        want = MASTER if pod.name == assignment.master else SLAVE
        if pod.role != want and not pod.deleting:
            await runtime.kube.label_pod(namespace, pod.name, {LABEL_ROLE: want})


class KubeMembers:
    """The controller's view of a group's pods: addresses from the pod index and settings."""

    def __init__(self, group: GroupSpec, pods: Mapping[str, PodInfo], settings: Settings) -> None:
        self.group = group
        self.pods = pods
        self.settings = settings

    def present(self, pod: str) -> bool:
        info = self.pods.get(pod)
        return info is not None and not info.deleting

    def uid(self, pod: str) -> str | None:
        info = self.pods.get(pod)
        return info.uid or None if info is not None else None

    def _host(self, pod: str, wiring: str) -> str | None:
        info = self.pods.get(pod)
        if wiring == "dns":
            service = pod.rpartition("-")[0]
            return pod_dns(pod, service, self.group.namespace, self.settings.cluster_domain)
        return info.ip if info is not None else None

    def http(self, pod: str) -> str | None:
        host = self._host(pod, self.settings.addressing)
        return f"{host}:{self.group.http_port}" if host else None

    def master_addresses(self, pod: str) -> MasterAddresses | None:
        host = self._host(pod, self.settings.wiring)
        info = self.pods.get(pod)
        client_host = (info.ip if info is not None and info.ip else None) or host
        if host is None or client_host is None:
            return None
        return MasterAddresses(
            ha=f"{host}:{self.group.ha_port}",
            http=f"{host}:{self.group.http_port}",
            client=f"{client_host}:{self.group.client_port}",
        )


# -- the DLedger leader daemon -----------------------------------------------------------
#: seconds between two probes of a DLEDGER group's peers
DLEDGER_TICK = 1.0


def _ordinal(pod: str) -> int:
    tail = pod.rpartition("-")[2]
    return int(tail) if tail.isdigit() else -1


def _dledger_mode(spec: kopf.Spec, **_: Any) -> bool:
    return spec.get("replicationMode") == "DLEDGER"


@kopf.daemon(
    GROUP,
    VERSION,
    PLURAL,
    when=_dledger_mode,
    cancellation_timeout=10.0,
    initial_delay=1.0,
)
async def dledger_daemon(
    body: kopf.Body,
    spec: kopf.Spec,
    status: kopf.Status,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: kopf.Logger,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    """Follow a DLEDGER group's leader every second: the role label on its pods (the client
    Service selects ``brokergroup.io/role=master``, the leader) and a ``LeaderElected`` Event
    each time the leader or its term changes. The peers elect; the operator only follows."""
    broker_pods: kopf.Index[GroupKey, PodInfo] = kwargs["broker_pods"]
    runtime = _runtime(memo)
    assert namespace is not None
    key = (namespace, name)
    resolve = resolver_for(runtime.settings)
    last = recorded_leader(status)
    while not stopped:
        try:
            group = parse_spec(name, namespace, spec)
        except SpecError:
            await stopped.wait(DLEDGER_TICK)
            continue
        pods = {p.name: p for p in broker_pods.get(key, [])}
        # every peer pod there is: during a membership change more or fewer than spec.replicas
        count = max([group.replicas] + [_ordinal(p) + 1 for p in pods if _ordinal(p) >= 0])
        names = [peer_pod(name, i) for i in range(count)]
        reports = await asyncio.gather(
            *(poll_broker(runtime.brokers_for(body), resolve, group, pods.get(n)) for n in names)
        )
        leader = find_leader(group, reports)
        event = leader_event(last, leader)
        if event is not None and leader is not None:
            logger.info("%s: %s", event.reason, event.message)
            kopf.event(body, type=event.type, reason=event.reason, message=event.message)
            metrics.observe_events(namespace, name, [event])
            last = (leader.pod, leader.term)
        live = {n: pods[n].role for n in names if n in pods and not pods[n].deleting}
        try:
            for pod, role in role_labels(group, leader, live).items():
                await runtime.kube.label_pod(namespace, pod, {LABEL_ROLE: role})
        except ApiError as exc:
            metrics.count_error("dledger")
            logger.warning("labelling the leader failed, retrying: %s", exc)
        await stopped.wait(DLEDGER_TICK)
