"""DLedger groups, measured: leader loss → first accepted write, and produce throughput next to
a classic SYNC master + slave.

    python -m bench.dledger [--rounds 4] [--quick]      (also part of `make bench`)
    python -m bench.dledger --throughput-only           (only DLEDGER / SYNC produce, batch 32)
    python -m bench.dledger --profile 5                 (py-spy on the leader and a follower)
    python -m bench.dledger --cpu --producers 4         (CPU us per message of every process)

Real parts: three habroker processes in DLedger mode on 127.0.0.1 (``LocalDLedgerGroup``), a
classic SYNC_MASTER + slave (``bench.servers``), and the same lean load generator
(``bench.loadgen``: pre-encoded HTTP batch produces, one request outstanding per connection) for
both, alternating which goes first in each repetition.

Failover rounds: producers send one message at a time to whichever peer takes writes (a refused
or failed send moves to the next peer; nothing is re-sent); the leader is SIGKILLed and the time
to the first write a *different* peer accepts is recorded; the killed peer restarts and the
group converges before the next round.  Once with RocketMQ's DLedger defaults (heartbeat
2000 ms, 3 missed heartbeats, vote wait 300-1000 ms) and once tuned.  At the end every
acknowledged message id is looked up in every peer's log.
Results: bench/results/dledger.json and dledger.png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from habroker.client import BrokerAPIError, Producer
from habroker.dledger.mmap_file_store import DLedgerMmapFileStore
from habroker.local import LocalBroker, LocalDLedgerGroup
from habroker.message import decode_record

from bench import common, loadgen, servers
from bench.stats import replica_ceiling_of, summary

RESULTS = common.RESULTS_DIR / "dledger.json"
TOPIC = servers.TOPIC
QUEUES = servers.QUEUES
TUNED = {
    "dLegerHeartBeatIntervalMs": 300,
    "dLegerMaxHeartBeatLeak": 3,
    "dLegerMinVoteIntervalMs": 100,
    "dLegerMaxVoteIntervalMs": 300,
}
#: followers copy the topic config each second so a new leader knows every queue
COMMON = {"metaSyncInterval": 1000}
TARGET_FAILOVER_S = 10.0
TARGET_RATIO = 0.8
#: repetitions of each throughput cell in a full run: the ratio is issue 15's target, and the
#: medians of two identical groups measured alternately 6 times ended 13% apart on this VM
THROUGHPUT_REPS = 5


# -- group helpers ---------------------------------------------------------------------------------
def start_group(root: Path, **config: Any) -> LocalDLedgerGroup:
    group = LocalDLedgerGroup(root, 3, **{**COMMON, **config})
    group.start()
    for peer in group.peers:
        assert peer.proc is not None
        common.register(peer.proc)
    leader = group.leader(timeout=60)
    code, body = leader.request(
        "POST", "/v1/topics", {"topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES}
    )
    if code not in (200, 201, 409):
        raise RuntimeError(f"cannot create topic: {code} {body}")
    deadline = time.monotonic() + 30
    for peer in group.peers:
        while True:
            _, topics = peer.request("GET", "/v1/topics")
            if TOPIC in topics["topicConfigTable"]:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{peer.root.name} never copied topic {TOPIC}")
            time.sleep(0.1)
    return group


def logged_ids(peer: LocalBroker) -> set[str]:
    """Message bodies in a stopped peer's DLedger log."""
    store = DLedgerMmapFileStore(
        peer.root / "store",
        str(peer.config["dLegerSelfId"]),
        data_file_size=int(peer.config.get("mappedFileSizeCommitLog", 1 << 30)),
    )
    store.recover()
    try:
        out = set()
        for index in range(max(store.ledger_begin_index, 0), store.ledger_end_index + 1):
            entry = store.get(index)
            if entry is not None:
                out.add(decode_record(entry.body, 0).body.decode(errors="replace"))
        return out
    finally:
        store.close()


def wait_caught_up(group: LocalDLedgerGroup, peer: LocalBroker, timeout: float = 120) -> None:
    """Until ``peer`` follows and holds what the leader had committed when we started waiting
    (the load keeps writing: the group never sits still)."""
    leader = group.leader(timeout=60, exclude=[peer])
    target = int(group.dledger_status(leader)["committedIndex"])  # type: ignore[index]
    deadline = time.monotonic() + timeout
    while True:
        st = group.dledger_status(peer)
        if st is not None and st["role"] == "FOLLOWER" and st["ledgerEndIndex"] >= target:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{peer.root.name} did not catch up to {target}: {st}")
        time.sleep(0.1)


