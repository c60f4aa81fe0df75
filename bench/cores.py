"""How produce throughput grows with the cores a master may use: habroker beside RocketMQ 4.9.7.

The issue-17 question "does the broker use more cores when it has them" is answered by pinning,
not by guessing from profiles. Inside one private network namespace (RocketMQ 4.9 binds
0.0.0.0) a RocketMQ ASYNC_MASTER + SLAVE and a habroker ASYNC master + slave run side by side.
For each CPU configuration every thread of each master is pinned (``sched_setaffinity`` on each
task, what ``taskset -a -p`` does) to the last *k* CPUs of the machine, while the slaves, the
name server and the load generators stay on the first half of the CPUs (at least one). *k*
runs over 1, 2 and all the CPUs this process may use. With *k* = all CPUs the master shares the
load side's CPUs: on a 2-CPU machine "2 cores" means one core of its own plus what the load
side leaves of the other.

Before the first cell each master, unpinned, takes :func:`bench.rocketmq.warm_up`'s unmeasured
load, so the JVM's hot paths are compiled before anything is measured.

Two figures per cell: messages/s, and the master's **cores used** (its CPU seconds, all
threads, over the wall time of the measurement). A broker that scales shows cores used rising
with *k*; a single event loop stays at or below 1.0.

``python -m bench.cores [--quick]`` runs it alone; ``python -m bench.run`` runs it as module
``cores`` (after ``rocketmq``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import common, loadgen, rocketmq, servers
from bench.stats import ratio, summary

#: (batch, producers): one message per request, and the two batch sizes the targets use.
CELLS = ((1, 4), (32, 4), (256, 4))
QUICK_CELLS = ((32, 2),)
SYSTEMS = ("habroker", "rocketmq")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def configurations(cpus: list[int]) -> list[dict[str, list[int]]]:
    """Master and load-side CPU sets for k in 1, 2, all (distinct, at most len(cpus))."""
    n = len(cpus)
    load = cpus[: max(1, n // 2)]
    return [{"master": cpus[n - k :], "load": load} for k in sorted({1, min(2, n), n})]


def pin(pid: int, cpus: list[int]) -> int:
    """Every thread of ``pid`` to ``cpus``; threads started later inherit from their creator.
    Returns how many threads were pinned."""
    count = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread may end meanwhile
            os.sched_setaffinity(int(tid), cpus)
            count += 1
    return count


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def measure(
    run: rocketmq.Running,
    pids: dict[str, int],
    system: str,
    batch: int,
    producers: int,
    settings: common.Settings,
) -> dict[str, float]:
    """One produce measurement; throughput and the master's cores used meanwhile."""
    job = rocketmq.produce_job(run, system, batch, producers, settings)
    cpu0, t0 = cpu_seconds(pids[system]), time.monotonic()
    try:
        result = loadgen.run(job)
    finally:
        wall = time.monotonic() - t0
        cpu = cpu_seconds(pids[system]) - cpu0
        rocketmq.reset(run, system)
    return {
        "msgs_per_s": float(result["msgs_per_s"]),
        "cores_used": cpu / wall if wall > 0 else 0.0,
        "not_ok": float(result["not_ok"]),
    }


