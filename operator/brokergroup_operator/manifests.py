"""Pure manifest builders: a :class:`GroupSpec` in, the children's dicts out.

Every child is applied with server-side apply, so each builder returns the complete desired
object (fields we do not set are left to their owners: the StatefulSet controller, the kubelet).
A StatefulSet gives all its pods one template, so ``broker.conf`` holds what the group shares
and per-pod identity comes from ``HABROKER_<key>`` environment variables, which habroker reads
over the file: brokerId from the pod's ordinal, brokerIP1 from the pod IP (downward API).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from habroker.config import properties_line

from . import API_VERSION, KIND
from .spec import GroupSpec

Manifest = dict[str, Any]

CONF_DIR = "/etc/habroker"
CONF_FILE = "broker.conf"
#: the group's admin token Secret, mounted read-only (``adminTokenFile``; admin_token.py)
ADMIN_DIR = "/etc/habroker-admin"
ADMIN_KEY = "token"
#: the group's HA secret, mounted read-only (``haAuthSecretFile``; spec.security.haAuth)
HA_SECRET_DIR = "/etc/habroker-ha"
#: spec.security.tls's Secret (tls.crt, tls.key) and spec.security.acl's plain_acl.yml
TLS_DIR = "/etc/habroker-tls"
ACL_DIR = "/etc/habroker-acl"
HA_SECRET_KEY = "secret"
#: the pod volume that mounts it (how the operator tells whether a StatefulSet has it)
HA_SECRET_VOLUME = "ha-secret"
DATA_DIR = "/data"
STORE_DIR = "/data/store"
CLIENT_PORT_NAME = "client"  # listenPort: RocketMQ's client port (remoting protocol)
HA_PORT_NAME = "ha"  # haListenPort: replication
HTTP_PORT_NAME = "http"  # httpListenPort: HTTP API (operator, probes, /metrics, admin)
EXTERNAL_PORT_NAME = "external"  # externalListenPort: clients outside the cluster
DLEDGER_PORT_NAME = "dledger"  # DLEDGER groups: each peer's DLedger RPC port (dLegerPeers)
EXTERNAL = "external"  # the component label of the per-broker external Services
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"  # set by the StatefulSet controller
NAMESRV_PORT_NAME = "namesrv"
NAMESRV_PORT = 9876  # RocketMQ's name-server port, on the <group>-namesrv Service

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_GROUP = "brokergroup.io/group"
MANAGED_BY = "brokergroup-operator"
CONFIG_HASH_ANNOTATION = "brokergroup.io/config-hash"
#: on a DLEDGER group's StatefulSet: the membership size the operator has decided (see
#: ``membership``); its ``replicas`` follow one step behind or ahead during a change
DLEDGER_MEMBERS_ANNOTATION = "brokergroup.io/dledger-members"
#: pod label the operator sets with failover enabled: which pod is master is state, not a name
LABEL_ROLE = "brokergroup.io/role"
#: annotation on a BrokerGroup asking the operator to move mastership to the named pod
SWITCHOVER_ANNOTATION = "brokergroup.io/switchover-to"
#: annotation on a BrokerGroup: a new value rolls every broker (copied into the pod template)
RESTART_ANNOTATION = "brokergroup.io/restart"
MASTER = "master"
SLAVE = "slave"
#: the component of a DLEDGER group's pods: peers of one quorum, any of them may lead
PEER = "peer"
#: what spec.template may not set: the operator's selectors, index filter and role label, and
#: the annotations that decide restarts
RESERVED_POD_LABELS = frozenset(
    {LABEL_NAME, LABEL_INSTANCE, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_GROUP, LABEL_ROLE}
)
RESERVED_POD_ANNOTATIONS = frozenset({CONFIG_HASH_ANNOTATION, RESTART_ANNOTATION})
#: the default scheduling: spread the group's brokers over nodes where possible
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"

#: keys applied at runtime through the admin API; kept out of the restart hash
RUNTIME_POLICY_KEYS = ("slaveReadEnable", "accessMessageInMemoryMaxRatio")


# -- names -------------------------------------------------------------------------------
def master_name(group: str) -> str:
    """Master StatefulSet and its headless Service."""
    return f"{group}-master"


def slave_name(group: str) -> str:
    """Slave StatefulSet and its headless Service."""
    return f"{group}-slave"


def peers_name(group: str) -> str:
    """A DLEDGER group's StatefulSet and its headless Service."""
    return f"{group}-peers"


