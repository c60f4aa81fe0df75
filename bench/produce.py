"""Produce throughput: habroker ASYNC vs Redis pipelined XADD, habroker SYNC vs XADD + WAIT 1.

For every batch size (messages per request) and producer count, each pair of systems is
measured ``reps`` times, alternating which goes first, so drift on this shared machine hits
both alike. Figures: messages/s and MB/s (1 KiB payloads, 1e6 bytes), min/median/max, plus the
per-request latency percentiles seen under that load.
"""

from __future__ import annotations

from typing import Any

from bench import common, loadgen
from bench.stats import percentiles, summary
from bench.systems import Systems, produce_job

PAIRS = (("habroker_async", "redis_pipelined"), ("habroker_sync", "redis_wait"))


def measure(
    systems: Systems, system: str, batch: int, producers: int, settings: common.Settings
) -> dict[str, Any]:
    job = produce_job(systems, system, batch, producers, settings)
    try:
        return loadgen.run(job)
    finally:
        systems.reset(system)


def cell(
    systems: Systems,
    pair: tuple[str, ...],
    batch: int,
    producers: int,
    settings: common.Settings,
) -> list[dict[str, Any]]:
    present = [s for s in pair if systems.has(s)]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in present}
    for rep in range(settings.reps):
        order = present if rep % 2 == 0 else list(reversed(present))
        for system in order:
            runs[system].append(measure(systems, system, batch, producers, settings))
    out = []
    for system, results in runs.items():
        rates = [r["msgs_per_s"] for r in results]
        lat = [x / 1e6 for r in results for x in r["latencies_ns"]]
        out.append(
            {
                "system": system,
                "batch": batch,
                "producers": producers,
                "msgs_per_s": summary(rates),
                "mb_per_s": summary([r * common.BODY_SIZE / 1e6 for r in rates]),
                "request_latency_ms": percentiles(lat, (50, 99)),
                "not_ok_requests": sum(r["not_ok"] for r in results),
                "requests": sum(r["requests"] for r in results),
            }
        )
    return out


def run(
    systems: Systems, settings: common.Settings, pairs: tuple[tuple[str, ...], ...] = PAIRS
) -> dict[str, Any]:
    cells: list[dict[str, Any]] = []
    for pair in pairs:
        for batch in settings.batches:
            for producers in settings.producers:
                cells.extend(cell(systems, pair, batch, producers, settings))
    return {"cells": cells, "duration_s": settings.duration, "reps": settings.reps}
