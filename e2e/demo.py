"""``make demo``: the user's path on a real cluster, start to finish.

1. a cluster: the one ``KUBECONFIG`` names, else the local three-node cluster (e2e/cluster,
   built from the Kubernetes binaries the first time and started if it is not running);
2. the broker and operator images, built and loaded into it (local cluster: podman + ctr;
   kind: docker build + kind load; any other cluster: the images named by BROKER_IMAGE and
   OPERATOR_IMAGE must already be pullable there);
3. ``helm upgrade --install`` of helm/brokergroup-operator into brokergroup-system, watching the
   demo namespace only (so it never touches groups elsewhere on a shared cluster);
4. examples/sync-1-slave.yaml applied in brokergroup-demo, waited for until Ready;
5. a few thousand messages produced in SYNC mode with RocketMQ's remoting protocol through the
   group's name-server Service (``<group>-namesrv:9876``, what an application sets as
   ``namesrvAddr``) and consumed back, from a client pod of the broker image (e2e/client.py);
   on the local cluster also with the real RocketMQ Java client (rocketmq-client 4.9.7 from
   Maven Central), run in a node's network namespace;
6. ``kubectl get bg`` and the group's status.

Everything is left running for a look; the last lines say how to remove it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from e2e.userpath import (
    LOCAL_KUBECONFIG,
    ROOT,
    Cluster,
    ClusterGone,
    address_is_local,
    eventually,
    example,
    find_tool,
    in_sync,
    is_local_cluster_config,
    server_host,
)

if TYPE_CHECKING:  # the Java tools load only when the step runs
    from tests.interop.rocketmq_java import NetNS

OPERATOR_NS = "brokergroup-system"
DEMO_NS = "brokergroup-demo"
RELEASE = "brokergroup"
EXAMPLE = "sync-1-slave.yaml"


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.phases: list[tuple[str, float]] = []

    def phase(self, name: str, started: float) -> None:
        took = time.monotonic() - started
        self.phases.append((name, took))
        say(f"   done in {took:.1f}s")


def say(line: str) -> None:
    print(line, flush=True)


def run(*argv: str, env: dict[str, str] | None = None) -> None:
    """A step of the bring-up, its output shown as it goes."""
    subprocess.run(argv, check=True, cwd=ROOT, env=env)


def current_context(kubeconfig: str) -> str:
    config = yaml.safe_load(Path(kubeconfig).read_text())
    return str(config.get("current-context") or "")


def local_cluster_running() -> bool:
    if not LOCAL_KUBECONFIG.is_file() or not address_is_local(server_host(LOCAL_KUBECONFIG)):
        return False
    kubectl = find_tool("kubectl", "E2E_KUBECTL")
    if kubectl is None:
        return False
    res = subprocess.run(
        [kubectl, "--kubeconfig", str(LOCAL_KUBECONFIG), "get", "--raw", "/readyz"],
        capture_output=True,
        timeout=30,
    )
    return res.returncode == 0


def choose_cluster() -> tuple[str, str]:
    """(kubeconfig, kind of cluster: local | kind | other)."""
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            sys.exit(f"demo: KUBECONFIG={kubeconfig} does not exist")
        if is_local_cluster_config(kubeconfig):
            if not local_cluster_running():
                sys.exit(
                    "demo: KUBECONFIG names the local cluster, which is not running: "
                    "unset KUBECONFIG (the demo starts it) or `make cluster-up`"
                )
            return kubeconfig, "local"
        kind = "kind" if current_context(kubeconfig).startswith("kind-") else "other"
        say(f"== using the cluster in KUBECONFIG ({current_context(kubeconfig)}, {kind})")
        return kubeconfig, kind
    if local_cluster_running():
        say(f"== using the running local cluster ({LOCAL_KUBECONFIG})")
    else:
        say("== starting the local cluster (first run: builds Kubernetes from source, ~20 min)")
        run("make", "--no-print-directory", "-f", "e2e/e2e.mk", "cluster-up")
    return str(LOCAL_KUBECONFIG), "local"


def load_images(kind: str, kubeconfig: str, broker: str, operator: str) -> None:
    if kind == "local":
        say("== building the broker and operator images and loading them into the cluster")
        env = {**os.environ, "BROKER_IMAGE": broker, "OPERATOR_IMAGE": operator}
        run("bash", "e2e/cluster/images.sh", "all", env=env)
    elif kind == "kind":
        cluster = current_context(kubeconfig).removeprefix("kind-")
        say(f"== docker build + kind load into kind cluster {cluster}")
        run("docker", "build", "-f", "broker_image/Dockerfile", "-t", broker, ".")
        run("docker", "build", "-f", "operator/Dockerfile", "-t", operator, ".")
        run("kind", "load", "docker-image", "--name", cluster, broker, operator)
    else:
        say(f"== not building images: {broker} and {operator} must be pullable by this cluster")


def java_round_trip(c: Cluster, name: str, count: int) -> bool:
    """The real RocketMQ Java client, from the first node's network namespace."""
    from e2e.javaclient import NODE_NAMESPACE, node_namespace

    with node_namespace() as ns:
        if ns is None:
            say(f"== no {NODE_NAMESPACE} namespace here: the Java client step is skipped")
            return True
        return _java_round_trip(c, ns, name, count)