def peer_pod(group: str, ordinal: int) -> str:
    return f"{peers_name(group)}-{ordinal}"


def peer_id(ordinal: int) -> str:
    """A peer's dLegerSelfId: ``n`` and its pod's ordinal."""
    return f"n{ordinal}"


def config_name(group: str) -> str:
    return f"{group}-config"


def admin_secret_name(group: str) -> str:
    return f"{group}-admin-token"


def ha_secret_name(group: str) -> str:
    return f"{group}-ha-secret"


def client_service_name(group: str) -> str:
    """Where producers connect: the master's client and HTTP ports behind a ClusterIP."""
    return group


def namesrv_service_name(group: str) -> str:
    """What applications set as ``namesrvAddr``: every broker of the group answers routes."""
    return f"{group}-namesrv"


def pdb_name(group: str) -> str:
    return group


def master_pod(group: str) -> str:
    return f"{master_name(group)}-0"


def slave_pod(group: str, broker_id: int) -> str:
    return f"{slave_name(group)}-{broker_id - 1}"


def pod_dns(pod: str, service: str, namespace: str, cluster_domain: str) -> str:
    return f"{pod}.{service}.{namespace}.svc.{cluster_domain}"


def master_ha_address(spec: GroupSpec, cluster_domain: str = "cluster.local") -> str:
    """The master pod's stable DNS name and HA port: what every slave replicates from."""
    host = pod_dns(master_pod(spec.name), master_name(spec.name), spec.namespace, cluster_domain)
    return f"{host}:{spec.ha_port}"


def broker_id_of_pod(pod_name: str, group: str) -> int | None:
    """0 for the master pod, ordinal + 1 for a slave pod or a DLEDGER peer (the brokerId it
    has as a follower; the leader is brokerId 0 whatever its pod), None for anything else."""
    if pod_name == master_pod(group):
        return 0
    for sts in (slave_name(group), peers_name(group)):
        prefix = sts + "-"
        if pod_name.startswith(prefix) and pod_name[len(prefix) :].isdigit():
            return int(pod_name[len(prefix) :]) + 1
    return None


def dledger_peers(
    spec: GroupSpec, cluster_domain: str = "cluster.local", members: int | None = None
) -> str:
    """``dLegerPeers``: every member's id and its pod's stable DNS name at the DLedger port,
    ``n0-host0:port;n1-host1:port;...``, the same on every peer; ``members`` (default
    spec.replicas): the first that many peers, the membership a change has reached."""
    service = peers_name(spec.name)
    return ";".join(
        f"{peer_id(i)}-{pod_dns(peer_pod(spec.name, i), service, spec.namespace, cluster_domain)}"
        f":{spec.dledger_port}"
        for i in range(spec.replicas if members is None else members)
    )


# -- labels ------------------------------------------------------------------------------
def selector_labels(group: str, component: str | None = None) -> dict[str, str]:
    """Immutable StatefulSet selectors: keep this set small and stable forever."""
    labels = {LABEL_GROUP: group}
    if component:
        labels[LABEL_COMPONENT] = component
    return labels


