"""The BrokerGroup spec as a typed value, with the checks the CRD schema cannot make.

The apiserver applies the schema's defaults and rejects most bad objects, but it cannot know
habroker's key set or parse values the broker will parse at startup. Those checks live here and
raise :class:`SpecError` naming the field, which the handlers turn into a ``SpecValid=False``
condition and an Event instead of a crash loop or a broker that never starts.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    }
)

AUTO = "auto"

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
        """What the ``master`` or ``slave`` StatefulSet's pods get: the role's over ``pod``."""
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
    #: the BrokerGroup's ``brokergroup.io/restart`` annotation (not spec): a new value rolls
    #: every broker, see ``manifests.RESTART_ANNOTATION``
    restart: str | None = None

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
    )
    validate(group)
    return group


def validate(spec: GroupSpec) -> None:
    """What the schema may miss (an old CRD, a schema-less apply) and what only habroker knows."""
    if not spec.image:
        raise SpecError("spec.image", "required")
    if spec.replication_mode not in ("SYNC", "ASYNC"):
        raise SpecError("spec.replicationMode", f"{spec.replication_mode!r}: SYNC or ASYNC")
    if spec.slaves < 0:
        raise SpecError("spec.slaves", "must be >= 0")
    if spec.replication_mode == "SYNC" and spec.slaves < 1:
        raise SpecError("spec.slaves", "must be at least 1 when spec.replicationMode is SYNC")
    ports = {"client": spec.client_port, "ha": spec.ha_port, "http": spec.http_port}
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
    if isinstance(which, int) and not 0 <= which <= spec.slaves:
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
    from .manifests import broker_properties, slave_env_properties

    props = dict(broker_properties(spec))
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
