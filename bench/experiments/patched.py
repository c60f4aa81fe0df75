"""Two otherwise identical master + slave groups, one of them patched, measured taking turns.

Each experiment writes its patch (a ``sitecustomize`` and whatever it imports) into a scratch
directory that is put on the patched group's PYTHONPATH only; the patch acts only where
``flag`` is set in that group's environment. The patch starts a thread named ``thread_name``
in the patched master, which is checked (and its absence in the other master) before anything
is measured, so a patch that did not take cannot pass for a result.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from habroker.local import LocalGroup

from bench import common, loadgen, rocketmq, servers
from bench.cores import cpu_seconds
from bench.event_loop import job
from bench.stats import ratio, summary


def _threads(group: LocalGroup) -> list[str]:
    assert group.master.proc is not None
    pid = group.master.proc.pid
    return sorted(
        Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
        for t in os.listdir(f"/proc/{pid}/task")
    )


def _patched_group(
    root: Path, mode: str, patch_dir: Path, flag: str, stack: contextlib.ExitStack
) -> LocalGroup:
    saved = dict(os.environ)
    os.environ[flag] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(patch_dir), saved.get("PYTHONPATH")) if p
    )
    try:
        return stack.enter_context(servers.habroker_group(root, mode, **rocketmq.STORE))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def compare(
    settings: common.Settings,
    *,
    name: str,
    prepare: Callable[[Path], object],
    flag: str,
    thread_name: str,
    modes: Sequence[str],
    cells: Sequence[tuple[int, int]],
) -> dict[str, Any]:
    """For each mode and (batch, producers) cell: the loop's and the patched group's msgs/s and
    master cores used, over ``settings.reps`` alternations (the first to run swaps each time)."""
    started = time.monotonic()
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": common.machine_info(),
        "reps": settings.reps,
        "duration_s": settings.duration,
        "cells": [],
        "master_threads": {},
    }
    with common.scratch_dir(settings, name) as root:
        patch_dir = root / "patch"
        patch_dir.mkdir()
        prepare(patch_dir)
        for mode in modes:
            with contextlib.ExitStack() as stack:
                groups = {
                    "loop": stack.enter_context(
                        servers.habroker_group(root / f"{mode}-loop", mode, **rocketmq.STORE)
                    ),
                    "thread": _patched_group(root / f"{mode}-thread", mode, patch_dir, flag, stack),
                }
                threads = out["master_threads"][mode] = {
                    label: _threads(g) for label, g in groups.items()
                }
                if thread_name not in threads["thread"] or thread_name in threads["loop"]:
                    raise RuntimeError(f"the patch is not where it should be: {threads}")
                for batch, producers in cells:
                    out["cells"].append(_cell(settings, name, groups, mode, batch, producers))
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def _cell(
    settings: common.Settings,
    name: str,
    groups: dict[str, LocalGroup],
    mode: str,
    batch: int,
    producers: int,
) -> dict[str, Any]:
    print(f"[{name}] {mode} batch {batch} producers {producers}", flush=True)
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in groups}
    for rep in range(settings.reps):
        order = list(groups) if rep % 2 == 0 else list(groups)[::-1]
        for label in order:
            g = groups[label]
            assert g.master.proc is not None
            pid = g.master.proc.pid
            port = int(g.master.config["listenPort"])
            cpu0, t0 = cpu_seconds(pid), time.monotonic()
            r = loadgen.run(job(port, batch, producers, settings))
            used = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
            servers.habroker_reset(g)
            if r["not_ok"]:
                raise RuntimeError(f"{label}: {r['not_ok']} requests not answered SUCCESS")
            runs[label].append((float(r["msgs_per_s"]), used))
    cell: dict[str, Any] = {"mode": mode, "batch": batch, "producers": producers}
    for label, values in runs.items():
        cell[label] = {
            "msgs_per_s": summary([v[0] for v in values]),
            "cores_used": summary([v[1] for v in values]),
        }
    cell["thread_over_loop_pairs"] = [
        ratio(t[0], lp[0]) for lp, t in zip(runs["loop"], runs["thread"], strict=True)
    ]
    cell["thread_over_loop"] = ratio(
        cell["thread"]["msgs_per_s"]["median"], cell["loop"]["msgs_per_s"]["median"]
    )
    print(f"[{name}] {json.dumps(cell['thread_over_loop_pairs'])}", flush=True)
    return cell


def main(
    argv: list[str] | None,
    module: str,
    doc: str | None,
    run: Callable[[common.Settings], dict[str, Any]],
) -> int:
    """``python -m bench.experiments.NAME``: the standalone options, results in NAME.json."""
    name = module.rsplit(".", 1)[-1]
    p = common.standalone_parser(f"python -m {module}", doc, f"{name}.json")
    args: argparse.Namespace = p.parse_args(argv)
    return common.run_standalone(args, run)