def common_labels(group: str, component: str | None = None) -> dict[str, str]:
    labels = {
        LABEL_NAME: "habroker",
        LABEL_INSTANCE: group,
        LABEL_MANAGED_BY: MANAGED_BY,
        **selector_labels(group),
    }
    if component:
        labels[LABEL_COMPONENT] = component
    return labels


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    """Controller reference so the garbage collector deletes children with the group."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": owner["name"],
        "uid": owner["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(
    name: str, spec: GroupSpec, owner: Mapping[str, Any], component: str | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": spec.namespace,
        "labels": common_labels(spec.name, component),
        "ownerReferences": [owner_reference(owner)],
    }


# -- broker.conf -------------------------------------------------------------------------
def broker_properties(spec: GroupSpec) -> dict[str, str]:
    """The keys every broker of the group shares, in broker.conf order."""
    props = {
        "brokerClusterName": "DefaultCluster",
        **dict(sorted(spec.broker_config.items())),
        "brokerName": spec.name,
        "bindAddress": "0.0.0.0",
        "listenPort": str(spec.client_port),
        "haListenPort": str(spec.ha_port),
        "httpListenPort": str(spec.http_port),
        "storePathRootDir": STORE_DIR,
        "flushDiskType": spec.flush_disk_type,
        "slaveReadEnable": "true" if spec.read_policy.slave_read_enable else "false",
        "accessMessageInMemoryMaxRatio": str(spec.read_policy.access_message_in_memory_max_ratio),
    }
    if spec.failover_enabled:
        # roles come from the operator (PUT /v1/admin/role); a broker starts fenced until then
        props["enableControllerMode"] = "true"
    if spec.external_access:
        props["externalListenPort"] = str(spec.external_port)
    if spec.dledger:
        props["enableDLegerCommitLog"] = "true"
        props["dLegerGroup"] = spec.name
    if spec.tls_secret:
        # the client port speaks TLS; slaves speak it to their master's client port too
        # (metadata sync), not verifying its certificate, as RocketMQ's clients by default
        props["tls.server.mode"] = spec.tls_mode
        props["tls.server.certPath"] = f"{TLS_DIR}/tls.crt"
        props["tls.server.keyPath"] = f"{TLS_DIR}/tls.key"
        props["tls.enable"] = "true"
    if spec.acl_secret:
        props["aclEnable"] = "true"
        props["aclFile"] = f"{ACL_DIR}/{spec.acl_key}"
    return props


def render_broker_conf(spec: GroupSpec, extra: Mapping[str, str] | None = None) -> str:
    lines = [
        "# Generated by brokergroup-operator; edit the BrokerGroup, not this file.",
        "# Per-pod keys (brokerId, brokerRole, brokerIP1, haMasterAddress, masterHttpAddress) come from",
        "# HABROKER_<key> environment variables set on each StatefulSet.",
    ]
    props = {**broker_properties(spec), **(extra or {})}
    # escaped: the broker reads the whole .properties format (backslashes, continuations)
    lines += [properties_line(key, value) for key, value in props.items()]
    return "\n".join(lines) + "\n"


def config_hash(spec: GroupSpec) -> str:
    """Hash of what a broker reads only at startup: a change means a rolling restart.

    The read-policy keys are left out because the operator applies them at runtime.
    """
    props = {k: v for k, v in broker_properties(spec).items() if k not in RUNTIME_POLICY_KEYS}
    text = "\n".join(f"{k}={v}" for k, v in sorted(props.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def master_env_properties(spec: GroupSpec) -> dict[str, str]:
    return {"brokerId": "0", "brokerRole": spec.master_role}


def slave_env_properties(
    spec: GroupSpec, broker_id: int, cluster_domain: str = "cluster.local"
) -> dict[str, str]:
    """A slave's per-pod keys; brokerId is computed in the container from the pod ordinal."""
    ha = master_ha_address(spec, cluster_domain)
    return {
        "brokerId": str(broker_id),
        "brokerRole": "SLAVE",
        "haMasterAddress": ha,
        # where the slave copies topics, groups and consumer offsets from (the HTTP API)
        "masterHttpAddress": f"{ha.rpartition(':')[0]}:{spec.http_port}",
    }


def peer_env_properties(
    spec: GroupSpec, ordinal: int, cluster_domain: str = "cluster.local"
) -> dict[str, str]:
    """A DLEDGER peer's per-pod keys. In the pod, brokerId and dLegerSelfId are computed from
    the ordinal in the container command (one template for every peer). Every peer starts as
    a follower (a slave, brokerId ordinal + 1); the one elected leader acts as the master,
    brokerId 0, whatever it started with. ``dLegerPeers`` is in broker.conf (the ConfigMap),
    not here: a membership change must not change the pod template (that would restart every
    peer)."""
    return {
        "brokerId": str(ordinal + 1),
        "brokerRole": "SLAVE",
        "dLegerSelfId": peer_id(ordinal),
    }


