"""The real RocketMQ Java client (rocketmq-client 4.9.7 from Maven Central) against a group.

Routes name pod addresses, which only something inside the cluster's network reaches.  On the
local cluster that is a node's network namespace: the Java client (interop/install.sh's jars
and driver, interop/rocketmq_java.py's launcher) runs there, with the group's name-server
Service's ClusterIP as ``namesrvAddr`` — kube-proxy in that namespace routes it like any
Service.  On other clusters this is skipped (the Python remoting client in a pod covers them).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.interop.rocketmq_java import (
    NetNS,
    ensure_installed,
    events_of,
    run_driver,
    run_mqadmin,
    summary,
)

V4 = "4.9.7"
NODE_NAMESPACE = os.environ.get("E2E_JAVA_CLIENT_NETNS", "bg-e2e-node1")


@contextlib.contextmanager
def node_namespace() -> Iterator[NetNS | None]:
    """The local cluster's first node namespace, if this host has it (never created here);
    the Java tools' scratch files go with the block."""
    if not Path(f"/run/netns/{NODE_NAMESPACE}").exists():
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="bg-java-client-") as root:
        yield NetNS(Path(root), name=NODE_NAMESPACE)  # not opened: the cluster's, not ours


def round_trip(ns: NetNS, namesrv: str, topic: str, group: str, count: int) -> dict[str, Any]:
    """Create ``topic`` with mqadmin, send ``count`` messages synchronously with
    DefaultMQProducer and read them back with DefaultLitePullConsumer in ``group``."""
    ensure_installed([V4])
    run_mqadmin(ns, V4, "updateTopic", "-n", namesrv, "-c", "DefaultCluster", "-t", topic,
                "-r", "4", "-w", "4")  # fmt: skip
    sent = run_driver(ns, V4, "produce", "--namesrv", namesrv, "--topic", topic,
                      "--count", str(count), "--mode", "sync", "--size", "256",
                      "--id-prefix", f"{topic}-", "--tags", "java")  # fmt: skip
    statuses = Counter(s["status"] for s in events_of(sent, "send"))
    got = run_driver(ns, V4, "lite-pull", "--namesrv", namesrv, "--topic", topic,
                     "--group", group, "--expect", str(count), "--timeout-s", "90")  # fmt: skip
    ids = Counter(m["id"] for m in events_of(got, "message"))
    return {
        "sent": summary(sent),
        "statuses": dict(statuses),
        "consumed": sum(ids.values()),
        "unique": len(ids),
        "duplicates": sum(n - 1 for n in ids.values() if n > 1),
    }
