"""The BrokerGroup spec as a typed value, with the checks the CRD schema cannot make.

The apiserver applies the schema's defaults and rejects most bad objects, but it cannot know
habroker's key set or parse values the broker will parse at startup. Those checks live here and
raise :class:`SpecError` naming the field, which the handlers turn into a ``SpecValid=False``
condition and an Event instead of a crash loop or a broker that never starts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from habroker.config import BrokerConfig, ConfigError

#: broker.conf keys the operator derives from other spec fields or per pod.
RESERVED_KEYS = frozenset(
    {
        "brokerId",
        "brokerRole",
        "brokerName",
        "brokerIP1",
        "bindAddress",
        "listenPort",
        "haListenPort",
        "httpListenPort",
        "haMasterAddress",
        "masterHttpAddress",
        "storePathRootDir",
        "storePathCommitLog",
        "flushDiskType",
        "slaveReadEnable",
        "accessMessageInMemoryMaxRatio",
        "enableControllerMode",
        "externalListenPort",
        # DLEDGER groups: the operator builds the quorum from spec.replicas and spec.ports
        "enableDLegerCommitLog",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
        # spec.security.haAuth: the operator mounts the group's HA secret and names it
        "haAuthSecretFile",
    }
)

AUTO = "auto"
DLEDGER = "DLEDGER"
#: the quorum sizes a DLEDGER group may have
DLEDGER_REPLICAS = (3, 5)
DLEDGER_PORT = 40911

#: the pod-spec fields ``spec.template.{pod,master,slave}`` may set, as the CRD spells them
POD_FIELDS = (
    "affinity",
    "tolerations",
    "nodeSelector",
    "topologySpreadConstraints",
    "priorityClassName",
    "serviceAccountName",
    "imagePullSecrets",
    "securityContext",
)
TEMPLATE_ROLES = ("pod", "master", "slave")


class SpecError(ValueError):
    """A spec the schema let through but the operator cannot run; ``field`` names it."""

    def __init__(self, field_path: str, message: str, reason: str = "InvalidSpec") -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.reason = reason


@dataclass(frozen=True)
class ReadPolicy:
    slave_read_enable: bool = False
    #: a brokerId, or ``"auto"``
    which_broker_when_consume_slowly: int | str = AUTO
    access_message_in_memory_max_ratio: int = 40

    @property
    def auto(self) -> bool:
        return self.which_broker_when_consume_slowly == AUTO


@dataclass(frozen=True)
class PodOverrides:
    """One level of ``spec.template`` (``pod``, ``master`` or ``slave``), Strimzi-style.

    ``pod_spec`` holds the :data:`POD_FIELDS` the user set, as Kubernetes objects; the operator
    does not model affinity or tolerations itself, the apiserver validates them on the
    StatefulSet.
    """

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_spec: Mapping[str, Any] = field(default_factory=dict)
    container_security_context: Mapping[str, Any] = field(default_factory=dict)

    def over(self, base: PodOverrides) -> PodOverrides:
        """These overrides on top of ``base``: labels and annotations merge key by key, a
        pod-spec field set here replaces the base's whole field."""
        return PodOverrides(
            labels={**base.labels, **self.labels},
            annotations={**base.annotations, **self.annotations},
            pod_spec={**base.pod_spec, **self.pod_spec},
            container_security_context={
                **base.container_security_context,
                **self.container_security_context,
            },
        )


@dataclass(frozen=True)
class PodTemplate:
    """``spec.template``: overrides for every broker pod, then per StatefulSet."""

    pod: PodOverrides = field(default_factory=PodOverrides)
    master: PodOverrides = field(default_factory=PodOverrides)
    slave: PodOverrides = field(default_factory=PodOverrides)

    def for_component(self, component: str) -> PodOverrides:
        """What the ``master`` or ``slave`` StatefulSet's pods get: the role's over ``pod``.
        The pods of a DLEDGER group (component ``peer``) have no fixed role: ``pod`` alone."""
        if component not in ("master", "slave"):
            return self.pod
        role = self.master if component == "master" else self.slave
        return role.over(self.pod)