def config_map(
    spec: GroupSpec,
    owner: Mapping[str, Any],
    cluster_domain: str = "cluster.local",
    members: int | None = None,
    admin: bool = False,
    ha_auth: bool = False,
) -> Manifest:
    """broker.conf; a DLEDGER group's carries ``dLegerPeers`` of the membership decided so far
    (a peer started now boots with it; running peers are told by the admin API); ``admin``:
    the brokers require the group's admin token (``admin_secret``); ``ha_auth``: the HA
    handshake with the group's secret (``ha_auth_secret``)."""
    extra = {"dLegerPeers": dledger_peers(spec, cluster_domain, members)} if spec.dledger else {}
    if admin:
        extra["adminTokenFile"] = f"{ADMIN_DIR}/{ADMIN_KEY}"
    if ha_auth:
        extra["haAuthSecretFile"] = f"{HA_SECRET_DIR}/{HA_SECRET_KEY}"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(config_name(spec.name), spec, owner),
        "data": {CONF_FILE: render_broker_conf(spec, extra)},
    }


def admin_secret(spec: GroupSpec, owner: Mapping[str, Any], token: str) -> Manifest:
    """The group's admin token, which its broker pods mount (``adminTokenFile``) and the
    operator sends; derived from the operator key (admin_token.py), so the operator never
    needs to read it back."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(admin_secret_name(spec.name), spec, owner),
        "type": "Opaque",
        "data": {ADMIN_KEY: base64.b64encode(token.encode()).decode()},
    }


def ha_auth_secret(spec: GroupSpec, owner: Mapping[str, Any], secret: str) -> Manifest:
    """The group's HA secret, which its broker pods mount (``haAuthSecretFile``); derived from
    the operator key over another label than the admin token (admin_token.py)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(ha_secret_name(spec.name), spec, owner),
        "type": "Opaque",
        "data": {HA_SECRET_KEY: base64.b64encode(secret.encode()).decode()},
    }


# -- Services ----------------------------------------------------------------------------
def _ports(spec: GroupSpec) -> list[dict[str, Any]]:
    if spec.dledger:
        return [
            {"name": CLIENT_PORT_NAME, "port": spec.client_port, "targetPort": CLIENT_PORT_NAME},
            {"name": HTTP_PORT_NAME, "port": spec.http_port, "targetPort": HTTP_PORT_NAME},
            {
                "name": DLEDGER_PORT_NAME,
                "port": spec.dledger_port,
                "targetPort": DLEDGER_PORT_NAME,
            },
        ]
    return [
        {"name": CLIENT_PORT_NAME, "port": spec.client_port, "targetPort": CLIENT_PORT_NAME},
        {"name": HA_PORT_NAME, "port": spec.ha_port, "targetPort": HA_PORT_NAME},
        {"name": HTTP_PORT_NAME, "port": spec.http_port, "targetPort": HTTP_PORT_NAME},
    ]


def _sts_name(group: str, component: str) -> str:
    return {MASTER: master_name, SLAVE: slave_name, PEER: peers_name}[component](group)


def headless_service(spec: GroupSpec, owner: Mapping[str, Any], component: str) -> Manifest:
    """Gives each pod a stable DNS name; published before readiness so a slave can resolve
    the master while it recovers, and the operator can reach a broker that is not ready.
    A DLEDGER group's peers find each other by these names (dLegerPeers) before any is Ready:
    a quorum must form before a leader can answer readiness."""
    name = _sts_name(spec.name, component)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, spec, owner, component),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(spec.name, component),
            "ports": _ports(spec),
        },
    }


def master_selector(spec: GroupSpec) -> dict[str, str]:
    """The master pod: by StatefulSet, or with failover by the role label the operator keeps
    on whichever pod is master; a DLEDGER group's by the same label on its leader."""
    if spec.failover_enabled or spec.dledger:
        return {**selector_labels(spec.name), LABEL_ROLE: MASTER}
    return selector_labels(spec.name, MASTER)