# -- failover --------------------------------------------------------------------------------------
class Load:
    """Single-message producers that follow the leader; accepted writes with time and peer."""

    def __init__(self, group: LocalDLedgerGroup, count: int) -> None:
        self.group = group
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: list[str] = []
        self.accepted: list[tuple[float, int]] = []  # (monotonic time, peer index)
        self.refused = 0
        self.threads = [threading.Thread(target=self._run, args=(k,)) for k in range(count)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, k: int) -> None:
        peers = self.group.peers
        target = 0
        seq = 0
        producer: Producer | None = None
        while not self.stop.is_set():
            body = f"f{k}-{seq}"
            seq += 1
            try:
                if producer is None:
                    producer = Producer(peers[target].http_address, timeout=5)
                res = producer.send(TOPIC, body.encode(), queue_id=k % QUEUES)
                ok = res.status == "PUT_OK"
            except (OSError, BrokerAPIError):
                ok = False
            if ok:
                with self.lock:
                    self.acked.append(body)
                    self.accepted.append((time.monotonic(), target))
                continue
            self.refused += 1
            if producer is not None:
                producer.close()
                producer = None
            target = (target + 1) % len(peers)
            time.sleep(0.02)
        if producer is not None:
            producer.close()

    def first_after(self, t0: float, not_on: int) -> float | None:
        with self.lock:
            for t, peer in self.accepted:
                if t > t0 and peer != not_on:
                    return t - t0
        return None


def failover_rounds(root: Path, label: str, rounds: int, **timings: Any) -> dict[str, Any]:
    group = start_group(root, **timings)
    load = Load(group, 4)
    pauses: list[float] = []
    terms: list[int] = []
    try:
        load.start()
        for n in range(rounds):
            time.sleep(3.0)
            leader = group.leader(timeout=60)
            index = group.peers.index(leader)
            t0 = time.monotonic()
            leader.kill()
            while (pause := load.first_after(t0, index)) is None:
                if time.monotonic() - t0 > 120:
                    raise TimeoutError(f"{label} round {n}: no write accepted in 120 s")
                time.sleep(0.02)
            pauses.append(round(pause, 3))
            new = group.leader(timeout=30, exclude=[leader])
            terms.append(int(group.dledger_status(new)["term"]))  # type: ignore[index]
            print(f"dledger {label} round {n + 1}: leader n{index} killed, "
                  f"{pause:.2f} s without an accepted write", flush=True)  # fmt: skip
            leader.start()
            wait_caught_up(group, leader)
        load.close()
        group.wait_converged(timeout=120)
    finally:
        load.close()
        group.stop()  # also on errors: restarted peers are not in common's process list
    missing = {p.config["dLegerSelfId"]: 0 for p in group.peers}
    for peer in group.peers:
        present = logged_ids(peer)
        missing[peer.config["dLegerSelfId"]] = sum(1 for x in load.acked if x not in present)
    return {
        "timings": timings or "RocketMQ DLedger defaults",
        "pauseSeconds": pauses,
        "median": statistics.median(pauses),
        "max": max(pauses),
        "terms": terms,
        "acknowledged": len(load.acked),
        "notAcknowledged": load.refused,
        "acknowledgedMissing": missing,
    }


# -- throughput ------------------------------------------------------------------------------------
def _job(
    port: int, batch: int, producers: int, settings: common.Settings, remoting: bool = False
) -> loadgen.Job:
    """Produce load on the HTTP face, or on the client port (``remoting``: SEND_BATCH_MESSAGE,
    what RocketMQ clients send)."""
    body = common.payload()
    if remoting:
        requests = [loadgen.remoting_send(TOPIC, i % QUEUES, body, batch) for i in range(producers)]
    else:
        requests = [
            loadgen.http_produce(port, TOPIC, i % QUEUES, body, batch) for i in range(producers)
        ]
    job = loadgen.Job("remoting" if remoting else "http", port, requests, batch)
    job.duration = settings.duration
    job.warmup = settings.warmup
    job.processes = min(producers, 4)
    return job


def _port(broker: Any, remoting: bool) -> int:
    """The port the load goes to: the client port (remoting) or the HTTP face."""
    return int(broker.config["listenPort" if remoting else "httpListenPort"])


