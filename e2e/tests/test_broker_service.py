"""First end-to-end check: the locally built broker image serves in a real cluster.

A one-replica StatefulSet (headless Service, PersistentVolumeClaim) runs
`habroker serve`; a second pod of the same image asks for `/v1/status`
through the Service's DNS name and through the pod's own stable DNS name —
the two kinds of names the operator wires brokers together with.
"""

from __future__ import annotations

import json
import time
from typing import Any

from e2e.tests.kube import Kube

PORT = 10913  # httpListenPort: the HTTP API (listenPort 10911 is RocketMQ's client port)
BROKER_CONF = """\
brokerClusterName=e2e
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
listenPort=10911
haListenPort=10912
httpListenPort=10913
bindAddress=0.0.0.0
storePathRootDir=/data/store
mappedFileSizeCommitLog=10485760
"""

FETCH = (
    "import json, sys, urllib.request;"
    "r = urllib.request.urlopen(sys.argv[1], timeout=10);"
    "print(json.dumps(json.load(r)))"
)


def broker_objects(image: str) -> list[dict[str, Any]]:
    labels = {"app": "habroker", "brokergroup.io/e2e": "true"}
    port = {"name": "http", "port": PORT, "targetPort": PORT}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "broker-conf"},
            "data": {"broker.conf": BROKER_CONF},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "broker-hl"},
            "spec": {"clusterIP": "None", "selector": labels, "ports": [port]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "broker"},
            "spec": {"selector": labels, "ports": [port]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "broker"},
            "spec": {
                "serviceName": "broker-hl",
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "habroker",
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "args": ["serve", "--config", "/etc/habroker/broker.conf"],
                                "ports": [{"name": "http", "containerPort": PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/readyz", "port": PORT},
                                    "periodSeconds": 2,
                                },
                                "volumeMounts": [
                                    {"name": "conf", "mountPath": "/etc/habroker"},
                                    {"name": "data", "mountPath": "/data/store"},
                                ],
                                "resources": {"limits": {"memory": "256Mi"}},
                            }
                        ],
                        "volumes": [{"name": "conf", "configMap": {"name": "broker-conf"}}],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "64Mi"}},
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client", "labels": {"brokergroup.io/e2e": "true"}},
            "spec": {
                "containers": [
                    {
                        "name": "client",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python3", "-c", "import time; time.sleep(86400)"],
                    }
                ],
                "terminationGracePeriodSeconds": 1,
            },
        },
    ]


def fetch_status(kube: Kube, namespace: str, url: str, within: float = 30) -> Any:
    """GET the URL from the client pod. A pod turns Ready a moment before kube-proxy
    and DNS serve its new endpoint, so a refused first try is retried, within limits."""
    deadline = time.monotonic() + within
    while True:
        cmd = ("-n", namespace, "exec", "client", "--", "python3", "-c", FETCH, url)
        out = kube.run(*cmd, check=False, timeout=60)
        if out.strip():
            return json.loads(out)
        if time.monotonic() > deadline:
            kube.run(*cmd)  # once more, failing with kubectl's and Python's message
            raise AssertionError(f"no answer from {url}")
        time.sleep(1)


def test_broker_status_through_service_dns(kube: Kube, namespace: str, broker_image: str) -> None:
    kube.apply(namespace, *broker_objects(broker_image))
    kube.wait_ready(namespace, "broker-0")
    kube.wait_ready(namespace, "client")

    names = [
        f"broker.{namespace}.svc.cluster.local",  # the client Service
        f"broker-0.broker-hl.{namespace}.svc.cluster.local",  # the pod's stable name
    ]
    for host in names:
        status = fetch_status(kube, namespace, f"http://{host}:{PORT}/v1/status")
        assert status["brokerName"] == "broker-a", status
        assert status["brokerId"] == 0, status
        assert status["role"] == "ASYNC_MASTER", status
        assert status["httpAddress"].endswith(f":{PORT}"), status

    pvc = kube.json("-n", namespace, "get", "pvc", "data-broker-0")
    assert pvc["status"]["phase"] == "Bound", pvc["status"]