def client_service(spec: GroupSpec, owner: Mapping[str, Any]) -> Manifest:
    """Producers and consumers start at the master; pulls are redirected by brokerId. The
    ``client`` port is RocketMQ's client port, ``http`` the master's HTTP API."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(client_service_name(spec.name), spec, owner, MASTER),
        "spec": {
            "type": "ClusterIP",
            "selector": master_selector(spec),
            "ports": [
                {
                    "name": CLIENT_PORT_NAME,
                    "port": spec.client_port,
                    "targetPort": CLIENT_PORT_NAME,
                },
                {"name": HTTP_PORT_NAME, "port": spec.http_port, "targetPort": HTTP_PORT_NAME},
            ],
        },
    }


def namesrv_service(spec: GroupSpec, owner: Mapping[str, Any]) -> Manifest:
    """``<group>-namesrv:9876`` over every broker of the group: any of them answers the name
    server's GET_ROUTEINFO_BY_TOPIC for the group (master as brokerId 0, registered slaves), so
    an application's ``namesrvAddr`` is this Service and nothing else."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(namesrv_service_name(spec.name), spec, owner),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(spec.name),
            "ports": [
                {"name": NAMESRV_PORT_NAME, "port": NAMESRV_PORT, "targetPort": CLIENT_PORT_NAME}
            ],
        },
    }