def throughput(
    root: Path, settings: common.Settings, batch: int = 32, remoting: bool = False
) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = []
    with servers.habroker_group(root / "sync", "SYNC") as classic:
        group = start_group(root / "dledger")
        try:
            leader = group.leader()
            ports = {
                "habroker_sync": _port(classic.master, remoting),
                "habroker_dledger": _port(leader, remoting),
            }
            reps = settings.reps if settings.quick else max(settings.reps, THROUGHPUT_REPS)
            for producers in settings.producers:
                runs: dict[str, list[dict[str, Any]]] = {s: [] for s in ports}
                for rep in range(reps):
                    order = list(ports) if rep % 2 == 0 else list(reversed(ports))
                    for system in order:
                        runs[system].append(
                            loadgen.run(_job(ports[system], batch, producers, settings, remoting))
                        )
                        if system == "habroker_sync":
                            servers.habroker_reset(classic)
                        else:
                            group.wait_converged(timeout=120)
                rates = {s: [r["msgs_per_s"] for r in rs] for s, rs in runs.items()}
                for system, rs in runs.items():
                    cells.append(
                        {
                            "system": system,
                            "batch": batch,
                            "producers": producers,
                            "msgs_per_s": summary(rates[system]),
                            "not_ok_requests": sum(r["not_ok"] for r in rs),
                        }
                    )
                ratio = statistics.median(rates["habroker_dledger"]) / max(
                    statistics.median(rates["habroker_sync"]), 1e-9
                )
                for c in cells[-2:]:
                    if c["system"] == "habroker_dledger":
                        c["ratio_to_sync"] = round(ratio, 3)
                print(f"dledger produce batch {batch}, {producers} producer(s): "
                      f"DLEDGER / SYNC = {ratio:.2f}", flush=True)  # fmt: skip
        finally:
            group.stop()
    return cells


def cpu_per_message(
    root: Path, settings: common.Settings, producers: int, batch: int = 32, remoting: bool = False
) -> dict[str, dict[str, float]]:
    """CPU microseconds per acknowledged message of every server process (and of the load
    generator), DLEDGER and classic SYNC alternated ``settings.reps`` times: on a shared
    2-core machine this moves less with the other load than msgs/s does."""
    import os

    out: dict[str, dict[str, float]] = {}

    def measure(label: str, port: int, procs: dict[str, Any]) -> None:
        before = {k: common.cpu_seconds(p.pid) for k, p in procs.items()}
        t0 = os.times()
        res = loadgen.run(_job(port, batch, producers, settings, remoting))
        t1 = os.times()
        n = max(res["messages"], 1)
        row = {k: (common.cpu_seconds(p.pid) - before[k]) / n * 1e6 for k, p in procs.items()}
        row["loadgen"] = (t1.children_user + t1.children_system - t0.children_user
                          - t0.children_system) / n * 1e6  # fmt: skip
        row["total"] = sum(row.values())
        row["msgs_per_s"] = res["msgs_per_s"]
        print(f"{label}: {res['msgs_per_s']:,.0f} msgs/s; CPU us/msg "
              + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k != "msgs_per_s"),
              flush=True)  # fmt: skip
        out.setdefault(label, {})
        for k, v in row.items():
            out[label][k] = out[label].get(k, 0.0) + v / settings.reps

    with servers.habroker_group(root / "sync", "SYNC") as classic:
        group = start_group(root / "dledger")
        try:
            leader = group.leader()
            followers = [p for p in group.peers if p is not leader]
            for rep in range(settings.reps):
                for system in ("sync", "dledger") if rep % 2 == 0 else ("dledger", "sync"):
                    if system == "sync":
                        measure(
                            "sync",
                            _port(classic.master, remoting),
                            {"master": classic.master.proc, "slave": classic.slaves[0].proc},
                        )
                        servers.habroker_reset(classic)
                    else:
                        procs = {"leader": leader.proc}
                        procs.update({f"follower{i}": p.proc for i, p in enumerate(followers)})
                        measure("dledger", _port(leader, remoting), procs)
                        group.wait_converged(timeout=120)
        finally:
            group.stop()
    return out


