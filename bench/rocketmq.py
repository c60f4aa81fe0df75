"""habroker beside a real Apache RocketMQ broker group (Java 4.9.7) and Redis, in one run.

RocketMQ 4.9 binds its listeners to 0.0.0.0 with no setting to change that, so this whole
benchmark runs inside a private network namespace holding only ``lo`` (interop/rocketmq_java's
:class:`NetNS`): the Java name server and brokers, habroker's master and slave, the Redis pair
and every load generator. Nothing of it listens on the machine's own interfaces.

For each master mode (ASYNC_MASTER, then SYNC_MASTER) three groups run side by side:

* habroker master + slave, driven on its **client port** (the RocketMQ remoting protocol);
* RocketMQ 4.9.7 master + slave (``BrokerStartup``), driven on its broker port;
* Redis master + replica (XADD pipelined; for SYNC, XADD + ``WAIT 1``).

The two brokers get the *same* load generator (:func:`bench.loadgen.remoting_send`: raw sockets,
pre-encoded SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE frames, one request outstanding per connection,
producers in separate processes) and the same store settings (:data:`STORE`). Each cell (batch,
producers) measures the three systems ``reps`` times, rotating which goes first; while one is
measured the other broker groups are SIGSTOPped (:func:`others_paused`), so their idle CPU is not
taken from it. The brokers' resident memory is sampled during the produce runs. Then the same
pulls (PULL_MESSAGE, 32 and 1024 messages from a queue's start, over and over) and the real Java
producer (interop/driver's ``produce --quiet true``, timed inside the JVM) against both brokers.

``python -m bench.rocketmq [--quick]`` runs it alone; ``python -m bench.run`` runs it as module
``rocketmq``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from habroker.local import LocalGroup
from habroker.remoting.codes import RequestCode
from habroker.remoting.command import RemotingCommand
from habroker.store.commit_log import disk_used_ratio

from bench import common, loadgen, servers
from bench.stats import percentiles, ratio, summary

VERSION = "4.9.7"
TOPIC = servers.TOPIC
QUEUES = servers.QUEUES
PULL_TOPIC = "benchpull"
PULL_MAX = 32  # messages per PULL_MESSAGE (the Java consumer's default pullBatchSize)
#: the large pulls: DefaultMQPushConsumer's largest pullBatchSize (it refuses more than 1024)
PULL_MAX_LARGE = 1024
PULL_SIZES = (PULL_MAX, PULL_MAX_LARGE)
PULL_BACKLOG = 1024  # messages in each pulled queue, sent as batches of 256
PULL_QUEUES = 4
FLAG_SUBSCRIPTION = 0x4  # PullSysFlag: the request carries its subscription
#: Store settings given to both brokers explicitly (habroker's and RocketMQ 4.9's defaults):
#: 1 GiB commit-log files, asynchronous flush every 500 ms or 4 dirty pages.
STORE: dict[str, Any] = {
    "mappedFileSizeCommitLog": 1024 * 1024 * 1024,
    "flushDiskType": "ASYNC_FLUSH",
    "flushIntervalCommitLog": 500,
    "flushCommitLogLeastPages": 4,
}
#: RocketMQ's heap. runbroker.sh's default (-Xms8g -Xmx8g) is sized for a dedicated server; here
#: two broker JVMs, a name server, habroker and Redis share 2 cores and 24 GiB with other
#: engineers' work. 1 GiB is twice what the interop probe found plenty (512m), so garbage
#: collection has headroom at batch 256 (256 KiB requests from several producers) and is not
#: what bounds RocketMQ. Heap pages count in the RSS figures as the JVM touches them (no
#: AlwaysPreTouch).
BROKER_HEAP = os.environ.get("BENCH_ROCKETMQ_HEAP", "1g")
#: runbroker.sh's G1 options (4.9.7, Java 9+ branch) with the heap above, C2 on (the interop
#: tests' C1-only flags would slow the broker down), no /tmp perf files.
BROKER_JVM_FLAGS = (
    "-server",
    f"-Xms{BROKER_HEAP}",
    f"-Xmx{BROKER_HEAP}",
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=16m",
    "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30",
    "-XX:SoftRefLRUPolicyMSPerMB=0",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:-UseLargePages",
    "-XX:MaxDirectMemorySize=1g",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
)
#: broker.conf beyond STORE. waitTimeMillsInSendQueue: RocketMQ refuses a send that waited
#: longer than this in its queue (SYSTEM_BUSY, default 200 ms); on two shared cores a
#: scheduling stall is not overload, so it gets habroker's patience (no such limit) up to 5 s.
BROKER_EXTRA: dict[str, Any] = {
    "waitTimeMillsInSendQueue": 5000,
    "fileReservedTime": 72,
    "autoCreateTopicEnable": True,
    "autoCreateSubscriptionGroup": True,
    "defaultTopicQueueNums": QUEUES,
    # a pull from memory answers at most 32 messages / 256 KiB by default: the large pulls
    # need room for PULL_MAX_LARGE (habroker's defaults for these keys: 1024 and 4 MiB)
    "maxTransferCountOnMessageInMemory": PULL_MAX_LARGE,
    "maxTransferBytesOnMessageInMemory": 4 * 1024 * 1024,
}
MASTER_PORT = 10911  # inside the namespace: the usual ports are free
SLAVE_PORT = 10921
NAMESRV_PORT = 9876
SYSTEMS = ("habroker", "rocketmq", "redis")
#: seconds of unmeasured load on each broker before its first measurement (:func:`warm_up`)
WARMUP_S = 20.0


def unavailable() -> str | None:
    """Why the Java peer cannot run here, or None."""
    missing = [t for t in ("java", "javac", "mvn", "ip", "ss") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH (make java-setup)"
    if os.geteuid() != 0:
        return "a private network namespace needs root"
    return None


# -- resident memory ----------------------------------------------------------------------------
def _status(pid: int) -> dict[str, int]:
    """kB figures of /proc/PID/status (VmRSS, VmHWM, RssAnon, RssFile ...)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0])
    return out