# -- StatefulSets ------------------------------------------------------------------------
#: the broker pods' securityContext unless spec.template overrides a key: the habroker image
#: runs as uid 10001, fsGroup makes the volume writable for it
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "fsGroup": 10001,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def default_affinity(group: str) -> dict[str, Any]:
    """A soft podAntiAffinity between all brokers of the group (not per StatefulSet: with
    failover the master is any pod), so a master and its slaves avoid sharing a node but still
    schedule on a cluster with fewer nodes than brokers."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": selector_labels(group)},
                        "topologyKey": HOSTNAME_TOPOLOGY,
                    },
                }
            ]
        }
    }


def _container(spec: GroupSpec, component: str, cluster_domain: str) -> dict[str, Any]:
    conf = f"{CONF_DIR}/{CONF_FILE}"
    env: list[dict[str, Any]] = [
        {
            "name": "HABROKER_brokerIP1",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        }
    ]
    if component == MASTER:
        env += [
            {"name": f"HABROKER_{k}", "value": v} for k, v in master_env_properties(spec).items()
        ]
        command = ["habroker", "serve", "--config", conf]
    elif component == PEER:
        props = peer_env_properties(spec, 0, cluster_domain)
        del props["brokerId"], props["dLegerSelfId"]  # from the ordinal, below
        env += [{"name": f"HABROKER_{k}", "value": v} for k, v in props.items()]
        # dLegerSelfId n<ordinal>, and brokerId ordinal + 1 as a follower
        command = [
            "/bin/sh",
            "-c",
            "HABROKER_dLegerSelfId=n${HOSTNAME##*-}; "
            "HABROKER_brokerId=$(( ${HOSTNAME##*-} + 1 )); "
            "export HABROKER_dLegerSelfId HABROKER_brokerId; "
            f"exec habroker serve --config {conf}",
        ]
    else:
        props = slave_env_properties(spec, broker_id=1, cluster_domain=cluster_domain)
        del props["brokerId"]
        env += [{"name": f"HABROKER_{k}", "value": v} for k, v in props.items()]
        # brokerId = ordinal + 1: the pod name ends in the StatefulSet ordinal.
        command = [
            "/bin/sh",
            "-c",
            "HABROKER_brokerId=$(( ${HOSTNAME##*-} + 1 )); export HABROKER_brokerId; "
            f"exec habroker serve --config {conf}",
        ]
    container: dict[str, Any] = {
        "name": "broker",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": command,
        "env": env,
        "ports": [
            {"name": CLIENT_PORT_NAME, "containerPort": spec.client_port, "protocol": "TCP"},
            {"name": HA_PORT_NAME, "containerPort": spec.ha_port, "protocol": "TCP"},
            {"name": HTTP_PORT_NAME, "containerPort": spec.http_port, "protocol": "TCP"},
        ]
        + (
            [{"name": DLEDGER_PORT_NAME, "containerPort": spec.dledger_port, "protocol": "TCP"}]
            if spec.dledger
            else []
        )
        + (
            [{"name": EXTERNAL_PORT_NAME, "containerPort": spec.external_port, "protocol": "TCP"}]
            if spec.external_access
            else []
        ),
        "volumeMounts": [
            {"name": "config", "mountPath": CONF_DIR, "readOnly": True},
            {"name": "store", "mountPath": DATA_DIR},
        ],
        # Recovery of a long commit log can take a while: the startup probe gives it time
        # before liveness may kill it; readiness waits for recovery (and a slave's first link).
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": HTTP_PORT_NAME},
            "periodSeconds": 2,
            "failureThreshold": 150,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": HTTP_PORT_NAME},
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 6,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": HTTP_PORT_NAME},
            "periodSeconds": 2,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "securityContext": {
            **CONTAINER_SECURITY_CONTEXT,
            **spec.template.for_component(component).container_security_context,
        },
    }
    if spec.resources:
        container["resources"] = {
            k: dict(v) for k, v in spec.resources.items() if k in ("requests", "limits") and v
        }
    return container


def pod_template(
    spec: GroupSpec, component: str, cluster_domain: str, volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    """The StatefulSet's pod template: the operator's labels, probes and wiring with
    spec.template applied (``pod``, then the component's overrides). Any change here changes
    the StatefulSet's updateRevision, so ``rolling`` restarts the brokers in its order."""
    overrides = spec.template.for_component(component)
    annotations = {**overrides.annotations, CONFIG_HASH_ANNOTATION: config_hash(spec)}
    if spec.restart:
        annotations[RESTART_ANNOTATION] = spec.restart
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 30,
        "enableServiceLinks": False,
        "affinity": default_affinity(spec.name),
        **{k: v for k, v in overrides.pod_spec.items() if k != "securityContext"},
        "securityContext": {
            **POD_SECURITY_CONTEXT,
            **overrides.pod_spec.get("securityContext", {}),
        },
        "containers": [_container(spec, component, cluster_domain)],
        "volumes": volumes,
    }
    return {
        "metadata": {
            # the operator's labels last: validate() refuses overrides of them anyway
            "labels": {**overrides.labels, **common_labels(spec.name, component)},
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def statefulset(
    spec: GroupSpec,
    owner: Mapping[str, Any],
    component: str,
    cluster_domain: str = "cluster.local",
    claim_size: str | None = None,
    dledger_size: tuple[int, int] | None = None,
    admin: bool = False,
    ha_auth: bool = False,
) -> Manifest:
    """Master (1 replica, brokerId 0), slaves (N replicas, brokerId ordinal+1), or a DLEDGER
    group's peers (dLegerSelfId n<ordinal>; ``dledger_size`` (members, replicas) during a
    membership change, spec.replicas for both otherwise); ``admin`` mounts the group's admin
    token Secret, ``ha_auth`` its HA secret.

    updateStrategy OnDelete: the StatefulSet controller never restarts a broker by itself; the
    operator deletes outdated pods in its own order (slaves first, the master only while a slave
    is in sync), see ``rolling``.
    """
    name = _sts_name(spec.name, component)
    members, peers = dledger_size or (spec.replicas, spec.replicas)
    replicas = {MASTER: 1, SLAVE: spec.slaves, PEER: peers}[component]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": config_name(spec.name)}},
    ]
    if spec.ephemeral:
        volumes.append({"name": "store", "emptyDir": {}})
    if admin:
        volumes.append(
            {
                "name": "admin-token",
                "secret": {"secretName": admin_secret_name(spec.name), "defaultMode": 0o440},
            }
        )
    if ha_auth:
        volumes.append(
            {
                "name": HA_SECRET_VOLUME,
                "secret": {"secretName": ha_secret_name(spec.name), "defaultMode": 0o440},
            }
        )
    user_secrets = [
        (volume, secret, directory)
        for volume, secret, directory in (
            ("tls", spec.tls_secret, TLS_DIR),
            ("acl", spec.acl_secret, ACL_DIR),
        )
        if secret
    ]
    for volume, secret, _ in user_secrets:
        volumes.append({"name": volume, "secret": {"secretName": secret, "defaultMode": 0o440}})
    template = pod_template(spec, component, cluster_domain, volumes)
    mounts = template["spec"]["containers"][0]["volumeMounts"]
    for volume, _, directory in user_secrets:
        mounts.append({"name": volume, "mountPath": directory, "readOnly": True})
    if admin:
        mounts.append({"name": "admin-token", "mountPath": ADMIN_DIR, "readOnly": True})
    if ha_auth:
        mounts.append({"name": HA_SECRET_VOLUME, "mountPath": HA_SECRET_DIR, "readOnly": True})
    sts_spec: dict[str, Any] = {
        "replicas": replicas,
        "serviceName": name,
        "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "OnDelete"},
        "selector": {"matchLabels": selector_labels(spec.name, component)},
        "template": template,
    }
    if not spec.ephemeral:
        claim_spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            # an existing StatefulSet keeps the size it was created with (the field is
            # immutable); growing the volumes is done on the claims
            "resources": {"requests": {"storage": claim_size or spec.storage_size}},
        }
        if spec.storage_class:
            claim_spec["storageClassName"] = spec.storage_class
        sts_spec["volumeClaimTemplates"] = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "store", "labels": common_labels(spec.name, component)},
                "spec": claim_spec,
            }
        ]
        sts_spec["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": spec.retain_when_deleted,
            # Scaling the master StatefulSet to 0 by hand must never delete the one volume
            # that may hold messages no slave has: whenScaled is for slaves only.
            # A DLEDGER peer that left keeps its volume (Retain): its log and its vote come
            # back with it if the group grows again (a peer that forgot its vote is unsafe).
            "whenScaled": spec.retain_when_scaled if component == SLAVE else "Retain",
        }
    meta = _meta(name, spec, owner, component)
    if component == PEER:
        meta["annotations"] = {DLEDGER_MEMBERS_ANNOTATION: str(members)}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": sts_spec}