@dataclass(frozen=True)
class GroupSpec:
    name: str
    namespace: str
    image: str
    image_pull_policy: str = "IfNotPresent"
    replication_mode: str = "ASYNC"
    flush_disk_type: str = "ASYNC_FLUSH"
    slaves: int = 1
    storage_size: str = "1Gi"
    storage_class: str | None = None
    ephemeral: bool = False
    retain_when_deleted: str = "Retain"
    retain_when_scaled: str = "Retain"
    resources: Mapping[str, Any] = field(default_factory=dict)
    read_policy: ReadPolicy = field(default_factory=ReadPolicy)
    broker_config: Mapping[str, str] = field(default_factory=dict)
    client_port: int = 10911  # listenPort: RocketMQ's client port (remoting)
    ha_port: int = 10912  # haListenPort
    http_port: int = 10913  # httpListenPort: HTTP API (operator, probes, /metrics)
    #: externalListenPort: the listener for clients outside the cluster (spec.externalAccess)
    external_port: int = 10915
    #: spec.externalAccess.type: NodePort or LoadBalancer, None for no external access
    external_access: str | None = None
    external_annotations: Mapping[str, str] = field(default_factory=dict)
    #: spec.failover: the operator promotes an in-sync slave when the master is lost
    failover_enabled: bool = False
    failover_master_lost_seconds: float = 10.0
    failover_preferred_master: str | None = None
    #: a slave is shown in sync only within this many bytes of the master (spec.inSyncMaxLagBytes)
    in_sync_max_lag_bytes: int = 4 << 20
    #: spec.template: labels, annotations and scheduling of the broker pods
    template: PodTemplate = field(default_factory=PodTemplate)
    #: spec.replicas: the DLEDGER quorum's size (3 or 5); unused by SYNC and ASYNC groups
    replicas: int = 3
    #: spec.ports.dledger: where each peer answers DLedger RPCs (its dLegerPeers entry)
    dledger_port: int = DLEDGER_PORT
    #: spec.security.haAuth: the authenticated HA handshake with the group's secret (SYNC and
    #: ASYNC groups; off for groups with Java brokers, which cannot speak it)
    ha_auth: bool = True
    #: spec.security.tls: a kubernetes.io/tls Secret (tls.crt, tls.key; what cert-manager
    #: writes) the brokers serve RocketMQ's client port with, and how strictly
    tls_secret: str | None = None
    tls_mode: str = "enforcing"
    #: spec.security.acl: a Secret holding RocketMQ's plain_acl.yml (under ``acl_key``): the
    #: brokers check every client request against it (aclEnable)
    acl_secret: str | None = None
    acl_key: str = "plain_acl.yml"
    #: the BrokerGroup's ``brokergroup.io/restart`` annotation (not spec): a new value rolls
    #: every broker, see ``manifests.RESTART_ANNOTATION``
    restart: str | None = None

    @property
    def dledger(self) -> bool:
        """A DLedger quorum (``replicationMode: DLEDGER``) instead of a master and slaves."""
        return self.replication_mode == DLEDGER

    @property
    def master_role(self) -> str:
        return "SYNC_MASTER" if self.replication_mode == "SYNC" else "ASYNC_MASTER"


def _get(mapping: Mapping[str, Any], key: str, default: Any) -> Any:
    value = mapping.get(key)
    return default if value is None else value