class RssSampler:
    """Samples VmRSS / RssAnon of some processes every 100 ms; peaks and VmHWM at the end."""

    def __init__(self, pids: dict[str, int], interval: float = 0.1) -> None:
        self.pids = pids
        self.interval = interval
        self.peak: dict[str, dict[str, int]] = {name: {} for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            status = _status(pid)
            peak = self.peak[name]
            for key in ("VmRSS", "RssAnon", "RssFile"):
                if key in status:
                    peak[key] = max(peak.get(key, 0), status[key])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sample()

    def result(self) -> dict[str, dict[str, float]]:
        """MiB: ``VmHWM`` (the kernel's peak), sampled peaks of ``VmRSS``, ``RssAnon``, ``RssFile``."""
        out: dict[str, dict[str, float]] = {}
        for name, pid in self.pids.items():
            hwm = _status(pid).get("VmHWM")
            peaks = self.peak[name]
            out[name] = {
                "VmHWM_MiB": round(hwm / 1024, 1) if hwm else None,  # type: ignore[dict-item]
                **{f"{k}_peak_MiB": round(v / 1024, 1) for k, v in peaks.items()},
            }
        return out


# -- the systems --------------------------------------------------------------------------------
@dataclass
class Running:
    """One mode's three groups, as the measurements see them."""

    mode: str  # ASYNC or SYNC
    habroker: LocalGroup
    rocketmq_port: int
    rocketmq_pid: int
    redis: servers.RedisPair | None
    redis_keys: set[str] = field(default_factory=set)
    #: each broker group's processes (RocketMQ's name server with its brokers), paused while
    #: another system is measured (:func:`others_paused`)
    pids: dict[str, list[int]] = field(default_factory=dict)

    def port(self, system: str) -> int:
        if system == "habroker":
            return int(self.habroker.master.config["listenPort"])
        if system == "rocketmq":
            return self.rocketmq_port
        assert self.redis is not None
        return self.redis.master_port

    def systems(self) -> list[str]:
        return [s for s in SYSTEMS if s != "redis" or self.redis is not None]


@contextlib.contextmanager
def others_paused(run: Running, system: str) -> Iterator[list[str]]:
    """SIGSTOP the other broker groups while ``system`` is measured; SIGCONT them after.

    Idle, RocketMQ's JVMs take ~0.16 cores (pollers, heartbeats) and habroker's pair ~0.003;
    on two cores that CPU comes out of whichever group is measured, so it is the idle group's
    own cost, not the measured one's. Stopped for one measurement (a few seconds), the paused
    group's HA connection outlives it (housekeeping closes one after 20 s of silence). Yields
    the groups paused.
    """
    paused = [(name, pid) for name, pids in run.pids.items() if name != system for pid in pids]
    stopped: list[int] = []
    try:
        for _, pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        deadline = time.monotonic() + 5.0  # the signal lands asynchronously
        while time.monotonic() < deadline and not all(_stopped(pid) for pid in stopped):
            time.sleep(0.005)
        yield sorted({name for name, _ in paused})
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _stopped(pid: int) -> bool:
    """The process is stopped (state T in /proc/<pid>/stat), or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "T"


def _rmq() -> Any:
    """interop/rocketmq_java's helpers (NetNS, Java brokers, driver), imported when needed."""
    from interop import rocketmq_java

    return rocketmq_java


@contextlib.contextmanager
def java_group(
    ns: Any, root: Path, mode: str, namesrv: str, master_port: int = MASTER_PORT
) -> Iterator[tuple[Any, Any]]:
    """A RocketMQ master (SYNC_MASTER or ASYNC_MASTER) and its SLAVE, booted, HA connected;
    the slave listens 10 ports above the master (:data:`SLAVE_PORT` by default)."""
    rmq = _rmq()
    extra = {**STORE, **BROKER_EXTRA}
    master = rmq.JavaBroker(
        ns,
        VERSION,
        root / "master",
        rmq.BrokerSpec(
            role=f"{mode}_MASTER", listen_port=master_port, namesrv_addr=namesrv, extra=extra
        ),
    )
    slave = rmq.JavaBroker(
        ns,
        VERSION,
        root / "slave",
        rmq.BrokerSpec(
            broker_id=1,
            role="SLAVE",
            listen_port=master_port + (SLAVE_PORT - MASTER_PORT),
            namesrv_addr=namesrv,
            ha_master_address=master.ha_address,
            extra=extra,
        ),
    )
    for broker in (master, slave):
        broker.jvm_flags = BROKER_JVM_FLAGS
    try:
        master.start(wait=False)
        slave.start(wait=False)
        master.wait_booted(120)
        slave.wait_booted(120)
        rmq.wait_ha_connected(ns, master)
        yield master, slave
    finally:
        slave.stop()
        master.stop()


def _invoke(port: int, frame: bytes, timeout: float = 30.0) -> tuple[int, bytes]:
    """Send one pre-encoded remoting frame; (response code, whole response frame)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(frame)
        buf = bytearray()
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"127.0.0.1:{port} closed the connection")
            buf += chunk
        return loadgen.remoting_code(buf), bytes(buf)


def check_accepted(run: Running, batches: tuple[int, ...]) -> dict[str, dict[str, int]]:
    """Every frame kind the benchmark sends, once to each broker: SUCCESS (0) or we stop here.

    Also warms the topics up: the first send makes RocketMQ create ``bench`` (autoCreateTopic).
    """
    body = common.payload()
    codes: dict[str, dict[str, int]] = {}
    for system in ("habroker", "rocketmq"):
        codes[system] = {}
        for batch in sorted({1, *batches}):
            for queue in range(QUEUES):
                frame = loadgen.remoting_send(TOPIC, queue, body, batch)
                code, answer = _invoke(run.port(system), frame)
                if code != 0:
                    raise RuntimeError(
                        f"{system} ({run.mode}) refused a batch-{batch} send to queue {queue}: "
                        f"code {code}: {answer[8:400]!r}"
                    )
            codes[system][f"batch_{batch}"] = code
    return codes


def warm_up(port: int, settings: common.Settings) -> dict[str, Any]:
    """Batches of 32 from 4 producers for :data:`WARMUP_S` seconds, not measured: a JVM
    compiles its hot paths during the first ~20 s of load (a cold RocketMQ DLedger group sent
    2.4k msgs/s in its first 3 s and 9-12k after 20 s here, 2026-11-28); habroker gets the same
    so that neither side is measured cold."""
    body = common.payload()
    job = loadgen.Job(
        "remoting",
        port,
        [loadgen.remoting_send(TOPIC, i % QUEUES, body, 32) for i in range(4)],
        32,
        duration=0.5 if settings.quick else WARMUP_S,
        warmup=0.0,
        processes=4,
    )
    result = loadgen.run(job)
    return {"seconds": round(result["seconds"], 1), "msgs_per_s": round(result["msgs_per_s"])}


# -- produce ------------------------------------------------------------------------------------
def produce_job(
    run: Running, system: str, batch: int, producers: int, settings: common.Settings
) -> loadgen.Job:
    body = common.payload()
    if system == "redis":
        assert run.redis is not None
        wait = 5000 if run.mode == "SYNC" else None
        requests = []
        replies = batch
        for i in range(producers):
            key = f"bench:{i}"
            run.redis_keys.add(key)
            data, replies = loadgen.resp_xadd(key, body, batch, wait)
            requests.append(data)
        job = loadgen.Job(
            "resp",
            run.port(system),
            requests,
            batch,
            replies_per_request=replies,
            expect_wait=wait is not None,
        )
    else:
        requests = [loadgen.remoting_send(TOPIC, i % QUEUES, body, batch) for i in range(producers)]
        job = loadgen.Job("remoting", run.port(system), requests, batch)
    job.duration = settings.duration
    job.warmup = settings.warmup
    job.processes = min(producers, 4)
    return job


def reset(run: Running, system: str) -> None:
    """After a measurement: replicas catch up, habroker and Redis drop old data. RocketMQ keeps
    its files (they are 1 GiB each and the namespace's scratch folder goes at the end)."""
    if system == "habroker":
        servers.habroker_reset(run.habroker)
    elif system == "redis" and run.redis is not None:
        run.redis.reset(sorted(run.redis_keys))
        run.redis_keys.clear()


def _warnings(group: LocalGroup, lines: int = 400) -> list[str]:
    """The WARNING and ERROR lines near the end of each habroker log of ``group``."""
    return [
        f"{broker.config.get('brokerId', 0)}: {line}"
        for broker in group.brokers
        for line in broker.tail_log(lines).splitlines()
        if " WARNING " in line or " ERROR " in line
    ][-40:]


def produce_cell(
    run: Running, batch: int, producers: int, settings: common.Settings
) -> list[dict[str, Any]]:
    systems = run.systems()
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for rep in range(settings.reps):
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
        for system in order:
            try:
                with others_paused(run, system) as paused:
                    result = loadgen.run(produce_job(run, system, batch, producers, settings))
                result["paused"] = paused
                if result["not_ok"] and system == "habroker":  # say why in the JSON
                    result["broker_log_warnings"] = _warnings(run.habroker)
                runs[system].append(result)
            finally:
                reset(run, system)
    out = []
    for system, results in runs.items():
        rates = [r["msgs_per_s"] for r in results]
        lat = [x / 1e6 for r in results for x in r["latencies_ns"]]
        out.append(
            {
                "mode": run.mode,
                "system": system,
                "batch": batch,
                "producers": producers,
                "msgs_per_s": summary(rates),
                "mb_per_s": summary([r * common.BODY_SIZE / 1e6 for r in rates]),
                "request_latency_ms": percentiles(lat, (50, 99)),
                "not_ok_requests": sum(r["not_ok"] for r in results),
                "not_ok_codes": loadgen.merge_counts(r.get("not_ok_codes", {}) for r in results),
                "broker_log_warnings": [
                    line for r in results for line in r.get("broker_log_warnings", [])
                ],
                "not_ok_sample": next(
                    (r["not_ok_sample"] for r in results if r.get("not_ok_sample")), ""
                ),
                "requests": sum(r["requests"] for r in results),
                "others_paused": sorted({g for r in results for g in r["paused"]}),
            }
        )
    by = {c["system"]: c for c in out}
    for c in out:
        mine = c["msgs_per_s"]["median"]
        for peer in ("rocketmq", "redis"):
            if peer in by and peer != c["system"]:
                c[f"ratio_to_{peer}"] = ratio(mine, by[peer]["msgs_per_s"]["median"])
        for q in ("p50", "p99"):
            if "rocketmq" in by and c["system"] != "rocketmq":
                c[f"{q}_ratio_to_rocketmq"] = ratio(
                    c["request_latency_ms"][q], by["rocketmq"]["request_latency_ms"][q]
                )
    return out


# -- pull ---------------------------------------------------------------------------------------
def pull_frame(queue_id: int, offset: int = 0, max_nums: int = PULL_MAX) -> bytes:
    header = {
        "consumerGroup": "bench_consumer",
        "topic": PULL_TOPIC,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_nums,
        "sysFlag": FLAG_SUBSCRIPTION,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header).encode_bytes()


def pull_backlog(
    run: Running,
    systems: tuple[str, ...] = ("habroker", "rocketmq"),
    sizes: tuple[int, ...] = PULL_SIZES,
) -> dict[str, dict[int, int]]:
    """Each of the pull topic's first queues gets PULL_BACKLOG messages on both brokers; checks
    that a pull of each of ``sizes`` from offset 0 answers FOUND with at least that many KiB of
    body; the answers' sizes, by system and pull size."""
    body = common.payload()
    out: dict[str, dict[int, int]] = {}
    status, text = run.habroker.master.request(
        "POST",
        "/v1/topics",
        {"topic": PULL_TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES},
    )
    if status not in (200, 201, 409):
        raise RuntimeError(f"habroker: cannot create {PULL_TOPIC}: {status} {text}")
    for system in systems:
        for queue in range(PULL_QUEUES):
            frame = loadgen.remoting_send(PULL_TOPIC, queue, body, 256)
            for _ in range(PULL_BACKLOG // 256):
                code, answer = _invoke(run.port(system), frame)
                if code != 0:
                    raise RuntimeError(f"{system}: backlog send refused: {code} {answer[8:300]!r}")
        out[system] = {}
        for size in sizes:
            code, answer = _invoke(run.port(system), pull_frame(0, max_nums=size))
            if code != 0 or len(answer) < size * common.BODY_SIZE:
                raise RuntimeError(
                    f"{system}: pull of {size} from offset 0 answered code {code}, "
                    f"{len(answer)} bytes: {answer[8:300]!r}"
                )
            out[system][size] = len(answer)
    return out


def pull_cells(run: Running, settings: common.Settings) -> list[dict[str, Any]]:
    """For each pull size, 1 and PULL_QUEUES consumers, each pulling that many messages from its
    queue's start again and again (the same pre-encoded PULL_MESSAGE: both brokers serve the
    same page-cache-hot bytes)."""
    sizes = pull_backlog(run)
    cells: list[dict[str, Any]] = []
    for size, consumers in ((s, c) for s in PULL_SIZES for c in (1, PULL_QUEUES)):
        runs: dict[str, list[float]] = {"habroker": [], "rocketmq": []}
        for rep in range(settings.reps):
            order = ["habroker", "rocketmq"] if rep % 2 == 0 else ["rocketmq", "habroker"]
            for system in order:
                job = loadgen.Job(
                    "remoting",
                    run.port(system),
                    [pull_frame(i % PULL_QUEUES, max_nums=size) for i in range(consumers)],
                    size,
                    duration=settings.duration,
                    warmup=settings.warmup,
                    processes=min(consumers, 4),
                )
                with others_paused(run, system):
                    result = loadgen.run(job)
                if result["not_ok"]:
                    raise RuntimeError(f"{system}: {result['not_ok']} pulls not FOUND")
                runs[system].append(result["msgs_per_s"])
        for system, rates in runs.items():
            cells.append(
                {
                    "mode": run.mode,
                    "system": system,
                    "consumers": consumers,
                    "max_per_pull": size,
                    "response_bytes": sizes[system][size],
                    "msgs_per_s": summary(rates),
                    "mb_per_s": summary([r * common.BODY_SIZE / 1e6 for r in rates]),
                }
            )
        h, r = (c for c in cells[-2:])
        h["ratio_to_rocketmq"] = ratio(h["msgs_per_s"]["median"], r["msgs_per_s"]["median"])
    return cells


# -- the real Java producer -----------------------------------------------------------------------
def java_producer(ns: Any, run: Running, settings: common.Settings) -> list[dict[str, Any]]:
    """interop/driver's ``produce --quiet true``: DefaultMQProducer sending ``count`` 1 KiB
    messages (batch 32 with ``send(Collection)``, and single synchronous sends), timed in the JVM
    from the first send to the last answer; each broker once per repetition, alternating."""
    rmq = _rmq()
    addresses = {
        "habroker": run.habroker.master.address,
        "rocketmq": f"127.0.0.1:{NAMESRV_PORT}",
    }
    out: list[dict[str, Any]] = []
    # full sizes: a few seconds each at the rates seen here (sync sends: ~300-1500/s)
    plans = (
        ("batch", 32, 1600 if settings.quick else 32_000),
        ("sync", 1, 200 if settings.quick else 2000),
    )
    for mode, batch, count in plans:
        rates: dict[str, list[float]] = {"habroker": [], "rocketmq": []}
        for rep in range(settings.reps):
            order = ["habroker", "rocketmq"] if rep % 2 == 0 else ["rocketmq", "habroker"]
            for system in order:
                events = rmq.run_driver(
                    ns,
                    VERSION,
                    "produce",
                    "--namesrv",
                    addresses[system],
                    "--topic",
                    TOPIC,
                    "--count",
                    str(count),
                    "--mode",
                    mode,
                    "--batch",
                    str(batch),
                    "--size",
                    str(common.BODY_SIZE),
                    "--quiet",
                    "true",
                    "--compress-over",
                    str(1 << 20),  # 1 KiB bodies are not compressed anyway; say so
                    timeout=600,
                )
                s = rmq.summary(events)
                if s["failed"] or s["ok"] != count:
                    raise RuntimeError(f"Java producer against {system}: {s}")
                rates[system].append(count / max(s["elapsedMs"], 1) * 1000)
                reset(run, system)
        cell: dict[str, Any] = {
            "mode": run.mode,
            "client_mode": mode,
            "batch": batch,
            "count": count,
            **{s: summary(v) for s, v in rates.items()},
        }
        cell["ratio_to_rocketmq"] = ratio(cell["habroker"]["median"], cell["rocketmq"]["median"])
        out.append(cell)
    return out


# -- one mode ---------------------------------------------------------------------------------------
def measure_mode(
    ns: Any,
    root: Path,
    mode: str,
    settings: common.Settings,
    redis: bool,
    namesrv_pid: int | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode}
    disk_at_start = round(disk_used_ratio(root), 1)
    namesrv = f"127.0.0.1:{NAMESRV_PORT}"
    with contextlib.ExitStack() as stack:
        master, slave = stack.enter_context(
            java_group(ns, root / f"rocketmq-{mode}", mode, namesrv)
        )
        group = stack.enter_context(
            servers.habroker_group(root / f"habroker-{mode}", mode, **STORE)
        )
        pair = (
            stack.enter_context(servers.redis_pair(root / f"redis-{mode}"))
            if redis and servers.redis_available()
            else None
        )
        procs = {
            "habroker": group.master.proc,
            "rocketmq": master.proc,
            "habroker_slave": group.slaves[0].proc,
            "rocketmq_slave": slave.proc,
        }
        pids = {name: proc.pid for name, proc in procs.items() if proc is not None}
        run = Running(mode, group, MASTER_PORT, pids["rocketmq"], pair)
        run.pids = {
            "habroker": [pids["habroker"], pids["habroker_slave"]],
            "rocketmq": [pids["rocketmq"], pids["rocketmq_slave"]]
            + ([namesrv_pid] if namesrv_pid else []),
        }
        out["accepted"] = check_accepted(run, settings.batches)
        out["warm_up"] = {}
        for system in ("habroker", "rocketmq"):
            out["warm_up"][system] = warm_up(run.port(system), settings)
            reset(run, system)
        out["processes"] = {
            name: Path(f"/proc/{pid}/comm").read_text().strip() for name, pid in pids.items()
        }
        cells: list[dict[str, Any]] = []
        with RssSampler(pids) as sampler:
            for batch in settings.batches:
                for producers in rocketmq_producers(settings):
                    print(f"[rocketmq] {mode} batch {batch} producers {producers}", flush=True)
                    cells.extend(produce_cell(run, batch, producers, settings))
        out["cells"] = cells
        out["rss"] = sampler.result()
        if mode == "ASYNC":
            try:
                out["pull"] = pull_cells(run, settings)
            except Exception as exc:
                out["pull_error"] = f"{type(exc).__name__}: {exc}"
        try:
            out["java_producer"] = java_producer(ns, run, settings)
        except Exception as exc:
            out["java_producer_error"] = f"{type(exc).__name__}: {exc}"
        # a full disk makes brokers refuse writes (habroker past diskSpaceWarningLevelRatio):
        # the JSON says how full it got; each mode's files go when it ends
        out["disk_used_pct"] = {"start": disk_at_start, "end": round(disk_used_ratio(root), 1)}
    for folder in (f"rocketmq-{mode}", f"habroker-{mode}", f"redis-{mode}"):
        shutil.rmtree(root / folder, ignore_errors=True)
    return out


def rocketmq_producers(settings: common.Settings) -> tuple[int, ...]:
    """Producer counts: the run's, plus 4 (the issue-17 target at batch 1 needs 4+)."""
    return tuple(sorted({*settings.producers, 4}))


def run(settings: common.Settings, redis: bool = True) -> dict[str, Any]:
    reason = unavailable()
    if reason:
        return {"skipped": reason}
    rmq = _rmq()
    rmq.ensure_installed([VERSION])
    started = time.monotonic()
    machine = common.machine_info()
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    with common.scratch_dir(settings, "rocketmq") as root, rmq.NetNS(root / "ns") as ns:

        def inside() -> dict[str, Any]:
            namesrv = rmq.JavaNameServer(ns, root / "namesrv", port=NAMESRV_PORT).start()
            try:
                modes = {
                    mode: measure_mode(
                        ns, root, mode, settings, redis, namesrv.proc.pid if namesrv.proc else None
                    )
                    for mode in ("ASYNC", "SYNC")
                }
            finally:
                namesrv.stop()
            return {
                "version": VERSION,
                "started": when,
                "machine": machine,
                "quick": settings.quick,
                "netns": ns.name,
                "jvm_flags": list(BROKER_JVM_FLAGS),
                "store": STORE,
                "broker_extra": BROKER_EXTRA,
                "duration_s": settings.duration,
                "reps": settings.reps,
                "modes": modes,
                "seconds": round(time.monotonic() - started, 1),
            }

        result: dict[str, Any] = ns.call(inside, timeout=4 * 3600)
        return result


def main(argv: list[str] | None = None) -> int:
    p = common.standalone_parser("python -m bench.rocketmq", __doc__, "rocketmq.json")
    p.add_argument("--no-redis", action="store_true")
    args = p.parse_args(argv)
    return common.run_standalone(args, lambda settings: run(settings, redis=not args.no_redis))


if __name__ == "__main__":
    sys.exit(main())
