"""PNG plots of one run (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {
    "habroker_async": "#1f77b4",
    "redis_pipelined": "#d62728",
    "habroker_sync": "#2ca02c",
    "redis_wait": "#ff7f0e",
}


def _bar(ax: Any, x: float, entry: dict[str, Any], color: str, label: str | None, w: float) -> None:
    med = entry["median"] or 0.0
    err = [[med - (entry["min"] or med)], [(entry["max"] or med) - med]]
    ax.bar(x, med, w, color=color, label=label, yerr=err, capsize=2)


def produce(results: dict[str, Any], path: Path) -> None:
    cells = results.get("produce", {}).get("cells", [])
    if not cells:
        return
    limits = results.get("limits", {}).get("seq_write", {})
    groups = sorted({(c["batch"], c["producers"]) for c in cells})
    systems = [s for s in COLORS if any(c["system"] == s for c in cells)]
    fig, ax = plt.subplots(figsize=(11, 5))
    w = 0.8 / max(1, len(systems))
    seen: set[str] = set()
    for gi, (batch, producers) in enumerate(groups):
        for si, system in enumerate(systems):
            for c in cells:
                if (c["system"], c["batch"], c["producers"]) == (system, batch, producers):
                    _bar(
                        ax,
                        gi + si * w,
                        c["mb_per_s"],
                        COLORS[system],
                        None if system in seen else system,
                        w,
                    )
                    seen.add(system)
        lim = limits.get(str(batch))
        if lim and lim.get("median"):
            ax.hlines(lim["median"], gi - w / 2, gi + 0.8 - w / 2, colors="k", linestyles="dotted")
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(groups))])
    ax.set_xticklabels([f"batch {b}\n{p} prod." for b, p in groups])
    ax.set_yscale("log")
    ax.set_ylabel("MB/s (1 KiB messages), log scale")
    ax.set_title("Produce throughput, median (min-max); dotted: sequential write limit")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sync_async(results: dict[str, Any], path: Path) -> None:
    sa = results.get("sync_async", {})
    thr, lat = sa.get("throughput", []), sa.get("latency", [])
    if not thr and not lat:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    prods = sorted({c["producers"] for c in thr})
    for si, system in enumerate(("habroker_async", "habroker_sync")):
        for pi, p in enumerate(prods):
            for c in thr:
                if (c["system"], c["producers"]) == (system, p):
                    _bar(
                        a1,
                        pi + si * 0.4,
                        c["msgs_per_s"],
                        COLORS[system],
                        system if pi == 0 else None,
                        0.4,
                    )
    a1.set_xticks([i + 0.2 for i in range(len(prods))])
    a1.set_xticklabels([f"{p} producers" for p in prods])
    a1.set_ylabel("messages/s (batch 1)")
    a1.set_title("SYNC vs ASYNC master")
    a1.legend(fontsize=8)
    for i, c in enumerate(lat):
        color = COLORS.get(c["system"], "grey")
        a2.bar(i - 0.2, c["p50_ms"]["median"] or 0, 0.4, color=color, alpha=0.6)
        a2.bar(i + 0.2, c["p99_ms"]["median"] or 0, 0.4, color=color)
    a2.set_xticks(range(len(lat)))
    a2.set_xticklabels([c["system"] for c in lat], rotation=15, fontsize=8)
    a2.set_ylabel("ms (light: p50, dark: p99)")
    a2.set_title("Single-message latency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def lag(results: dict[str, Any], path: Path) -> None:
    systems = results.get("lag", {}).get("systems", {})
    if not systems:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(systems)
    for i, name in enumerate(names):
        e = systems[name]
        vals = [e[k]["median"] or 0 for k in ("lag_p50_bytes", "lag_p99_bytes", "lag_max_bytes")]
        ax.bar(
            [i - 0.25, i, i + 0.25], [max(v, 1) for v in vals], 0.25, color=COLORS.get(name, "grey")
        )
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_yscale("log")
    ax.set_ylabel("replica lag, bytes (p50, p99, max)")
    ax.set_title("Replication lag under sustained load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PEER_COLORS = {"habroker": "#1f77b4", "rocketmq": "#9467bd", "redis": "#d62728"}


def rocketmq(results: dict[str, Any], path: Path) -> None:
    """habroker vs RocketMQ vs Redis over one run (module ``rocketmq``): produce per mode, pull."""
    modes = (results.get("rocketmq") or {}).get("modes") or {}
    if not modes:
        return
    fig, axes = plt.subplots(1, len(modes) + 1, figsize=(15, 4.8))
    for ax, (mode, data) in zip(axes, modes.items(), strict=False):
        cells = data.get("cells", [])
        groups = sorted({(c["batch"], c["producers"]) for c in cells})
        systems = [s for s in PEER_COLORS if any(c["system"] == s for c in cells)]
        w = 0.8 / max(1, len(systems))
        for gi, key in enumerate(groups):
            for si, system in enumerate(systems):
                for c in cells:
                    if (c["batch"], c["producers"]) == key and c["system"] == system:
                        _bar(
                            ax,
                            gi + si * w,
                            c["msgs_per_s"],
                            PEER_COLORS[system],
                            system if gi == 0 else None,
                            w,
                        )
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(groups))])
        ax.set_xticklabels([f"b{b}\n{p}p" for b, p in groups], fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("messages/s (1 KiB), log scale")
        peer = "XADD + WAIT 1" if mode == "SYNC" else "XADD pipelined"
        ax.set_title(f"Produce, {mode}_MASTER (Redis: {peer})", fontsize=10)
        ax.legend(fontsize=8)
    ax = axes[-1]
    pulls = [c for d in modes.values() for c in d.get("pull", [])]
    for i, c in enumerate(pulls):
        _bar(ax, i, c["msgs_per_s"], PEER_COLORS[c["system"]], None, 0.6)
    ax.set_xticks(range(len(pulls)))
    ax.set_xticklabels(
        [
            f"{c['system'][:3]}\n{c.get('max_per_pull', 32)}/pull\n{c['consumers']} cons."
            for c in pulls
        ],
        fontsize=7,
    )
    ax.set_yscale("log")
    ax.set_ylabel("messages/s pulled, log scale")
    ax.set_title("Pull (PULL_MESSAGE, 32 and 1024 per pull)", fontsize=10)
    fig.suptitle(
        "habroker vs Apache RocketMQ 4.9.7 (same remoting load generator), median (min-max)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cores(results: dict[str, Any], path: Path) -> None:
    """Throughput and cores used per CPU configuration (module ``cores``)."""
    cells = (results.get("cores") or {}).get("cells") or []
    if not cells:
        return
    fig, (ax, ax_used) = plt.subplots(1, 2, figsize=(13, 4.8))
    groups = sorted({(c["batch"], c["producers"], c["cores"]) for c in cells})
    systems = [s for s in PEER_COLORS if any(c["system"] == s for c in cells)]
    w = 0.8 / max(1, len(systems))
    for gi, key in enumerate(groups):
        for si, system in enumerate(systems):
            for c in cells:
                if (c["batch"], c["producers"], c["cores"]) == key and c["system"] == system:
                    label = system if gi == 0 else None
                    _bar(ax, gi + si * w, c["msgs_per_s"], PEER_COLORS[system], label, w)
                    _bar(ax_used, gi + si * w, c["cores_used"], PEER_COLORS[system], label, w)
    for a in (ax, ax_used):
        a.set_xticks([i + 0.4 - w / 2 for i in range(len(groups))])
        a.set_xticklabels([f"b{b} {p}p\n{k} core(s)" for b, p, k in groups], fontsize=8)
        a.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("messages/s (1 KiB), log scale")
    ax.set_title("ASYNC produce with the master pinned", fontsize=10)
    ax_used.set_ylabel("master CPU s per wall s")
    ax_used.set_title("Cores the master used", fontsize=10)
    fig.suptitle("habroker vs Apache RocketMQ 4.9.7 by CPUs given to the master, median (min-max)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


DLEDGER_COLORS = {
    "habroker_dledger": "#1f77b4",
    "habroker_sync": "#aec7e8",
    "rocketmq_dledger": "#9467bd",
    "rocketmq_sync": "#c5b0d5",
}


def rocketmq_dledger(results: dict[str, Any], path: Path) -> None:
    """msgs/s and CPU us per message of the four groups of module ``rocketmq_dledger``."""
    cells = (results.get("rocketmq_dledger") or {}).get("cells") or []
    if not cells:
        return
    fig, (ax, ax_cpu) = plt.subplots(1, 2, figsize=(12, 4.8))
    groups = sorted({c["producers"] for c in cells})
    w = 0.8 / len(DLEDGER_COLORS)
    for gi, producers in enumerate(groups):
        for si, (system, color) in enumerate(DLEDGER_COLORS.items()):
            for c in cells:
                if (c["system"], c["producers"]) == (system, producers):
                    label = system if gi == 0 else None
                    _bar(ax, gi + si * w, c["msgs_per_s"], color, label, w)
                    _bar(ax_cpu, gi + si * w, c["cpu_us_per_msg"]["all"], color, label, w)
    for a in (ax, ax_cpu):
        a.set_xticks([i + 0.4 - w / 2 for i in range(len(groups))])
        a.set_xticklabels([f"batch 32, {p} producer(s)" for p in groups], fontsize=8)
        a.legend(fontsize=8)
    ax.set_ylabel("messages/s (1 KiB)")
    ax_cpu.set_ylabel("CPU us per acknowledged message, all brokers")
    fig.suptitle("Three-replica DLedger vs two-replica SYNC: habroker and RocketMQ 4.9.7")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def all_plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    made = []
    for name, fn in (
        ("produce", produce),
        ("sync_async", sync_async),
        ("lag", lag),
        ("rocketmq", rocketmq),
        ("rocketmq_dledger", rocketmq_dledger),
        ("cores", cores),
    ):
        path = out_dir / f"{name}.png"
        fn(results, path)
        if path.exists():
            made.append(path)
    dl = results.get("dledger") or {}
    if dl.get("throughput") and dl.get("failover"):
        from bench import dledger

        dledger.plot(dl, out_dir / "dledger.png")
        made.append(out_dir / "dledger.png")
    return made
