"""Run the benchmarks in one go: ``python -m bench.run [--quick] [--only NAME ...]``.

Order: physical limits; then, with habroker (ASYNC and SYNC groups) and Redis running side by
side, produce, SYNC vs ASYNC + latency, replication lag and pull; then slave catch-up (the
servers are stopped first), DLedger, habroker beside a real Apache RocketMQ 4.9.7 group and
Redis in a private network namespace (``rocketmq``), three-replica DLedger groups against SYNC
pairs, habroker's and RocketMQ's own (``rocketmq_dledger``), and last both masters pinned to 1, 2
and all CPUs (``cores``; ``--no-rocketmq`` leaves these three out). Each
module's JSON goes to ``bench/results/NAME.json``, plots beside it, and ``docs/benchmarks.md``
is regenerated from the results (a module not run this time keeps its previous JSON). Before
each module the run waits (``--quiet-wait``, at most 120 s) for the 1-minute load average to
fall to half the CPUs, so no module measures the tail of the one before, and then times a
fixed Python loop (the CPU probe: how fast the VM's CPU is just then). Every server started
is stopped, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench import (
    catchup,
    common,
    cores,
    dledger,
    lag,
    limits,
    plot,
    produce,
    pull,
    report,
    rocketmq,
    rocketmq_dledger,
    sync_async,
    systems,
)

MODULES = (
    "limits",
    "produce",
    "sync_async",
    "lag",
    "pull",
    "catchup",
    "dledger",
    "rocketmq",
    "rocketmq_dledger",
    "cores",
)
JAVA_MODULES = ("rocketmq", "rocketmq_dledger", "cores")
NEEDS_SERVERS = {"produce", "sync_async", "lag", "pull"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, 1 repetition: a smoke test")
    p.add_argument("--only", action="append", choices=MODULES, help="run only this (repeatable)")
    p.add_argument("--reps", type=int, help="repetitions (default 3; quick 1)")
    p.add_argument("--duration", type=float, help="seconds per throughput measurement")
    p.add_argument("--catchup-size", help="catch-up backlog, e.g. 2G, 512M (default 2G)")
    p.add_argument("--no-redis", action="store_true", help="habroker and limits only")
    p.add_argument(
        "--no-rocketmq",
        action="store_true",
        help="leave out the real RocketMQ peer (modules rocketmq, rocketmq_dledger and cores: Java "
        "brokers, minutes)",
    )
    p.add_argument("--results-dir", type=Path, default=common.RESULTS_DIR)
    p.add_argument("--docs", type=Path, default=common.ROOT / "docs" / "benchmarks.md")
    p.add_argument("--scratch", type=Path, default=common.SCRATCH_DIR)
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: regenerate plots and docs from the JSON in --results-dir",
    )
    p.add_argument("--max-seconds", type=float, default=2400, help="skip what would start later")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="before each module wait up to this long for the 1-minute load average to fall to "
        "half the CPUs (the previous module's tail is not measured); 0: no wait (default 120; "
        "--quick: 0)",
    )
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> common.Settings:
    s = common.settings_for(args)
    if args.catchup_size:
        s.catchup_size = args.catchup_size
    return s


def load_previous(results_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in MODULES:
        path = results_dir / f"{name}.json"
        if path.exists():
            with contextlib.suppress(ValueError):
                out[name] = json.loads(path.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    common.install_signal_handlers()
    wanted = [] if args.report_only else list(args.only or MODULES)
    if args.no_rocketmq:
        wanted = [m for m in wanted if m not in JAVA_MODULES]
    args.results_dir.mkdir(parents=True, exist_ok=True)
    settings.scratch.mkdir(parents=True, exist_ok=True)
    keep = args.only or args.report_only
    results = load_previous(args.results_dir) if keep else {}
    if keep:  # the header keeps describing the last full run; --only runs are listed under it
        with contextlib.suppress(OSError, ValueError, KeyError):
            results["meta"] = json.loads((args.results_dir / "summary.json").read_text())["meta"]
    started = time.monotonic()
    meta: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "quick": settings.quick,
        "reps": settings.reps,
        "duration_s": settings.duration,
        "machine": common.machine_info(),
        "modules": wanted,
    }
    failed: list[str] = []
    attempted: list[str] = []

    def attempt(name: str, fn: Any) -> None:
        if time.monotonic() - started > args.max_seconds:
            results[name] = {"skipped": f"run exceeded --max-seconds={args.max_seconds:.0f}"}
            failed.append(name)
            return
        quiet = None
        if args.quiet_wait > 0 and not settings.quick:
            quiet = common.wait_until_quiet(timeout_s=args.quiet_wait)
            print(
                f"[bench] waited {quiet['waited_s']:.0f} s for a quiet machine: load average "
                f"{quiet['loadavg_1m']} (limit {quiet['limit']:g}); CPU probe "
                f"{quiet['cpu_probe_ms']:.0f} ms",
                flush=True,
            )
            if not attempted:  # "load average at start": when the first module started
                meta["machine"]["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
        attempted.append(name)
        print(f"[bench] {name} ...", flush=True)
        t0 = time.monotonic()
        try:
            results[name] = fn()
        except Exception as exc:
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed.append(name)
        if isinstance(results[name], dict):
            results[name]["elapsed_s"] = round(time.monotonic() - t0, 1)
            if quiet is not None:
                results[name]["quiet_wait"] = quiet
        print(f"[bench] {name} done in {time.monotonic() - t0:.1f} s", flush=True)

    try:
        if "limits" in wanted:
            attempt("limits", lambda: limits.run(settings))
        server_modules = [m for m in wanted if m in NEEDS_SERVERS]
        if server_modules:
            with (
                common.scratch_dir(settings, "systems") as root,
                systems.started(root, redis=not args.no_redis) as running,
            ):
                meta["systems"] = running.describe()
                if not running.redis and not args.no_redis:
                    meta.setdefault("notes", []).append(
                        "redis-server is not installed (bench/setup_redis.sh installs it): "
                        "no peer figures"
                    )
                for name in server_modules:
                    module = {
                        "produce": produce,
                        "sync_async": sync_async,
                        "lag": lag,
                        "pull": pull,
                    }[name]
                    attempt(name, lambda module=module: module.run(running, settings))
        if "catchup" in wanted:
            attempt(
                "catchup",
                lambda: catchup.run(settings, args.results_dir / "ha_catchup.json"),
            )
        if "dledger" in wanted:
            attempt("dledger", lambda: dledger.run(settings))
        if "rocketmq" in wanted:
            attempt("rocketmq", lambda: rocketmq.run(settings, redis=not args.no_redis))
        if "rocketmq_dledger" in wanted:
            attempt("rocketmq_dledger", lambda: rocketmq_dledger.run(settings))
        if "cores" in wanted:
            attempt("cores", lambda: cores.run(settings))
    finally:
        common.stop_all()
    meta["elapsed_s"] = time.monotonic() - started
    if args.report_only:
        meta = results.get("meta", meta)
    if args.only and results.get("meta"):
        rerun = {k: meta[k] for k in ("started", "elapsed_s", "modules", "quick")}
        rerun["loadavg_at_start"] = meta["machine"].get("loadavg_at_start")
        previous = [r for r in results["meta"].get("reruns", []) if r["modules"] != wanted]
        results["meta"]["reruns"] = [*previous, rerun]
    else:
        results["meta"] = meta
    report.add_ratios(results)
    results["goals"] = report.goals(results)
    results["notes"] = meta.get("notes", [])
    for name in MODULES:
        if name in results and name in wanted:
            (args.results_dir / f"{name}.json").write_text(
                json.dumps(results[name], indent=1) + "\n"
            )
    summary = {k: results[k] for k in ("meta", "goals", "notes")}
    (args.results_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot.all_plots(results, args.results_dir)
    args.docs.parent.mkdir(parents=True, exist_ok=True)
    args.docs.write_text(report.markdown(results))
    for g in results["goals"]:
        mark = {True: "met", False: "MISSED", None: "n/a"}[g["met"]]
        unit = g.get("unit", "x")
        value = "-" if g["value"] is None else f"{g['value']:.2f}{unit}"
        print(f"[bench] {mark:6} {value:>7} (target {g['target']}{unit})  {g['goal']}")
    print(f"[bench] results in {args.results_dir}, table in {args.docs}")
    if failed:
        print(f"[bench] failed or skipped: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
