"""Three-replica DLedger groups against two-replica SYNC pairs, habroker's and RocketMQ's own, in
one run: what issue 15's "DLEDGER >= 0.8x classic SYNC" costs any implementation on this machine.

Four groups run in one private network namespace (RocketMQ 4.9 binds 0.0.0.0;
interop/rocketmq_java's :class:`NetNS`), with a Java name server, in two phases, each
implementation's pair alone:

* ``habroker_dledger``: three habroker peers in DLedger mode (``LocalDLedgerGroup``);
* ``habroker_sync``: a habroker SYNC master + slave;
* ``rocketmq_dledger``: three RocketMQ 4.9.7 brokers with ``enableDLegerCommitLog=true``
  (DLedger 0.3.1.2 from the 4.9.7 set; interop/dledger_java);
* ``rocketmq_sync``: a RocketMQ 4.9.7 SYNC_MASTER + SLAVE.

Every group gets the same load (:func:`bench.loadgen.remoting_send`: pre-encoded
SEND_BATCH_MESSAGE frames of 32 1-KiB messages on the **client port** of whoever takes writes,
one request outstanding per connection, producers in their own processes) and the same store
settings (bench.rocketmq's STORE, JVM flags and heap), after the same 20 s of unmeasured load
(:func:`bench.rocketmq.warm_up`: the JVMs compile their hot paths).  habroker's two groups are
measured first, then stopped; then RocketMQ's two are started and measured.  Each phase's
repetitions measure its pair in a rotated order, so drift of the shared VM falls on both.  Why
phases: an idle RocketMQ group is not idle (its pollers and heartbeats took 0.37 cores here),
and that CPU was taken from whichever group was measured beside it; on two cores it fell hardest
on the one that needed every core (the DLedger group with four producers: 19.9k msgs/s beside
the JVMs, 39.7k alone minutes later, 2026-11-29), so the DLEDGER / SYNC ratio each pair gives
is now that pair's alone.  The habroker / RocketMQ ratios compare two phases of one run.
Beside msgs/s, the CPU seconds
of every process of the measured group (its brokers; for RocketMQ the JVMs, their GC and
background threads included) are read from /proc before and after each measurement: CPU
microseconds per acknowledged message, which the other load on a shared VM moves less.  The
load generator's CPU is read the same way, so the cores everything used are known and, for each
DLedger group, :func:`replica_ceiling`: the ratio to its SYNC pair that a third replica costing
one more slave allows when every core is busy.

``python -m bench.rocketmq_dledger [--quick]``; ``python -m bench.run`` runs it as module
``rocketmq_dledger`` (left out by ``--no-rocketmq``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from habroker.local import LocalDLedgerGroup, LocalGroup

from bench import common, dledger, loadgen, rocketmq, servers
from bench.stats import ratio, replica_ceiling_of, summary

SYSTEMS = ("habroker_dledger", "habroker_sync", "rocketmq_dledger", "rocketmq_sync")
BATCH = 32
#: Java ports inside the namespace: the DLedger brokers' remoting ports 20911, 20921, 20931
#: (DLedger RPCs on 40911-40913), the SYNC pair's 30911 / 30921 (HA on +1)
DLEDGER_LISTEN_BASE = 20911
DLEDGER_PEERS = {f"n{i}": f"127.0.0.1:{40911 + i}" for i in range(3)}
SYNC_MASTER_PORT = 30911
#: broker.conf of the Java DLedger brokers beyond bench.rocketmq's. ``enableBatchPush``: with
#: 4.9.7's default (false) a leader pushes one entry per APPEND RPC, and its group measured
#: 1.9k / 4.4k msgs/s here (1 / 4 producers, 0.06x / 0.09x its SYNC pair, 2026-11-28, before
#: the warm-up existed); with it
#: a push carries many entries, as habroker's pushes do: the fair comparison.
JAVA_DLEDGER: dict[str, Any] = {"enableBatchPush": True}
#: seconds of an idle group's CPU read before the load: the cost of merely running (heartbeats,
#: pollers), which falls on whichever group is measured
IDLE_SECONDS = 3.0


@dataclass
class Group:
    """One measured group: where the load goes, which processes it costs, how to reset it."""

    name: str
    port: int
    pids: dict[str, int]
    reset: Any  # () -> None, after each measurement


@contextlib.contextmanager
def rocketmq_dledger_group(ns: Any, root: Path) -> Iterator[tuple[Any, list[Any]]]:
    """Three 4.9.7 DLedger brokers (own broker name, so they do not mix with the SYNC pair in
    the name server); the leader once the two others follow it."""
    from interop import dledger_java

    extra = {
        **rocketmq.STORE,
        **rocketmq.BROKER_EXTRA,
        **JAVA_DLEDGER,
        "brokerName": "broker-dledger",
    }
    brokers = dledger_java.start_dledger_group(
        ns,
        root,
        DLEDGER_PEERS,
        listen_base=DLEDGER_LISTEN_BASE,
        extra=extra,
        jvm_flags=rocketmq.BROKER_JVM_FLAGS,
        wait=False,
    )
    try:
        for broker in brokers.values():
            broker.wait_booted(120)
        leader, _term = dledger_java.wait_leader(brokers.values(), followers=2, timeout=120)
        yield leader, list(brokers.values())
    finally:
        for broker in brokers.values():
            broker.stop()


def _job(port: int, producers: int, settings: common.Settings) -> loadgen.Job:
    body = common.payload()
    requests = [
        loadgen.remoting_send(servers.TOPIC, i % servers.QUEUES, body, BATCH)
        for i in range(producers)
    ]
    job = loadgen.Job("remoting", port, requests, BATCH)
    job.duration = settings.duration
    job.warmup = settings.warmup
    job.processes = min(producers, 4)
    return job


def _accepted(group: Group) -> None:
    """One batch to each queue (RocketMQ creates the topic on the first): SUCCESS or we stop."""
    body = common.payload()
    for queue in range(servers.QUEUES):
        frame = loadgen.remoting_send(servers.TOPIC, queue, body, BATCH)
        code, answer = rocketmq._invoke(group.port, frame)
        if code != 0:
            raise RuntimeError(
                f"{group.name} refused a batch-{BATCH} send to queue {queue}: code {code}: "
                f"{answer[8:400]!r}"
            )


def measure(group: Group, producers: int, settings: common.Settings) -> dict[str, Any]:
    """One measurement: msgs/s and CPU us per acknowledged message of each of the group's
    processes."""
    before = {k: common.cpu_seconds(pid) for k, pid in group.pids.items()}
    t0 = os.times()
    result = loadgen.run(_job(group.port, producers, settings))
    t1 = os.times()
    n = max(result["messages"], 1)
    cpu = {k: (common.cpu_seconds(pid) - before[k]) / n * 1e6 for k, pid in group.pids.items()}
    load = t1.children_user + t1.children_system - t0.children_user - t0.children_system
    load_us = load / n * 1e6  # the generator's processes, reaped when the run ends
    return {
        "msgs_per_s": result["msgs_per_s"],
        "not_ok": result["not_ok"],
        "not_ok_codes": result["not_ok_codes"],
        "cpu_us_per_msg": {**cpu, "all": sum(cpu.values())},
        "loadgen_cpu_us_per_msg": load_us,
        "cores_used": (sum(cpu.values()) + load_us) * result["msgs_per_s"] / 1e6,
    }


def replica_ceiling(sync: dict[str, Any]) -> float | None:
    """What DLEDGER / SYNC can be when every core is busy, if the three peers cost exactly the
    same run's SYNC master plus two of its slaves: (M + S + L) / (M + 2S + L), the medians of
    CPU us per message of master, slave and load generator.  When the cores are the bound,
    msgs/s go as the inverse of all the CPU a message costs on them, so a third replica that
    does a slave's work caps the ratio here whatever its code; a lower ratio is overhead of
    the DLedger group's own, a higher one a follower cheaper than a slave."""
    cpu = sync.get("cpu_us_per_msg") or {}
    load = (sync.get("loadgen_cpu_us_per_msg") or {}).get("median")
    if "master" not in cpu or "slave" not in cpu or load is None:
        return None
    return replica_ceiling_of(cpu["master"]["median"], cpu["slave"]["median"], load)


