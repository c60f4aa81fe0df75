"""Operator at scale: RSS, apiserver request rate and sweep latency with N BrokerGroups.

    python -m bench.operator_scale [--groups 20] [--interval 5] [--window 60]

Real parts: a kube-apiserver + etcd on 127.0.0.1 (the tests' harness), the operator as its own
process under its RBAC, and 2 real habroker processes per group (master + slave, replicating).
There is no kubelet, so the harness writes each group's Pod objects itself (status: podIP,
Ready) with the labels the operator indexes; every broker gets its own loopback address
(masters 127.0.1.N, slaves 127.0.0.1 with per-group ports) so pod IPs are as distinct as on a
cluster. While measuring, a producer writes to every master so offsets (and so statuses) change.

Measured: operator RSS (max over the window), apiserver requests per second by verb/resource
(from the apiserver's own apiserver_request_total: nothing else talks to it in the window),
and every group's sweep duration from the operator's --log-sweeps lines; "all groups swept
within one poll interval" means every group logged a sweep in every interval and no sweep took
longer than the interval. Results: bench/results/operator_scale.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.brokergroup_operator import kubeapi  # noqa: E402

NS = "bench"
RESULTS = ROOT / "bench" / "results" / "operator_scale.json"
SWEEP_RE = re.compile(r"^(\S+ \S+) .*sweep (\S+)/(\S+) done in ([\d.]+) ms")


def start_broker(
    root: Path, host: str, client: int, ha: int, http: int, **conf: str
) -> subprocess.Popen[bytes]:
    root.mkdir(parents=True, exist_ok=True)
    settings = {
        "bindAddress": host,
        "brokerIP1": host,
        "listenPort": str(client),
        "haListenPort": str(ha),
        "httpListenPort": str(http),
        "storePathRootDir": str(root / "store"),
        "mappedFileSizeCommitLog": str(1 << 20),
        "maxMessageSize": str(1 << 16),
        **conf,
    }
    args = [
        sys.executable,
        "-m",
        "habroker",
        "serve",
        "--log-level",
        "warning",
        "--exit-with-parent",
    ]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    return subprocess.Popen(args, stdout=(root / "broker.log").open("wb"), stderr=subprocess.STDOUT)


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(url)


def request_counts(api: kubeapi.ApiServer) -> dict[str, float]:
    """apiserver_request_total by verb/resource (resource requests only)."""
    text = api.kubectl("get", "--raw", "/metrics").stdout
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if not labels.get("resource"):
            continue
        sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
        key = f"{labels['verb']} {labels['resource']}{sub}"
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def produce_loop(masters: list[str], stop: asyncio.Event) -> int:
    from habroker.client import AsyncProducer, OutgoingMessage

    sent = 0
    producers = [AsyncProducer(address) for address in masters]
    try:
        while not stop.is_set():
            batch = [OutgoingMessage(b"x" * 512) for _ in range(8)]
            results = await asyncio.gather(
                *(p.send_batch("bench", batch) for p in producers), return_exceptions=True
            )
            sent += sum(8 for r in results if not isinstance(r, BaseException))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)
    finally:
        for p in producers:
            await p.close()
    return sent


def idle_phase(api: kubeapi.ApiServer, pid: int, seconds: float) -> dict[str, Any]:
    """Nothing changes: the operator should write (almost) nothing — status only on change."""
    time.sleep(2 * 5.0)  # let the last produced offsets settle into status
    before = request_counts(api)
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(rss_mib(pid))
        time.sleep(1.0)
    after = request_counts(api)
    own = ("leases", "endpoints", "endpointslices")
    rates = {
        k: round((after.get(k, 0) - before.get(k, 0)) / seconds, 3)
        for k in after
        if after.get(k, 0) != before.get(k, 0) and k.split(" ")[1].split("/")[0] not in own
    }
    return {
        "window_s": seconds,
        "apiserver_requests_per_s": rates,
        "operator_rss_mib_max": round(max(samples), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument(
        "--idle", type=float, default=30.0, help="then measure this long without producing"
    )
    args = parser.parse_args()

    bin_dir = kubeapi.find_bin_dir()
    if bin_dir is None:
        sys.exit("no kube-apiserver/etcd: set BROKERGROUP_KUBE_BIN")
    work = Path(tempfile.mkdtemp(prefix="bg-bench-"))
    api = kubeapi.start(work / "api", bin_dir)
    brokers: list[subprocess.Popen[bytes]] = []
    operator: subprocess.Popen[bytes] | None = None
    try:
        api.kubectl("apply", "-f", str(ROOT / "crds" / "brokergroup.io_brokergroups.yaml"))
        api.kubectl("wait", "--for=condition=Established", "crd/brokergroups.brokergroup.io")
        rbac = [
            d
            for d in yaml.safe_load_all((ROOT / "operator" / "deploy" / "rbac.yaml").read_text())
            if d
        ]
        rbac[1]["subjects"] = [
            {
                "kind": "User",
                "name": "brokergroup-operator",
                "apiGroup": "rbac.authorization.k8s.io",
            }
        ]
        api.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
        api.kubectl("create", "namespace", NS)

        masters = []
        objects: list[dict[str, Any]] = []
        for i in range(args.groups):
            name, client, ha, http = f"bg-{i}", 20000 + 3 * i, 20001 + 3 * i, 20002 + 3 * i
            mhost = f"127.0.1.{i + 1}"
            brokers.append(
                start_broker(work / name / "m", mhost, client, ha, http, brokerRole="ASYNC_MASTER")
            )
            brokers.append(
                start_broker(
                    work / name / "s",
                    "127.0.0.1",
                    client,
                    ha,
                    http,
                    brokerRole="SLAVE",
                    brokerId="1",
                    haMasterAddress=f"{mhost}:{ha}",
                    masterHttpAddress=f"{mhost}:{http}",
                )
            )
            masters.append(f"{mhost}:{http}")  # the HTTP API: producers and the operator
            objects.append(
                {
                    "apiVersion": "brokergroup.io/v1alpha1",
                    "kind": "BrokerGroup",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "image": "habroker:bench",
                        "slaves": 1,
                        "storage": {"ephemeral": True},
                        "ports": {"client": client, "ha": ha, "http": http},
                        "readPolicy": {"slaveReadEnable": True},
                    },
                }
            )
            for pod, component in ((f"{name}-master-0", "master"), (f"{name}-slave-0", "slave")):
                objects.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": pod,
                            "namespace": NS,
                            "labels": {
                                "app.kubernetes.io/managed-by": "brokergroup-operator",
                                "brokergroup.io/group": name,
                                "app.kubernetes.io/component": component,
                            },
                        },
                        "spec": {
                            "nodeName": "bench-node",
                            "containers": [{"name": "broker", "image": "habroker:bench"}],
                        },
                    }
                )
        api.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        )
        for i in range(args.groups):
            for pod, ip in (
                (f"bg-{i}-master-0", f"127.0.1.{i + 1}"),
                (f"bg-{i}-slave-0", "127.0.0.1"),
            ):
                status = {
                    "status": {
                        "phase": "Running",
                        "podIP": ip,
                        "podIPs": [{"ip": ip}],
                        "conditions": [{"type": "Ready", "status": "True"}],
                    }
                }
                api.kubectl(
                    "patch",
                    "-n",
                    NS,
                    "pod",
                    pod,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps(status),
                )
        for address in masters:
            wait_http(f"http://{address}/healthz")
            body = json.dumps({"topic": "bench", "readQueueNums": 4, "writeQueueNums": 4}).encode()
            req = urllib.request.Request(
                f"http://{address}/v1/topics",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            urllib.request.urlopen(req, timeout=5).read()

        log = work / "operator.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(api.kubeconfig_for("operator-token")),
            "BROKERGROUP_POLL_INTERVAL": str(args.interval),
            "BROKERGROUP_WIRING": "pod-ip",
        }
        operator = subprocess.Popen(
            [sys.executable, "-m", "brokergroup_operator", "-n", NS, "--log-sweeps"],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        time.sleep(args.warmup)
        running = json.loads(api.kubectl("get", "-n", NS, "bg", "-o", "json").stdout)["items"]
        phases = sorted({(g.get("status") or {}).get("phase", "-") for g in running})

        stop = asyncio.Event()
        samples: list[float] = []
        before = request_counts(api)
        t0 = time.time()

        async def measure() -> int:
            producer = asyncio.create_task(produce_loop(masters, stop))
            end = time.monotonic() + args.window
            while time.monotonic() < end:
                samples.append(rss_mib(operator.pid))
                await asyncio.sleep(1.0)
            stop.set()
            return await producer

        sent = asyncio.run(measure())
        t1 = time.time()
        after = request_counts(api)
        seconds = t1 - t0
        every = {
            k: round((after.get(k, 0) - before.get(k, 0)) / seconds, 3)
            for k in sorted(set(after) | set(before))
            if after.get(k, 0) != before.get(k, 0)
        }
        # the apiserver's own bootstrap controllers (its lease, the kubernetes Service's
        # endpoints) are not the operator's; the /metrics scrapes are non-resource requests
        own = ("leases", "endpoints", "endpointslices")
        rates = {k: v for k, v in every.items() if k.split(" ")[1].split("/")[0] not in own}
        apiserver_self = {k: v for k, v in every.items() if k not in rates}

        sweeps: dict[str, list[tuple[float, float]]] = {}
        for line in log.read_text().splitlines():
            m = SWEEP_RE.search(line)
            if not m:
                continue
            stamp = time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
            if t0 <= stamp <= t1:
                sweeps.setdefault(m.group(3), []).append((stamp, float(m.group(4))))
        durations = sorted(d for v in sweeps.values() for _, d in v)
        intervals = int(seconds // args.interval)
        per_group = {g: len(v) for g, v in sweeps.items()}
        missed = [
            g
            for g in (f"bg-{i}" for i in range(args.groups))
            if per_group.get(g, 0) < intervals - 1
        ]
        final = json.loads(api.kubectl("get", "-n", NS, "bg", "-o", "json").stdout)["items"]
        result = {
            "groups": args.groups,
            "poll_interval_s": args.interval,
            "window_s": round(seconds, 1),
            "operator_rss_mib": {
                "max": round(max(samples), 1),
                "mean": round(statistics.mean(samples), 1),
            },
            "rss_goal_mib": 150,
            "apiserver_requests_per_s": rates,
            "apiserver_requests_per_s_total": round(sum(rates.values()), 3),
            "apiserver_own_requests_per_s": apiserver_self,
            "sweep_ms": {
                "count": len(durations),
                "p50": round(statistics.median(durations), 1) if durations else None,
                "p99": round(durations[int(len(durations) * 0.99) - 1], 1) if durations else None,
                "max": round(durations[-1], 1) if durations else None,
            },
            "sweeps_per_group": {
                "min": min(per_group.values(), default=0),
                "max": max(per_group.values(), default=0),
                "intervals_in_window": intervals,
            },
            "groups_missing_a_sweep": missed,
            "all_groups_swept_each_interval": not missed
            and bool(durations)
            and durations[-1] < args.interval * 1000,
            "phases_after_warmup": phases,
            "phases_at_end": sorted({(g.get("status") or {}).get("phase", "-") for g in final}),
            "messages_produced": sent,
            "idle": idle_phase(api, operator.pid, args.idle),
            "machine": {"cpus": os.cpu_count()},
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(timeout=20)
            except subprocess.TimeoutExpired:
                operator.kill()
        for proc in brokers:
            proc.terminate()
        for proc in brokers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        api.stop()


if __name__ == "__main__":
    main()
