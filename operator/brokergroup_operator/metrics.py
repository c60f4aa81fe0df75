"""The operator's own Prometheus metrics: its sweeps, failovers and errors, and what it last
saw of each group (master reachable, brokers up, slaves in sync).

Handlers report with one call each (:func:`observe_sweep`, :func:`observe_events`,
:func:`count_error`, :func:`forget`); the per-group gauges are read from the last status at
scrape time, so a group that is gone disappears from the next scrape. Served by
prometheus_client's own HTTP server thread on ``BROKERGROUP_METRICS_PORT``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

GROUP_LABELS = ("namespace", "brokergroup")
#: Events that mean mastership moved (failover.py): kind label of failovers_total
FAILOVER_REASONS = {"MasterPromoted": "failover", "SwitchoverDone": "switchover"}
#: Events of DLEDGER groups (dledger.py, sweep.py, the leader daemon): reason label of
#: dledger_events_total
DLEDGER_REASONS = frozenset(
    {
        "LeaderElected",
        "LeaderLost",
        "LeadershipTransferred",
        "LeadershipTransferFailed",
        "PeerBehind",
        "PeerCaughtUp",
    }
)

REGISTRY = CollectorRegistry()
SWEEPS = Counter(
    "brokergroup_operator_sweeps",
    "Status sweeps of a group (poll every broker, patch .status).",
    registry=REGISTRY,
)
SWEEP_DURATION = Histogram(
    "brokergroup_operator_sweep_duration_seconds",
    "How long one group's sweep took (broker polls included).",
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
FAILOVERS = Counter(
    "brokergroup_operator_failovers",
    "Mastership moves the failover controller completed (failover or switchover).",
    [*GROUP_LABELS, "kind"],
    registry=REGISTRY,
)
DLEDGER_EVENTS = Counter(
    "brokergroup_operator_dledger_events",
    "DLEDGER groups: leader changes the operator saw (LeaderElected, LeaderLost), leadership it "
    "moved (LeadershipTransferred, LeadershipTransferFailed), followers behind or caught up.",
    [*GROUP_LABELS, "reason"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "brokergroup_operator_reconcile_errors",
    "Kubernetes or broker API failures a handler retries (apply, failover).",
    ["handler"],
    registry=REGISTRY,
)


class GroupCollector(Collector):
    """Per-group gauges from each group's last swept ``.status``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # handlers write on kopf's loop, scrapes read in a thread
        self._status: dict[tuple[str, str], Mapping[str, Any]] = {}

    def record(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        with self._lock:
            self._status[(namespace, name)] = status

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._status.pop((namespace, name), None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            groups = sorted(self._status.items())
        managed = GaugeMetricFamily(
            "brokergroup_operator_groups", "BrokerGroups the operator sweeps."
        )
        managed.add_metric([], len(groups))
        fams = {
            name: GaugeMetricFamily(name, help_text, labels=GROUP_LABELS)
            for name, help_text in (
                ("brokergroup_operator_group_master_reachable", "1 if the master answers."),
                (
                    "brokergroup_operator_group_ready",
                    "1 while the group's Ready condition is True (a master serves writes).",
                ),
                (
                    "brokergroup_operator_group_brokers_up",
                    "Brokers up: the reachable master plus connected slaves.",
                ),
                ("brokergroup_operator_group_slaves", "Slaves the spec asks for."),
                ("brokergroup_operator_group_slaves_in_sync", "Slaves in sync with the master."),
                ("brokergroup_operator_group_max_lag_bytes", "The most any slave is behind."),
                ("brokergroup_operator_group_dledger_term", "DLEDGER: the leader's term."),
                (
                    "brokergroup_operator_group_dledger_committed_index",
                    "DLEDGER: the leader's committed index.",
                ),
                (
                    "brokergroup_operator_group_dledger_peers_live",
                    "DLEDGER: peers the leader hears from (itself included).",
                ),
            )
        }
        peer_lag = GaugeMetricFamily(
            "brokergroup_operator_group_dledger_peer_lag_entries",
            "DLEDGER: entries each peer is behind the leader's log end.",
            labels=[*GROUP_LABELS, "pod"],
        )
        phase = GaugeMetricFamily(
            "brokergroup_operator_group_phase",
            "1 for the group's current .status.phase.",
            labels=[*GROUP_LABELS, "phase"],
        )
        for (namespace, name), status in groups:
            labels = [namespace, name]
            master = status.get("master") or {}
            slaves = status.get("slaves") or []
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            reachable = bool(master.get("reachable"))
            connected = sum(1 for s in slaves if s.get("connected"))
            for fam_name, value in (
                ("brokergroup_operator_group_master_reachable", int(reachable)),
                ("brokergroup_operator_group_ready", int(ready)),
                ("brokergroup_operator_group_brokers_up", int(reachable) + connected),
                ("brokergroup_operator_group_slaves", len(slaves)),
                (
                    "brokergroup_operator_group_slaves_in_sync",
                    sum(1 for s in slaves if s.get("inSync")),
                ),
                ("brokergroup_operator_group_max_lag_bytes", int(status.get("maxLagBytes") or 0)),
            ):
                fams[fam_name].add_metric(labels, value)
            phase.add_metric([*labels, str(status.get("phase") or "Unknown")], 1)
            group_dledger = status.get("dledger")
            if group_dledger:
                peers = group_dledger.get("peers") or []
                for fam_name, found in (
                    ("brokergroup_operator_group_dledger_term", group_dledger.get("term")),
                    (
                        "brokergroup_operator_group_dledger_committed_index",
                        group_dledger.get("committedIndex"),
                    ),
                    (
                        "brokergroup_operator_group_dledger_peers_live",
                        sum(1 for p in peers if p.get("live")),
                    ),
                ):
                    if found is not None:
                        fams[fam_name].add_metric(labels, int(found))
                for peer in peers:
                    if peer.get("lagEntries") is not None:
                        peer_lag.add_metric([*labels, str(peer["pod"])], int(peer["lagEntries"]))
        return [managed, *fams.values(), phase, peer_lag]


GROUPS = GroupCollector()
REGISTRY.register(GROUPS)


def observe_sweep(namespace: str, name: str, status: Mapping[str, Any], seconds: float) -> None:
    """One finished sweep and the status it computed."""
    SWEEPS.inc()
    SWEEP_DURATION.observe(seconds)
    GROUPS.record(namespace, name, status)
    if status.get("dledger"):
        # each reason's series from 0 on, so that increase() sees a group's first event (a
        # series born at 1 has no earlier sample to increase from): the alerts read them
        for reason in DLEDGER_REASONS:
            DLEDGER_EVENTS.labels(namespace, name, reason)


def observe_events(namespace: str, name: str, events: Iterable[Any]) -> None:
    """Count the Events that mean mastership moved (the failover controller's) and those of
    DLEDGER groups (the sweep's and the leader daemon's)."""
    for event in events:
        reason = getattr(event, "reason", "")
        kind = FAILOVER_REASONS.get(reason)
        if kind is not None:
            FAILOVERS.labels(namespace, name, kind).inc()
        elif reason in DLEDGER_REASONS:
            DLEDGER_EVENTS.labels(namespace, name, reason).inc()


def count_error(handler: str) -> None:
    ERRORS.labels(handler).inc()


def forget(namespace: str, name: str) -> None:
    """A deleted group: its gauges go (its counters stay, as counters do)."""
    GROUPS.forget(namespace, name)


def serve(port: int, address: str) -> WSGIServer | None:
    """Serve ``/metrics`` on ``address:port`` in a daemon thread; None if the port is taken
    (the operator runs on without metrics rather than crash-looping over them)."""
    try:
        server, _ = start_http_server(port, addr=address, registry=REGISTRY)
    except OSError as exc:
        log.error("metrics not served on %s:%d: %s", address, port, exc)
        return None
    log.info("metrics on http://%s:%d/metrics", address, port)
    return server