def idle_cores(groups: list[Group], seconds: float = IDLE_SECONDS) -> dict[str, float]:
    """CPU seconds per wall second of each group's processes while nothing is sent."""
    before = {g.name: sum(common.cpu_seconds(p) for p in g.pids.values()) for g in groups}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return {
        g.name: round(
            (sum(common.cpu_seconds(p) for p in g.pids.values()) - before[g.name]) / wall, 3
        )
        for g in groups
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def cells(
    groups: list[Group], settings: common.Settings, gone: list[Group] | None = None
) -> list[dict[str, Any]]:
    """Each group of one phase measured ``settings.reps`` times with 1 and 4 producers, the
    groups taking turns going first.  ``gone``: the groups of an earlier phase, whose processes
    must have ended (a cell records any still alive in ``others_running``)."""
    out: list[dict[str, Any]] = []
    for producers in (1, 4):
        runs: dict[str, list[dict[str, Any]]] = {g.name: [] for g in groups}
        for rep in range(settings.reps):
            k = rep % len(groups)
            for group in groups[k:] + groups[:k]:
                print(f"[rocketmq_dledger] {group.name} {producers} producer(s)", flush=True)
                runs[group.name].append(measure(group, producers, settings))
                group.reset()
        running = sorted(g.name for g in gone or [] if any(_alive(pid) for pid in g.pids.values()))
        for name, rs in runs.items():
            cpu_keys = rs[0]["cpu_us_per_msg"].keys()
            out.append(
                {
                    "system": name,
                    "batch": BATCH,
                    "producers": producers,
                    "msgs_per_s": summary([r["msgs_per_s"] for r in rs]),
                    "cpu_us_per_msg": {
                        k: summary([r["cpu_us_per_msg"][k] for r in rs]) for k in cpu_keys
                    },
                    "loadgen_cpu_us_per_msg": summary([r["loadgen_cpu_us_per_msg"] for r in rs]),
                    "cores_used": summary([r["cores_used"] for r in rs]),
                    "not_ok_requests": sum(r["not_ok"] for r in rs),
                    "not_ok_codes": loadgen.merge_counts(r["not_ok_codes"] for r in rs),
                    "others_running": running,
                }
            )
    return out


def with_ratios(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells of both phases, in :data:`SYSTEMS` order per producer count, with each DLedger
    group's ratio to its own SYNC pair (and the ceiling its pair's CPU allows) and habroker's
    ratio to RocketMQ per mode."""
    out: list[dict[str, Any]] = []
    for producers in (1, 4):
        by = {c["system"]: c for c in cells if c["producers"] == producers}
        med = {name: c["msgs_per_s"]["median"] for name, c in by.items()}
        for impl in ("habroker", "rocketmq"):
            by[f"{impl}_dledger"]["ratio_to_sync"] = ratio(
                med[f"{impl}_dledger"], med[f"{impl}_sync"]
            )
            by[f"{impl}_dledger"]["ceiling_if_cpu_bound"] = replica_ceiling(by[f"{impl}_sync"])
        for mode in ("dledger", "sync"):
            by[f"habroker_{mode}"]["ratio_to_rocketmq"] = ratio(
                med[f"habroker_{mode}"], med[f"rocketmq_{mode}"]
            )
        print(
            f"[rocketmq_dledger] {producers} producer(s): DLEDGER / SYNC habroker "
            f"{by['habroker_dledger']['ratio_to_sync']}, RocketMQ "
            f"{by['rocketmq_dledger']['ratio_to_sync']}; ceilings when CPU-bound "
            f"{by['habroker_dledger']['ceiling_if_cpu_bound']} / "
            f"{by['rocketmq_dledger']['ceiling_if_cpu_bound']}",
            flush=True,
        )
        out.extend(by[name] for name in SYSTEMS)
    return out


def _warm(
    groups: list[Group], settings: common.Settings
) -> tuple[dict[str, Any], dict[str, float]]:
    """Every group accepts a batch on each queue and gets the unmeasured load; then what each
    costs idle."""
    warmed = {}
    for g in groups:
        _accepted(g)
        warmed[g.name] = rocketmq.warm_up(g.port, settings)
        g.reset()
    print(f"[rocketmq_dledger] warm-up: {warmed}", flush=True)
    idle = idle_cores(groups)
    print(f"[rocketmq_dledger] idle cores used: {idle}", flush=True)
    return warmed, idle


def run(settings: common.Settings) -> dict[str, Any]:
    reason = rocketmq.unavailable()
    if reason:
        return {"skipped": reason}
    rmq = rocketmq._rmq()
    rmq.ensure_installed([rocketmq.VERSION])
    started = time.monotonic()
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    machine = common.machine_info()
    with common.scratch_dir(settings, "rocketmq-dledger") as root, rmq.NetNS(root / "ns") as ns:

        def habroker_phase() -> tuple[list[Group], list[dict[str, Any]], dict[str, Any]]:
            with contextlib.ExitStack() as stack:
                classic: LocalGroup = stack.enter_context(
                    servers.habroker_group(root / "habroker-sync", "SYNC", **rocketmq.STORE)
                )
                group: LocalDLedgerGroup = dledger.start_group(
                    root / "habroker-dledger", **rocketmq.STORE
                )
                stack.callback(group.stop)
                leader = group.leader()
                groups = [
                    Group(
                        "habroker_dledger",
                        int(leader.config["listenPort"]),
                        {p.root.name: p.proc.pid for p in group.peers if p.proc is not None},
                        lambda: group.wait_converged(timeout=120),
                    ),
                    Group(
                        "habroker_sync",
                        int(classic.master.config["listenPort"]),
                        {
                            "master": classic.master.proc.pid,  # type: ignore[union-attr]
                            "slave": classic.slaves[0].proc.pid,  # type: ignore[union-attr]
                        },
                        lambda: servers.habroker_reset(classic),
                    ),
                ]
                warmed, idle = _warm(groups, settings)
                measured = cells(groups, settings)
                return (
                    groups,
                    measured,
                    {
                        "warm_up": warmed,
                        "idle_cores_used": idle,
                        "leader": leader.root.name,
                    },
                )

        def rocketmq_phase(gone: list[Group]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            namesrv = rmq.JavaNameServer(ns, root / "namesrv", port=rocketmq.NAMESRV_PORT)
            namesrv.start()
            try:
                with contextlib.ExitStack() as stack:
                    jleader, jpeers = stack.enter_context(
                        rocketmq_dledger_group(ns, root / "rocketmq-dledger")
                    )
                    jmaster, jslave = stack.enter_context(
                        rocketmq.java_group(
                            ns,
                            root / "rocketmq-sync",
                            "SYNC",
                            namesrv.address,
                            master_port=SYNC_MASTER_PORT,
                        )
                    )
                    groups = [
                        Group(
                            "rocketmq_dledger",
                            jleader.spec.listen_port,
                            {b.self_id: b.proc.pid for b in jpeers},
                            lambda: None,
                        ),
                        Group(
                            "rocketmq_sync",
                            SYNC_MASTER_PORT,
                            {"master": jmaster.proc.pid, "slave": jslave.proc.pid},
                            lambda: None,
                        ),
                    ]
                    warmed, idle = _warm(groups, settings)
                    measured = cells(groups, settings, gone=gone)
                    return measured, {
                        "warm_up": warmed,
                        "idle_cores_used": idle,
                        "leader": jleader.self_id,
                    }
            finally:
                namesrv.stop()
                for folder in ("rocketmq-dledger", "rocketmq-sync"):
                    shutil.rmtree(root / folder, ignore_errors=True)

        def inside() -> dict[str, Any]:
            hgroups, hcells, hinfo = habroker_phase()
            rcells, rinfo = rocketmq_phase(hgroups)
            return {
                "version": rocketmq.VERSION,
                "started": when,
                "machine": machine,
                "quick": settings.quick,
                "netns": ns.name,
                "jvm_flags": list(rocketmq.BROKER_JVM_FLAGS),
                "store": rocketmq.STORE,
                "java_dledger": JAVA_DLEDGER,
                "phases": [
                    ["habroker_dledger", "habroker_sync"],
                    ["rocketmq_dledger", "rocketmq_sync"],
                ],
                "idle_cores_used": {**hinfo["idle_cores_used"], **rinfo["idle_cores_used"]},
                "warm_up": {**hinfo["warm_up"], **rinfo["warm_up"]},
                "duration_s": settings.duration,
                "reps": settings.reps,
                "leaders": {
                    "habroker_dledger": hinfo["leader"],
                    "rocketmq_dledger": rinfo["leader"],
                },
                "cells": with_ratios(hcells + rcells),
                "seconds": round(time.monotonic() - started, 1),
            }

        result: dict[str, Any] = ns.call(inside, timeout=3600)
        return result


def main(argv: list[str] | None = None) -> int:
    p = common.standalone_parser(
        "python -m bench.rocketmq_dledger", __doc__, "rocketmq_dledger.json"
    )
    args = p.parse_args(argv)
    return common.run_standalone(args, run)


if __name__ == "__main__":
    sys.exit(main())