def profile(
    root: Path, seconds: float, producers: int, batch: int = 32, remoting: bool = False
) -> list[Path]:
    """py-spy samples of the leader and a follower under the throughput load (``pip install
    py-spy``); summaries written to
    ``bench/results/profile_dledger[_remoting]_b<batch>_p<n>_<role>.txt``."""
    import shutil
    import subprocess
    import sys

    from bench.profile import summarize

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    settings = common.Settings(duration=seconds + 1.0, warmup=0.5)
    group = start_group(root)
    written: list[Path] = []
    try:
        leader = group.leader()
        follower = next(p for p in group.peers if p is not leader)
        raws = {"leader": root / "leader.txt", "follower": root / "follower.txt"}
        spies = []
        for role, peer in (("leader", leader), ("follower", follower)):
            assert peer.proc is not None
            cmd = [spy, "record", "-p", str(peer.proc.pid), "-d", str(int(seconds))]
            cmd += ["-r", "250", "-f", "raw", "--nonblocking", "--gil", "-o", str(raws[role])]
            spies.append(
                subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        try:
            job = _job(_port(leader, remoting), batch, producers, settings, remoting)
            result = loadgen.run(job)
        finally:
            for proc in spies:
                try:
                    proc.wait(seconds + 30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for role, raw in raws.items():
            if not raw.exists():
                continue
            face = "_remoting" if remoting else ""
            path = common.RESULTS_DIR / f"profile_dledger{face}_b{batch}_p{producers}_{role}.txt"
            head = (
                f"habroker DLEDGER {role}, produce batch {batch}, {producers} producer(s)"
                f"{' on the client port' if remoting else ''}, "
                f"1 KiB bodies: {result['msgs_per_s']:,.0f} msgs/s while sampled (py-spy, 250 Hz)\n"
            )
            path.write_text(head + summarize(raw, top=80))
            written.append(path)
    finally:
        group.stop()
    return written


def run(settings: common.Settings, rounds: int | None = None) -> dict[str, Any]:
    rounds = rounds if rounds is not None else (1 if settings.quick else 4)
    with common.scratch_dir(settings, "dledger") as root:
        result = {
            "machine": common.machine_info(),
            "throughput": throughput(root / "throughput", settings),
            "failover": {
                "defaults": failover_rounds(root / "defaults", "defaults", rounds),
                "tuned": failover_rounds(root / "tuned", "tuned", rounds, **TUNED),
            },
            "targets": {"leaderLossSeconds": TARGET_FAILOVER_S, "ratioToSync": TARGET_RATIO},
        }
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for label, data in result["failover"].items():
        left.plot(range(1, len(data["pauseSeconds"]) + 1), data["pauseSeconds"], "o-", label=label)
    left.axhline(TARGET_FAILOVER_S, color="red", linestyle="--", label="target")
    left.set_xlabel("round (leader SIGKILLed)")
    left.set_ylabel("seconds without an accepted write")
    left.legend()
    cells = result["throughput"]
    labels = [f"{c['system'].removeprefix('habroker_')}\n{c['producers']}p" for c in cells]
    right.bar(labels, [c["msgs_per_s"]["median"] for c in cells])
    right.set_ylabel("messages/s (1 KiB, batch 32)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=None, help="leader kills per timing setting")
    p.add_argument("--quick", action="store_true", help="a smoke run")
    p.add_argument(
        "--throughput-only",
        action="store_true",
        help="only DLEDGER / classic SYNC produce at batch 32 (printed; no results file)",
    )
    p.add_argument(
        "--profile", type=float, metavar="SECONDS", help="only py-spy the leader and a follower"
    )
    p.add_argument(
        "--cpu", action="store_true", help="only CPU per message of every process, both modes"
    )
    p.add_argument("--producers", type=int, default=1, help="with --profile or --cpu")
    p.add_argument(
        "--remoting",
        action="store_true",
        help="with --throughput-only, --profile or --cpu: produce on the client port "
        "(RocketMQ remoting) instead of the HTTP face",
    )
    args = p.parse_args(argv)
    common.install_signal_handlers()
    settings = common.Settings.quick_mode() if args.quick else common.Settings()
    if args.throughput_only or args.profile or args.cpu:
        try:
            with common.scratch_dir(settings, "dledger") as root:
                if args.cpu:
                    result = cpu_per_message(root, settings, args.producers, remoting=args.remoting)
                    print(json.dumps(result, indent=1))
                    sync, dl = result["sync"], result["dledger"]
                    ceiling = replica_ceiling_of(sync["master"], sync["slave"], sync["loadgen"])
                    print(f"CPU a message, all of it: SYNC / DLEDGER {sync['total'] / dl['total']:.2f}; "
                          f"ceiling if CPU-bound (M+S+L)/(M+2S+L) {ceiling or 0:.2f}")  # fmt: skip
                elif args.profile:
                    for path in profile(root, args.profile, args.producers, remoting=args.remoting):
                        print(f"wrote {path}")
                else:
                    print(json.dumps(throughput(root, settings, remoting=args.remoting), indent=1))
        finally:
            common.stop_all()
        return 0
    try:
        result = run(settings, args.rounds)
    finally:
        common.stop_all()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    plot(result, RESULTS.with_suffix(".png"))
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