def pod_disruption_budget(spec: GroupSpec, owner: Mapping[str, Any]) -> Manifest:
    """At most one broker of the group down for voluntary disruptions (drains)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(pdb_name(spec.name), spec, owner),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(spec.name)}},
    }


def group_pods(spec: GroupSpec) -> list[str]:
    """Every broker pod the group should have: the master's, then each slave's (a DLEDGER
    group's: its peers')."""
    if spec.dledger:
        return [peer_pod(spec.name, i) for i in range(spec.replicas)]
    return [master_pod(spec.name)] + [slave_pod(spec.name, i) for i in range(1, spec.slaves + 1)]


def external_service_name(pod: str) -> str:
    return f"{pod}-external"


def external_service(spec: GroupSpec, owner: Mapping[str, Any], pod: str) -> Manifest:
    """One broker's door for clients outside the cluster: a NodePort or LoadBalancer Service
    on that pod's external listener alone (a RocketMQ client must reach each broker by its own
    address: routes name them one by one). ``Local`` traffic policy: the node port answers on
    the pod's own node, which is the address the operator advertises."""
    meta = _meta(external_service_name(pod), spec, owner, EXTERNAL)
    if spec.external_annotations:
        meta["annotations"] = dict(spec.external_annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": spec.external_access,
            "externalTrafficPolicy": "Local",
            "selector": {**selector_labels(spec.name), POD_NAME_LABEL: pod},
            "ports": [
                {
                    "name": EXTERNAL_PORT_NAME,
                    "port": spec.external_port,
                    "targetPort": EXTERNAL_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def network_policy_name(group: str) -> str:
    return f"{group}-brokers"


def network_policy(spec: GroupSpec, owner: Mapping[str, Any]) -> Manifest:
    """Only the group's own pods may reach its HA port (and a DLEDGER group's DLedger port);
    the client port (producers, consumers) and the HTTP port (the operator, Prometheus, HTTP
    clients) stay open to anyone. Named ports, so custom ports need no change here. Other
    ports of the broker pods are closed (they listen on no others)."""
    group_pods = {"podSelector": {"matchLabels": selector_labels(spec.name)}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(network_policy_name(spec.name), spec, owner),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(spec.name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "ports": [
                        {"protocol": "TCP", "port": CLIENT_PORT_NAME},
                        {"protocol": "TCP", "port": HTTP_PORT_NAME},
                    ]
                    + (
                        [{"protocol": "TCP", "port": EXTERNAL_PORT_NAME}]
                        if spec.external_access
                        else []
                    )
                },
                {
                    "from": [group_pods],
                    "ports": [{"protocol": "TCP", "port": HA_PORT_NAME}]
                    + ([{"protocol": "TCP", "port": DLEDGER_PORT_NAME}] if spec.dledger else []),
                },
            ],
        },
    }


def children(
    spec: GroupSpec,
    owner: Mapping[str, Any],
    cluster_domain: str = "cluster.local",
    network_policies: bool = False,
    claim_sizes: Mapping[str, str] | None = None,
    dledger_size: tuple[int, int] | None = None,
    admin_token: str | None = None,
    ha_secret: str | None = None,
) -> list[Manifest]:
    """Every child, in apply order (config and Services before the pods that need them).

    ``network_policies`` adds a NetworkPolicy per group (operator setting
    ``BROKERGROUP_NETWORK_POLICY``; the helm chart turns it on and grants the RBAC).
    ``claim_sizes``: StatefulSet name -> the claim size it already has.
    ``dledger_size``: a DLEDGER group's (members, replicas) as its membership change has
    them (default: spec.replicas for both). ``admin_token``: the group's admin token (its
    Secret first, so the pods that mount it never wait for it). ``ha_secret``: the group's HA
    secret, for a SYNC or ASYNC group whose brokers authenticate HA connections (a DLEDGER
    group has no HA port: it is ignored there).
    """
    sizes = claim_sizes or {}
    admin = admin_token is not None
    secrets = [admin_secret(spec, owner, admin_token)] if admin_token is not None else []
    ha_auth = ha_secret is not None and not spec.dledger
    if ha_secret is not None and ha_auth:
        secrets.append(ha_auth_secret(spec, owner, ha_secret))
    if spec.dledger:
        members = dledger_size[0] if dledger_size else None
        peers = [
            *secrets,
            config_map(spec, owner, cluster_domain, members, admin),
            headless_service(spec, owner, PEER),
            client_service(spec, owner),
            namesrv_service(spec, owner),
        ]
        if network_policies:
            peers.append(network_policy(spec, owner))
        peers.append(
            statefulset(
                spec,
                owner,
                PEER,
                cluster_domain,
                sizes.get(peers_name(spec.name)),
                dledger_size,
                admin,
            )
        )
        peers.append(pod_disruption_budget(spec, owner))
        if spec.external_access:
            count = max(spec.replicas, dledger_size[1] if dledger_size else 0)
            peers += [external_service(spec, owner, peer_pod(spec.name, i)) for i in range(count)]
        return peers
    items = [
        *secrets,
        config_map(spec, owner, cluster_domain, admin=admin, ha_auth=ha_auth),
        headless_service(spec, owner, MASTER),
        headless_service(spec, owner, SLAVE),
        client_service(spec, owner),
        namesrv_service(spec, owner),
    ]
    if network_policies:
        items.append(network_policy(spec, owner))
    items += [
        statefulset(
            spec,
            owner,
            MASTER,
            cluster_domain,
            sizes.get(master_name(spec.name)),
            admin=admin,
            ha_auth=ha_auth,
        ),
        statefulset(
            spec,
            owner,
            SLAVE,
            cluster_domain,
            sizes.get(slave_name(spec.name)),
            admin=admin,
            ha_auth=ha_auth,
        ),
        pod_disruption_budget(spec, owner),
    ]
    if spec.external_access:
        items += [external_service(spec, owner, pod) for pod in group_pods(spec)]
    return items
