"""What the local cluster costs: memory (RSS) and CPU time of each part, per namespace.

For the control plane and each node: its daemons (by their pid files) and, for a node, the pods
in its cgroup root. CPU is the time used since each process started (seconds), so two reports
some time apart give the average load between them (``--since FILE`` prints that difference,
``--save FILE`` keeps a report for it). ``--watch FILE`` samples every few seconds until
stopped and keeps each part's peak memory in FILE; ``--peak FILE`` prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")
CGROUP_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def proc_usage(pid: int) -> tuple[int, float]:
    """(RSS bytes, CPU seconds) of one process; (0, 0) if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0, 0.0
    return rss, (int(stat[11]) + int(stat[12])) / CLK_TCK


def pods_usage(cgroup_root: str) -> tuple[int, float]:
    """RSS of the processes in a kubelet's pod cgroups, and their CPU time (cpuacct)."""
    pids: set[int] = set()
    base = CGROUP_MEMORY / cgroup_root
    # pods come and go while we look: a cgroup may vanish between listing and reading
    for root, _dirs, files in os.walk(base):
        if "cgroup.procs" in files:
            try:
                pids |= {int(p) for p in (Path(root) / "cgroup.procs").read_text().split()}
            except OSError:
                continue
    rss = sum(proc_usage(p)[0] for p in pids)
    cpu_file = CGROUP_CPUACCT / cgroup_root / "kubepods" / "cpuacct.usage"
    try:
        cpu = int(cpu_file.read_text()) / 1e9
    except (OSError, ValueError):
        cpu = 0.0
    return rss, cpu


def report(cluster_dir: Path) -> dict[str, dict[str, float]]:
    run = cluster_dir / "run"
    parts: dict[str, dict[str, float]] = {}
    for pid_file in sorted(run.glob("*.pid")):
        name = pid_file.stem
        owner, _, daemon = name.partition("-") if name.startswith("node") else ("", "", name)
        where = (
            f"bg-e2e-{owner}"
            if owner
            else ("host" if name.startswith(("apiforward", "forward-")) else "bg-e2e-cp")
        )
        try:
            rss, cpu = proc_usage(int(pid_file.read_text()))
        except ValueError:
            continue
        part = parts.setdefault(where, {"rss_mib": 0.0, "cpu_s": 0.0})
        part["rss_mib"] += rss / 2**20
        part["cpu_s"] += cpu
        part[f"{daemon}_mib"] = rss / 2**20
    for where in list(parts):
        if where.startswith("bg-e2e-node"):
            rss, cpu = pods_usage(where)
            parts[where]["pods_mib"] = rss / 2**20
            parts[where]["pods_cpu_s"] = cpu
    return parts


def watch(cluster_dir: Path, out: Path, interval: float) -> None:
    """Sample until SIGTERM; keep the peak of each part's memory (daemons, pods, both)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    peak: dict[str, dict[str, float]] = {}
    while True:
        for where, u in report(cluster_dir).items():
            p = peak.setdefault(where, {"rss_mib": 0.0, "pods_mib": 0.0, "total_mib": 0.0})
            total = u["rss_mib"] + u.get("pods_mib", 0.0)
            p["rss_mib"] = max(p["rss_mib"], u["rss_mib"])
            p["pods_mib"] = max(p["pods_mib"], u.get("pods_mib", 0.0))
            p["total_mib"] = max(p["total_mib"], total)
        out.write_text(json.dumps(peak))
        time.sleep(interval)


def show_peak(path: Path) -> None:
    peak: dict[str, dict[str, float]] = json.loads(path.read_text())
    print(f"{'part':14} {'daemons MiB':>11} {'pods MiB':>9} {'together MiB':>13}  (peaks)")
    for where, p in sorted(peak.items()):
        print(f"{where:14} {p['rss_mib']:11.0f} {p['pods_mib']:9.0f} {p['total_mib']:13.0f}")
    print(f"{'all':14} {'':11} {'':9} {sum(p['total_mib'] for p in peak.values()):13.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster-dir", type=Path, default=None)
    ap.add_argument("--watch", type=Path, help="sample until stopped; peaks into this file")
    ap.add_argument("--interval", type=float, default=3.0)
    ap.add_argument("--peak", type=Path, help="print the peaks a --watch kept")
    ap.add_argument("--save", type=Path, help="keep this report (with its time) for --since")
    ap.add_argument("--since", type=Path, help="also print the average CPU since that report")
    args = ap.parse_args()
    if args.peak:
        show_peak(args.peak)
        return
    if args.cluster_dir is None:
        ap.error("--cluster-dir is needed")
    if args.watch:
        watch(args.cluster_dir, args.watch, args.interval)
        return
    now = report(args.cluster_dir)
    earlier = json.loads(args.since.read_text()) if args.since and args.since.exists() else None
    print(
        f"{'part':14} {'daemons MiB':>11} {'pods MiB':>9} {'CPU s':>8} {'avg CPU %':>10}  daemons"
    )
    for where, u in sorted(now.items()):
        cpu = u["cpu_s"] + u.get("pods_cpu_s", 0.0)
        avg = ""
        if earlier and where in earlier["parts"]:
            e = earlier["parts"][where]
            dt = time.time() - earlier["time"]
            avg = f"{100 * (cpu - e['cpu_s'] - e.get('pods_cpu_s', 0.0)) / dt:.1f}"
        detail = " ".join(
            f"{k[:-4]}={v:.0f}"
            for k, v in sorted(u.items())
            if k.endswith("_mib") and k != "rss_mib" and k != "pods_mib"
        )
        print(
            f"{where:14} {u['rss_mib']:11.0f} {u.get('pods_mib', 0):9.0f} {cpu:8.1f} {avg:>10}  {detail}"
        )
    if args.save:
        args.save.write_text(json.dumps({"time": time.time(), "parts": now}))


if __name__ == "__main__":
    main()