def _string_map(value: Any, path: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be a map of strings")
    return {str(k): str(v) for k, v in value.items()}


def _overrides(raw: Any, path: str) -> PodOverrides:
    if raw is None:
        return PodOverrides()
    if not isinstance(raw, Mapping):
        raise SpecError(path, "must be an object")
    meta = _get(raw, "metadata", {})
    container = _get(raw, "container", {})
    return PodOverrides(
        labels=_string_map(_get(meta, "labels", {}), f"{path}.metadata.labels"),
        annotations=_string_map(_get(meta, "annotations", {}), f"{path}.metadata.annotations"),
        pod_spec={k: raw[k] for k in POD_FIELDS if raw.get(k) is not None},
        container_security_context=dict(_get(container, "securityContext", {})),
    )


def parse_template(raw: Any) -> PodTemplate:
    """``spec.template`` as typed overrides; what it may not set is checked in validate."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise SpecError("spec.template", "must be an object")
    levels = {role: _overrides(raw.get(role), f"spec.template.{role}") for role in TEMPLATE_ROLES}
    return PodTemplate(**levels)


def parse_spec(name: str, namespace: str, spec: Mapping[str, Any]) -> GroupSpec:
    """Typed spec with schema defaults filled in (objects created before a default existed)."""
    storage = _get(spec, "storage", {})
    retention = _get(storage, "retentionPolicy", {})
    read = _get(spec, "readPolicy", {})
    ports = _get(spec, "ports", {})
    failover = _get(spec, "failover", {})
    security = _get(spec, "security", {})
    tls, acl = _get(security, "tls", {}), _get(security, "acl", {})
    which = _get(read, "whichBrokerWhenConsumeSlowly", AUTO)
    if isinstance(which, str) and which != AUTO:
        which = int(which) if which.isdigit() else which
    group = GroupSpec(
        name=name,
        namespace=namespace,
        image=str(_get(spec, "image", "")),
        image_pull_policy=str(_get(spec, "imagePullPolicy", "IfNotPresent")),
        replication_mode=str(_get(spec, "replicationMode", "ASYNC")),
        flush_disk_type=str(_get(spec, "flushDiskType", "ASYNC_FLUSH")),
        slaves=int(_get(spec, "slaves", 1)),
        storage_size=str(_get(storage, "size", "1Gi")),
        storage_class=storage.get("storageClassName"),
        ephemeral=bool(_get(storage, "ephemeral", False)),
        retain_when_deleted=str(_get(retention, "whenDeleted", "Retain")),
        retain_when_scaled=str(_get(retention, "whenScaled", "Retain")),
        resources=dict(_get(spec, "resources", {})),
        read_policy=ReadPolicy(
            slave_read_enable=bool(_get(read, "slaveReadEnable", False)),
            which_broker_when_consume_slowly=which,
            access_message_in_memory_max_ratio=int(_get(read, "accessMessageInMemoryMaxRatio", 40)),
        ),
        broker_config={str(k): str(v) for k, v in _get(spec, "brokerConfig", {}).items()},
        client_port=int(_get(ports, "client", 10911)),
        ha_port=int(_get(ports, "ha", 10912)),
        http_port=int(_get(ports, "http", 10913)),
        external_port=int(_get(ports, "external", 10915)),
        external_access=(spec.get("externalAccess") or {}).get("type") or None,
        external_annotations={
            str(k): str(v)
            for k, v in ((spec.get("externalAccess") or {}).get("annotations") or {}).items()
        },
        failover_enabled=bool(_get(failover, "enabled", False)),
        failover_master_lost_seconds=float(_get(failover, "masterLostSeconds", 10)),
        failover_preferred_master=failover.get("preferredMaster") or None,
        in_sync_max_lag_bytes=int(_get(spec, "inSyncMaxLagBytes", 4 << 20)),
        template=parse_template(spec.get("template")),
        replicas=int(_get(spec, "replicas", 3)),
        dledger_port=int(_get(ports, "dledger", DLEDGER_PORT)),
        ha_auth=bool(_get(security, "haAuth", True)),
        tls_secret=_get(tls, "secretName", None) or None,
        tls_mode=str(_get(tls, "mode", "enforcing")),
        acl_secret=_get(acl, "secretName", None) or None,
        acl_key=str(_get(acl, "key", "plain_acl.yml")),
    )
    validate(group)
    return group


def validate(spec: GroupSpec) -> None:
    """What the schema may miss (an old CRD, a schema-less apply) and what only habroker knows."""
    if not spec.image:
        raise SpecError("spec.image", "required")
    if spec.replication_mode not in ("SYNC", "ASYNC", DLEDGER):
        raise SpecError(
            "spec.replicationMode", f"{spec.replication_mode!r}: SYNC, ASYNC or DLEDGER"
        )
    if spec.dledger:
        _validate_dledger(spec)
    if spec.tls_mode not in ("permissive", "enforcing"):
        raise SpecError(
            "spec.security.tls.mode",
            f"{spec.tls_mode!r}: permissive (TLS and plain) or enforcing (TLS only)",
        )
    if not spec.acl_key or "/" in spec.acl_key:
        raise SpecError("spec.security.acl.key", f"{spec.acl_key!r}: a key of the Secret")
    if spec.slaves < 0:
        raise SpecError("spec.slaves", "must be >= 0")
    if spec.replication_mode == "SYNC" and spec.slaves < 1:
        raise SpecError("spec.slaves", "must be at least 1 when spec.replicationMode is SYNC")
    ports = {"client": spec.client_port, "ha": spec.ha_port, "http": spec.http_port}
    if spec.dledger:
        ports["dledger"] = spec.dledger_port
    if spec.external_access:
        ports["external"] = spec.external_port
    if len(set(ports.values())) != len(ports):
        raise SpecError("spec.ports", f"{', '.join(ports)} must all differ")
    if spec.external_access not in (None, "NodePort", "LoadBalancer"):
        raise SpecError(
            "spec.externalAccess.type", f"{spec.external_access!r}: NodePort or LoadBalancer"
        )
    which = spec.read_policy.which_broker_when_consume_slowly
    if isinstance(which, str) and which != AUTO:
        raise SpecError(
            "spec.readPolicy.whichBrokerWhenConsumeSlowly", f"{which!r}: auto or a brokerId"
        )
    if isinstance(which, int) and not spec.dledger and not 0 <= which <= spec.slaves:
        raise SpecError(
            "spec.readPolicy.whichBrokerWhenConsumeSlowly",
            f"{which}: no such broker (0 is the master, slaves are 1..{spec.slaves})",
        )
    if spec.failover_enabled and spec.slaves < 1:
        raise SpecError("spec.failover.enabled", "needs at least one slave (spec.slaves >= 1)")
    if spec.in_sync_max_lag_bytes < 0:
        raise SpecError("spec.inSyncMaxLagBytes", "must be >= 0")
    if spec.failover_master_lost_seconds < 1:
        raise SpecError("spec.failover.masterLostSeconds", "must be at least 1")
    preferred = spec.failover_preferred_master
    if preferred is not None:
        from .election import default_assignment

        pods = sorted(default_assignment(spec).broker_ids)
        if preferred not in pods:
            raise SpecError(
                "spec.failover.preferredMaster", f"{preferred!r}: one of {', '.join(pods)}"
            )
    reserved = sorted(RESERVED_KEYS & set(spec.broker_config))
    if reserved:
        raise SpecError(
            "spec.brokerConfig",
            f"must not set {', '.join(reserved)}: the operator sets it from other spec fields",
            reason="InvalidBrokerConfig",
        )
    _validate_template(spec.template)
    _slave_config(spec)


def _validate_dledger(spec: GroupSpec) -> None:
    """What a DLEDGER group cannot have: another quorum size, and the classic-HA features
    whose brokerIds or roles the operator would have to assign (DLedger elects its leader)."""
    if spec.replicas not in DLEDGER_REPLICAS:
        raise SpecError(
            "spec.replicas",
            f"{spec.replicas}: a DLEDGER group has 3 or 5 peers (a majority must survive "
            "one or two lost peers)",
        )
    if spec.failover_enabled:
        raise SpecError(
            "spec.failover.enabled",
            "must be false with DLEDGER: the peers elect their leader themselves",
        )
    which = spec.read_policy.which_broker_when_consume_slowly
    if not spec.read_policy.auto:
        raise SpecError(
            "spec.readPolicy.whichBrokerWhenConsumeSlowly",
            f"{which!r}: must be auto with DLEDGER (brokerIds follow the leader)",
        )


def check_children(spec: GroupSpec, statefulsets: Collection[str]) -> None:
    """What the spec may not change about a group that already exists, seen from the names of
    its StatefulSets: the CRD refuses the same changes with CEL transition rules, this catches
    them under an older CRD or a schema-less apply.

    A group cannot move between DLEDGER and SYNC/ASYNC (the commit logs differ: migrating the
    data is not implemented).  A DLEDGER group may change spec.replicas between 3 and 5: the
    operator changes its membership one peer at a time (``membership``).
    """
    from .manifests import master_name, peers_name, slave_name

    classic = {master_name(spec.name), slave_name(spec.name)} & set(statefulsets)
    has_peers = peers_name(spec.name) in statefulsets
    if spec.dledger and classic:
        raise SpecError(
            "spec.replicationMode",
            "cannot change to DLEDGER: this group runs SYNC/ASYNC brokers and migrating its "
            "data to a DLedger commit log is not supported; create a new group",
        )
    if not spec.dledger and has_peers:
        raise SpecError(
            "spec.replicationMode",
            f"cannot change from DLEDGER to {spec.replication_mode}: migrating a DLedger "
            "commit log is not supported; create a new group",
        )


def _validate_template(template: PodTemplate) -> None:
    """Labels and annotations the operator relies on cannot be overridden: the selectors of
    the StatefulSets and Services, the pod index, the role label, the restart triggers."""
    from .manifests import RESERVED_POD_ANNOTATIONS, RESERVED_POD_LABELS

    for role in TEMPLATE_ROLES:
        level: PodOverrides = getattr(template, role)
        for kind, mine, reserved in (
            ("labels", level.labels, RESERVED_POD_LABELS),
            ("annotations", level.annotations, RESERVED_POD_ANNOTATIONS),
        ):
            taken = sorted(reserved & set(mine))
            if taken:
                raise SpecError(
                    f"spec.template.{role}.metadata.{kind}",
                    f"must not set {', '.join(taken)}: the operator sets it",
                )


def _slave_config(spec: GroupSpec) -> BrokerConfig:
    """Let habroker itself parse the exact properties a slave (the strictest role) starts with,
    so an unknown key or unparsable value is reported here, not in a pod's crash loop."""
    from .manifests import (
        broker_properties,
        dledger_peers,
        peer_env_properties,
        slave_env_properties,
    )

    props = dict(broker_properties(spec))
    if spec.dledger:
        props.update(peer_env_properties(spec, ordinal=0))
        props["dLegerPeers"] = dledger_peers(spec)
    else:
        props.update(slave_env_properties(spec, broker_id=1))
    try:
        return BrokerConfig.from_mapping(props, source="spec.brokerConfig")
    except ConfigError as exc:
        # habroker names its source first; SpecError names the field once
        message = str(exc).removeprefix("spec.brokerConfig: ")
        raise SpecError("spec.brokerConfig", message, reason="InvalidBrokerConfig") from None


def broker_config_warnings(spec: GroupSpec) -> list[str]:
    """What the brokers will warn about at startup: RocketMQ keys in spec.brokerConfig that
    habroker accepts but does not implement, a maxMessageSize no commit-log file holds."""
    return _slave_config(spec).startup_warnings()