def _java_round_trip(c: Cluster, ns: NetNS, name: str, count: int) -> bool:
    """The round trip itself, in a node namespace ``java_round_trip`` found."""
    from e2e.javaclient import NODE_NAMESPACE, round_trip

    ip = c.kubectl(
        "-n", DEMO_NS, "get", "svc", f"{name}-namesrv", "-o", "jsonpath={.spec.clusterIP}"
    ).strip()
    namesrv = f"{ip}:9876"
    say(
        f"== the real RocketMQ Java client (rocketmq-client 4.9.7): {count} sync sends and a "
        f"DefaultLitePullConsumer, namesrvAddr={namesrv} ({name}-namesrv), from {NODE_NAMESPACE}"
    )
    res = round_trip(ns, namesrv, "demo-java", "demo-java", count)
    say(
        f"   sent {res['sent'].get('sendOk', 0)}/{count} SEND_OK ({res['statuses']}); consumed "
        f"{res['unique']} distinct, {res['duplicates']} duplicates"
    )
    return bool(res["sent"].get("sendOk") == count and res["unique"] == count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--skip-images", action="store_true", help="use the images as loaded")
    args = parser.parse_args(argv)
    broker_image = os.environ.get("BROKER_IMAGE", "brokergroup/habroker:dev")
    operator_image = os.environ.get("OPERATOR_IMAGE", "brokergroup/operator:dev")
    clock = Clock()

    t = time.monotonic()
    kubeconfig, kind = choose_cluster()
    clock.phase("cluster", t)
    kubectl = find_tool("kubectl", "E2E_KUBECTL")
    helm = find_tool("helm", "HELM")
    if kubectl is None or helm is None:
        sys.exit("demo: kubectl and helm are needed: `make cluster-build` builds both")
    c = Cluster(kubeconfig, kubectl, helm)

    t = time.monotonic()
    if not args.skip_images:
        load_images(kind, kubeconfig, broker_image, operator_image)
    clock.phase("images", t)

    t = time.monotonic()
    say(f"== helm install {RELEASE} (namespace {OPERATOR_NS}, watching {DEMO_NS})")
    for ns in (OPERATOR_NS, DEMO_NS):
        if not c.kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "name").strip():
            c.kubectl("create", "namespace", ns)
    c.install_operator(
        RELEASE,
        OPERATOR_NS,
        operator_image,
        "--set",
        "watch.mode=namespaced",
        "--set",
        f"watch.namespaces={{{DEMO_NS}}}",
    )
    say(c.kubectl("-n", OPERATOR_NS, "get", "deploy", "-o", "wide").rstrip())
    clock.phase("helm install", t)

    t = time.monotonic()
    group = example(EXAMPLE, broker_image)
    name = group["metadata"]["name"]
    say(f"== kubectl apply -f examples/{EXAMPLE} -n {DEMO_NS}  (BrokerGroup {name})")
    c.apply(DEMO_NS, group)
    slaves = int(group["spec"].get("slaves", 1))
    eventually(lambda: in_sync(c.status(DEMO_NS, name), slaves), 300, f"{name} Ready")
    clock.phase("group Ready", t)

    t = time.monotonic()
    http_port = int(group["spec"].get("ports", {}).get("http", 10913))
    svc = f"{name}:{http_port}"  # the client Service's http port: habroker's HTTP API
    namesrv = f"{name}-namesrv:9876"  # what an application sets as namesrvAddr
    say(
        f"== produce {args.messages} messages (SYNC) with RocketMQ's protocol, "
        f"namesrvAddr={namesrv}"
    )
    client = c.client_pod(DEMO_NS, broker_image)
    res = c.client(
        DEMO_NS,
        client,
        "produce",
        "--namesrv",
        namesrv,
        "--topic",
        "demo",
        "--count",
        str(args.messages),
        "--prefix",
        f"demo{int(time.time())}",
    )
    acked = len(res["acked"])
    say(
        f"   {acked}/{args.messages} acknowledged (SEND_OK: on the master and its slave) in "
        f"{res['seconds']}s; other: {json.dumps(res['notAcked'])}; errors: {res['errorCount']}"
    )
    res = c.client(
        DEMO_NS,
        client,
        "consume",
        "--namesrv",
        namesrv,
        "--topic",
        "demo",
        "--group",
        "demo",
        "--from",
        "committed",  # a first run reads from the start; a later one what is new
        "--count",
        str(args.messages),
    )
    say(
        f"   consumed {res['consumed']} messages; served by brokerId "
        f"{json.dumps(res['servedBy'])} (0 = master, 1 = slave)"
    )
    clock.phase("produce + consume", t)

    java_ok = True
    if kind == "local":
        t = time.monotonic()
        java_ok = java_round_trip(c, name, min(args.messages, 1000))
        clock.phase("the Java client", t)
    else:
        say("== the Java client step runs on the local cluster only (from a node's namespace)")
    top = int(c.client(DEMO_NS, client, "status", "--broker", svc)["maxOffset"])

    def reported() -> bool:
        st = c.status(DEMO_NS, name)
        return in_sync(st, slaves) and int(st["master"]["maxOffset"]) >= top

    eventually(reported, 60, "the status to report the new offsets")

    say(f"\n$ kubectl get bg -n {DEMO_NS} -o wide")
    say(c.kubectl("-n", DEMO_NS, "get", "bg", "-o", "wide").rstrip())
    say(f"\n$ kubectl get bg {name} -n {DEMO_NS} -o jsonpath='{{.status}}'")
    say(yaml.safe_dump(c.status(DEMO_NS, name), sort_keys=False).rstrip())

    total = time.monotonic() - clock.t0
    say("\n== timings")
    for phase, took in clock.phases:
        say(f"   {took:7.1f}s  {phase}")
    say(f"   {total:7.1f}s  total")
    ok = acked == args.messages and res["consumed"] == args.messages and java_ok
    say(
        "\n== demo "
        + ("passed" if ok else "FAILED: not every message was acknowledged and consumed")
    )
    kc = "" if os.environ.get("KUBECONFIG") else f"export KUBECONFIG={kubeconfig}\n   "
    say(
        f"""
Left running for a look:
   {kc}kubectl get bg,pods,pvc -n {DEMO_NS}
   kubectl describe bg {name} -n {DEMO_NS}
Remove it:
   kubectl delete bg --all -n {DEMO_NS} && helm uninstall {RELEASE} -n {OPERATOR_NS}
   kubectl delete namespace {DEMO_NS} {OPERATOR_NS}"""
        + ("\n   make cluster-down      # stop the local cluster" if kind == "local" else "")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ClusterGone as exc:
        sys.exit(f"demo: {exc}")
    except subprocess.CalledProcessError as exc:
        sys.exit(f"demo: `{' '.join(map(str, exc.cmd))}` failed ({exc.returncode})")
