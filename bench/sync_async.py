"""SYNC vs ASYNC master: produce throughput with 1, 8, 32 concurrent single-message producers,
and single-message synchronous latency (habroker SYNC vs Redis XADD + WAIT 1).

Concurrent producers are connections with one request outstanding each; SYNC producers are
released together by one slave acknowledgement (group transfer), which is what keeps SYNC close
to ASYNC as concurrency grows.
"""

from __future__ import annotations

from typing import Any

from bench import common, loadgen
from bench.produce import cell
from bench.stats import percentiles, summary
from bench.systems import Systems, produce_job


def throughput(systems: Systems, settings: common.Settings) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = []
    for producers in settings.sync_producers:
        cells.extend(cell(systems, ("habroker_async", "habroker_sync"), 1, producers, settings))
    return cells


def latency(systems: Systems, settings: common.Settings) -> list[dict[str, Any]]:
    """One producer, one message per request, ``latency_requests`` requests per repetition."""
    present = [
        s
        for s in ("habroker_sync", "redis_wait", "habroker_async", "redis_pipelined")
        if systems.has(s)
    ]
    runs: dict[str, list[list[float]]] = {s: [] for s in present}
    for rep in range(settings.reps):
        order = present if rep % 2 == 0 else list(reversed(present))
        for system in order:
            job = produce_job(
                systems,
                system,
                1,
                1,
                settings,
                duration=3600.0,
                max_requests=settings.latency_requests,
            )
            try:
                result = loadgen.run(job)
            finally:
                systems.reset(system)
            runs[system].append([x / 1e6 for x in result["latencies_ns"]])
    out = []
    for system, reps in runs.items():
        per_rep = [percentiles(r, (50, 99)) for r in reps]
        out.append(
            {
                "system": system,
                "requests_per_rep": settings.latency_requests,
                "p50_ms": summary([p["p50"] for p in per_rep]),
                "p99_ms": summary([p["p99"] for p in per_rep]),
                "all_reps_ms": percentiles([x for r in reps for x in r], (50, 90, 99, 99.9)),
            }
        )
    return out


def run(systems: Systems, settings: common.Settings) -> dict[str, Any]:
    return {"throughput": throughput(systems, settings), "latency": latency(systems, settings)}
