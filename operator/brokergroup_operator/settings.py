"""Operator settings: our own (from ``BROKERGROUP_*`` environment) and kopf's, chosen on purpose.

See docs/operator.md, "kopf settings", for the reasoning behind each value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import GROUP
from .manifests import LABEL_MANAGED_BY, MANAGED_BY

ADDRESSING_MODES = ("pod-ip", "dns")


@dataclass(frozen=True)
class Settings:
    #: how the operator reaches brokers: ``pod-ip`` (from Pod objects; works in-cluster and
    #: from a host whose routes reach the pod network) or ``dns`` (stable per-pod names;
    #: needs cluster DNS where the operator runs)
    addressing: str = "pod-ip"
    #: what slaves are told their master is: ``dns`` (the master pod's stable name; survives
    #: restarts) or ``pod-ip`` (for clusters without DNS in pods; the operator follows moves)
    wiring: str = "dns"
    cluster_domain: str = "cluster.local"
    poll_interval: float = 5.0
    http_timeout: float = 2.0
    http_concurrency: int = 32
    auto_hysteresis_bytes: int = 1 << 20
    #: kopf peering name; empty = standalone (one operator replica, no peering objects)
    peering: str = ""
    #: create a NetworkPolicy per group: its HA port reachable only from the group's own pods
    network_policy: bool = False
    #: the operator's own /metrics (brokergroup_operator_*); 0 serves none. 8080 is kopf's
    #: liveness endpoint in the image, hence 8081
    metrics_port: int = 8081
    #: where /metrics listens: loopback unless told otherwise (the chart sets 0.0.0.0)
    metrics_address: str = "127.0.0.1"
    #: the operator key every group's admin token is derived from (``admin_token``); empty:
    #: brokers run without admin authentication
    admin_key_file: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def get(key: str, default: Any) -> Any:
            raw = env.get(f"BROKERGROUP_{key}")
            if raw is None or raw == "":
                return default
            try:
                return type(default)(raw)
            except ValueError:
                raise ValueError(
                    f"BROKERGROUP_{key}={raw!r}: expected {type(default).__name__}"
                ) from None

        settings = cls(
            addressing=get("ADDRESSING", cls.addressing),
            wiring=get("WIRING", cls.wiring),
            cluster_domain=get("CLUSTER_DOMAIN", cls.cluster_domain),
            poll_interval=get("POLL_INTERVAL", cls.poll_interval),
            http_timeout=get("HTTP_TIMEOUT", cls.http_timeout),
            http_concurrency=get("HTTP_CONCURRENCY", cls.http_concurrency),
            auto_hysteresis_bytes=get("AUTO_HYSTERESIS_BYTES", cls.auto_hysteresis_bytes),
            peering=get("PEERING", cls.peering),
            network_policy=_flag(env, "NETWORK_POLICY", cls.network_policy),
            metrics_port=get("METRICS_PORT", cls.metrics_port),
            metrics_address=get("METRICS_ADDRESS", cls.metrics_address),
            admin_key_file=get("ADMIN_KEY_FILE", cls.admin_key_file),
        )
        for key, value in (("ADDRESSING", settings.addressing), ("WIRING", settings.wiring)):
            if value not in ADDRESSING_MODES:
                raise ValueError(
                    f"BROKERGROUP_{key}={value!r}: one of {', '.join(ADDRESSING_MODES)}"
                )
        if (
            settings.poll_interval <= 0
            or settings.http_timeout <= 0
            or settings.http_concurrency < 1
        ):
            raise ValueError(
                "BROKERGROUP_POLL_INTERVAL, _HTTP_TIMEOUT, _HTTP_CONCURRENCY must be positive"
            )
        if not 0 <= settings.metrics_port <= 65535:
            raise ValueError(f"BROKERGROUP_METRICS_PORT={settings.metrics_port}: 0 to 65535")
        return settings


def _flag(env: Mapping[str, str], key: str, default: bool) -> bool:
    raw = env.get(f"BROKERGROUP_{key}", "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"BROKERGROUP_{key}={raw!r}: expected true or false")


def configure_kopf(kopf_settings: Any, settings: Settings) -> None:
    """Apply our choices to kopf's ``OperatorSettings`` (in the startup handler)."""
    import kopf

    # Our own names on everything kopf leaves on objects, and nothing in .status: progress and
    # diff-base live in annotations so the status schema stays exactly what docs/operator.md says.
    kopf_settings.persistence.finalizer = f"{GROUP}/finalizer"
    kopf_settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    kopf_settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-spec", ignored_fields=["status"]
    )
    # Watches: ask the server to end each stream after 5 min and reconnect (bounded staleness
    # if a stream silently dies), and give up on an idle connection a bit later client-side.
    kopf_settings.watching.server_timeout = 300
    kopf_settings.watching.client_timeout = 330
    kopf_settings.watching.connect_timeout = 10
    # Only our pods and children reach the operator's memory: server-side label filter.
    managed = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    kopf_settings.watching.label_selectors["v1", "pods"] = managed
    kopf_settings.watching.label_selectors["apps", "v1", "statefulsets"] = managed
    for resource in ("configmaps", "services", "persistentvolumeclaims"):
        kopf_settings.watching.label_selectors["v1", resource] = managed
    kopf_settings.watching.label_selectors["policy", "v1", "poddisruptionbudgets"] = managed
    kopf_settings.watching.label_selectors["networking.k8s.io", "v1", "networkpolicies"] = managed
    # API calls (patches, events) fail fast and retry instead of hanging for aiohttp's 5 min.
    kopf_settings.networking.request_timeout = 30
    kopf_settings.networking.connect_timeout = 10
    # Events: only the ones we post on purpose, named for us.
    kopf_settings.posting.level = logging.INFO
    kopf_settings.posting.reporting_component = "brokergroup-operator"
    kopf_settings.posting.event_name_prefix = "brokergroup-"
    # No CRD/namespace scanning: the CRD is installed before the operator (helm does), and this
    # spares the operator list/watch on every CRD and namespace in the cluster.
    kopf_settings.scanning.disabled = True
    # Handlers are async; the thread pool is only for kopf's internals.
    kopf_settings.execution.max_workers = 2
    # Peering: standalone unless a peering name is configured (then run >1 replica safely).
    if settings.peering:
        kopf_settings.peering.name = settings.peering
        kopf_settings.peering.standalone = False
        kopf_settings.peering.mandatory = True
    else:
        kopf_settings.peering.standalone = True
