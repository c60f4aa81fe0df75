"""The pytest face of interop/rocketmq_java.py (real Apache RocketMQ beside habroker).

The namespaces, Java launchers, driver and parsers live in :mod:`interop.rocketmq_java`, which
the benchmarks share and which does not import pytest; this module re-exports them for the
tests and turns a missing prerequisite into a skip that says why (a failure under CI).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from interop import rocketmq_java as _core
from interop.rocketmq_java import (
    JVM_FLAGS,
    NAMESRV_VERSION,
    ROCKETMQ_HOME,
    VERSIONS,
    BrokerSpec,
    ClusterRow,
    DriverFailed,
    InteropUnavailable,
    JavaBroker,
    JavaNameServer,
    JavaProcess,
    NetNS,
    QueueStatus,
    cache_root,
    classpath,
    cluster_list,
    events_of,
    expected_body,
    loads_fastjson,
    parse_events,
    run_driver,
    run_mqadmin,
    start_sync_group,
    summary,
    table_rows,
    topic_status,
    wait_ha_connected,
)

__all__ = [
    "JVM_FLAGS",
    "NAMESRV_VERSION",
    "ROCKETMQ_HOME",
    "VERSIONS",
    "BrokerSpec",
    "ClusterRow",
    "DriverFailed",
    "InteropUnavailable",
    "JavaBroker",
    "JavaNameServer",
    "JavaProcess",
    "NetNS",
    "QueueStatus",
    "cache_root",
    "classpath",
    "cluster_list",
    "ensure_installed",
    "events_of",
    "expected_body",
    "loads_fastjson",
    "parse_events",
    "run_driver",
    "run_mqadmin",
    "start_sync_group",
    "summary",
    "table_rows",
    "topic_status",
    "wait_ha_connected",
]


def ensure_installed(versions: Iterable[str] = VERSIONS) -> Path:
    """:func:`interop.rocketmq_java.ensure_installed`; a missing prerequisite skips the test
    with the reason, or fails it under CI (CI must run the interop tests)."""
    try:
        return _core.ensure_installed(versions)
    except InteropUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the RocketMQ interop tests, but {exc}")
        pytest.skip(f"needs real Apache RocketMQ (Java) to compare against: {exc}")
