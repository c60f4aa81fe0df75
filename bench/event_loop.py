"""uvloop or the standard library's event loop under habroker (issue 17: keep uvloop only if
this shows it).

The same broker, the same remoting load (bench.loadgen, separate processes), once with
``habroker serve --event-loop asyncio`` and once with ``--event-loop uvloop``, taking turns
going first in every repetition.  Two setups: an ASYNC master alone (the put path and the
client port), and a SYNC master with one slave (the HA path too, both ends on the same loop).

    python -m bench.event_loop [--quick]     # writes bench/results/event_loop.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from habroker.local import LocalGroup

from bench import common, loadgen, servers
from bench.stats import percentiles, ratio, summary

LOOPS = ("asyncio", "uvloop")
SETUPS = (("ASYNC", 0), ("SYNC", 1))  # (master role, slaves)
CELLS = ((1, 4), (32, 4))  # (batch, producers)


def unavailable() -> str | None:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "uvloop is not installed (pip install uvloop; the broker image has it)"
    return None


@contextlib.contextmanager
def group(root: Path, loop: str, mode: str, slaves: int) -> Iterator[LocalGroup]:
    local = LocalGroup(root, slaves=slaves, mode=mode, fileReservedTime=0)
    for broker in local.brokers:
        broker.serve_args = ("--event-loop", loop)
    try:
        for broker in local.brokers:
            broker.start()
            assert broker.proc is not None
            common.register(broker.proc)
            if f"event loop: {loop}" not in broker.log_path.read_text():
                raise RuntimeError(f"{broker.log_path}: not serving on {loop}")
        code, body = local.master.request(
            "POST",
            "/v1/topics",
            {
                "topic": servers.TOPIC,
                "readQueueNums": servers.QUEUES,
                "writeQueueNums": servers.QUEUES,
            },
        )
        if code not in (200, 201):
            raise RuntimeError(f"cannot create topic: {code} {body}")
        if slaves:
            servers.wait_slave_connected(local)
        yield local
    finally:
        for broker in reversed(local.brokers):
            common.stop(broker.proc)


def job(port: int, batch: int, producers: int, settings: common.Settings) -> loadgen.Job:
    body = common.payload()
    requests = [
        loadgen.remoting_send(servers.TOPIC, i % servers.QUEUES, body, batch)
        for i in range(producers)
    ]
    out = loadgen.Job("remoting", port, requests, batch)
    out.duration, out.warmup, out.processes = settings.duration, settings.warmup, min(producers, 4)
    return out


def measure(settings: common.Settings) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = []
    with common.scratch_dir(settings, "event_loop") as scratch:
        for mode, slaves in SETUPS:
            with contextlib.ExitStack() as stack:
                groups = {
                    loop: stack.enter_context(group(scratch / f"{mode}-{loop}", loop, mode, slaves))
                    for loop in LOOPS
                }
                for batch, producers in CELLS:
                    runs: dict[str, list[dict[str, Any]]] = {loop: [] for loop in LOOPS}
                    for rep in range(settings.reps):
                        order = LOOPS if rep % 2 == 0 else LOOPS[::-1]
                        for loop in order:
                            g = groups[loop]
                            port = int(g.master.config["listenPort"])
                            result = loadgen.run(job(port, batch, producers, settings))
                            if result["not_ok"]:
                                raise RuntimeError(f"{loop}: {result['not_ok']} requests refused")
                            runs[loop].append(result)
                            servers.habroker_reset(g)
                    row: dict[str, Any] = {"mode": mode, "batch": batch, "producers": producers}
                    for loop, results in runs.items():
                        lat = [x / 1e6 for r in results for x in r["latencies_ns"]]
                        row[loop] = {
                            "msgs_per_s": summary([r["msgs_per_s"] for r in results]),
                            "request_latency_ms": percentiles(lat, (50, 99)),
                        }
                    row["uvloop_to_asyncio"] = ratio(
                        row["uvloop"]["msgs_per_s"]["median"],
                        row["asyncio"]["msgs_per_s"]["median"],
                    )
                    print(
                        f"{mode} batch {batch} x{producers}: asyncio "
                        f"{row['asyncio']['msgs_per_s']['median']:,.0f}/s, uvloop "
                        f"{row['uvloop']['msgs_per_s']['median']:,.0f}/s, "
                        f"ratio {row['uvloop_to_asyncio']}",
                        flush=True,
                    )
                    cells.append(row)
    return cells


def run(settings: common.Settings) -> dict[str, Any]:
    return {"machine": common.machine_info(), "quick": settings.quick, "cells": measure(settings)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.event_loop", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one short repetition (smoke)")
    parser.add_argument("--out", type=Path, default=common.RESULTS_DIR / "event_loop.json")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        print(f"bench.event_loop: {reason}", file=sys.stderr)
        return 2
    common.install_signal_handlers()
    settings = common.Settings.quick_mode() if args.quick else common.Settings()
    result = run(settings)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