def measure_group(
    ns: Any, root: Path, settings: common.Settings, cells: tuple[tuple[int, int], ...]
) -> dict[str, Any]:
    rmq = rocketmq._rmq()
    cpus = sorted(os.sched_getaffinity(0))
    configs = configurations(cpus)
    namesrv = rmq.JavaNameServer(ns, root / "namesrv", port=rocketmq.NAMESRV_PORT).start()
    try:
        with contextlib.ExitStack() as stack:
            master, slave = stack.enter_context(
                rocketmq.java_group(
                    ns, root / "rocketmq", "ASYNC", f"127.0.0.1:{rocketmq.NAMESRV_PORT}"
                )
            )
            group = stack.enter_context(
                servers.habroker_group(root / "habroker", "ASYNC", **rocketmq.STORE)
            )
            assert group.master.proc is not None and group.slaves[0].proc is not None
            pids = {"habroker": group.master.proc.pid, "rocketmq": master.proc.pid}
            others = [group.slaves[0].proc.pid, slave.proc.pid, namesrv.proc.pid]
            run = rocketmq.Running("ASYNC", group, rocketmq.MASTER_PORT, pids["rocketmq"], None)
            rocketmq.check_accepted(run, tuple(b for b, _ in cells))
            # unpinned, before the first cell: neither master is measured cold (a JVM compiles
            # its hot paths during the first seconds of load)
            warmed: dict[str, dict[str, Any]] = {}
            for system in SYSTEMS:
                warmed[system] = rocketmq.warm_up(run.port(system), settings)
                rocketmq.reset(run, system)
            out_cells: list[dict[str, Any]] = []
            for config in configs:
                # this thread forks the load generators: they inherit its affinity
                os.sched_setaffinity(0, config["load"])
                for pid in others:
                    pin(pid, config["load"])
                threads = {s: pin(pids[s], config["master"]) for s in SYSTEMS}
                # read back: what the kernel holds for each master's main thread
                affinity = {s: sorted(os.sched_getaffinity(pids[s])) for s in SYSTEMS}
                k = len(config["master"])
                for batch, producers in cells:
                    print(f"[cores] {k} core(s) batch {batch} producers {producers}", flush=True)
                    runs: dict[str, list[dict[str, float]]] = {s: [] for s in SYSTEMS}
                    for rep in range(settings.reps):
                        order = SYSTEMS[rep % 2 :] + SYSTEMS[: rep % 2]
                        for system in order:
                            runs[system].append(
                                measure(run, pids, system, batch, producers, settings)
                            )
                    for system, results in runs.items():
                        out_cells.append(
                            {
                                "system": system,
                                "cores": k,
                                "master_cpus": config["master"],
                                "load_cpus": config["load"],
                                "master_threads": threads[system],
                                "master_affinity": affinity[system],
                                "batch": batch,
                                "producers": producers,
                                "msgs_per_s": summary([r["msgs_per_s"] for r in results]),
                                "cores_used": summary([r["cores_used"] for r in results]),
                                "not_ok_requests": sum(r["not_ok"] for r in results),
                            }
                        )
            return {
                "cpus": cpus,
                "configurations": configs,
                "warm_up": warmed,
                "cells": add_scaling(out_cells),
            }
    finally:
        namesrv.stop()


def add_scaling(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's throughput over the same system's at one core, and habroker / RocketMQ."""
    by = {(c["system"], c["cores"], c["batch"], c["producers"]): c for c in cells}
    for c in cells:
        one = by.get((c["system"], 1, c["batch"], c["producers"]))
        if one is not None:
            c["ratio_to_one_core"] = ratio(c["msgs_per_s"]["median"], one["msgs_per_s"]["median"])
        if c["system"] == "habroker":
            peer = by.get(("rocketmq", c["cores"], c["batch"], c["producers"]))
            if peer is not None:
                c["ratio_to_rocketmq"] = ratio(
                    c["msgs_per_s"]["median"], peer["msgs_per_s"]["median"]
                )
    return cells


def run(settings: common.Settings) -> dict[str, Any]:
    reason = rocketmq.unavailable()
    if reason:
        return {"skipped": reason}
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {"skipped": f"one CPU available ({cpus}): nothing to scale over"}
    rmq = rocketmq._rmq()
    rmq.ensure_installed([rocketmq.VERSION])
    cells = QUICK_CELLS if settings.quick else CELLS
    started = time.monotonic()
    machine = common.machine_info()
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    with common.scratch_dir(settings, "cores") as root, rmq.NetNS(root / "ns") as ns:
        measured: dict[str, Any] = ns.call(
            lambda: measure_group(ns, root, settings, cells), timeout=2 * 3600
        )
    return {
        "version": rocketmq.VERSION,
        "started": when,
        "machine": machine,
        "quick": settings.quick,
        "reps": settings.reps,
        "duration_s": settings.duration,
        "jvm_flags": list(rocketmq.BROKER_JVM_FLAGS),
        **measured,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = common.standalone_parser("python -m bench.cores", __doc__, "cores.json")
    return common.run_standalone(p.parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
