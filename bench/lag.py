"""Replication lag under sustained load: how far the replica trails the master.

A paced load (``lag_rate`` 1 KiB messages/s offered, batches of 32 over 2 producers) runs for
``lag_seconds`` against the ASYNC master and against Redis; meanwhile the master's and the
replica's offsets are sampled every 20 ms (habroker: commit-log max offsets of master and slave;
Redis: master_repl_offset and the replica's slave_repl_offset). Lag is reported in bytes and in
milliseconds at the offered rate, as percentiles: averages hide starvation spikes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench import common, loadgen, servers
from bench.stats import percentiles, summary
from bench.systems import Systems, produce_job

BATCH = 32
PRODUCERS = 2
SAMPLE_EVERY = 0.02


def sample(offsets: Callable[[], tuple[int, int]], stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        try:
            master, replica = offsets()
        except (OSError, RuntimeError):
            continue
        out.append(max(0, master - replica))
        stop.wait(SAMPLE_EVERY)


def one(systems: Systems, system: str, settings: common.Settings) -> dict[str, Any]:
    interval = BATCH * PRODUCERS / settings.lag_rate
    job = produce_job(
        systems,
        system,
        BATCH,
        PRODUCERS,
        settings,
        duration=settings.lag_seconds,
        interval=interval,
    )
    if system.startswith("habroker"):
        group = systems.group(system)
        offsets: Callable[[], tuple[int, int]] = lambda: servers.habroker_offsets(group)  # noqa: E731
    else:
        assert systems.redis is not None
        offsets = systems.redis.offsets
    lags: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(offsets, stop, lags), daemon=True)
    sampler.start()
    try:
        result = loadgen.run(job)
    finally:
        stop.set()
        sampler.join(10)
        catchup_start = time.monotonic()
        systems.reset(system)
        drain = time.monotonic() - catchup_start
    rate_bytes = max(result["msgs_per_s"], 1.0) * common.BODY_SIZE
    pct = percentiles(lags, (50, 99, 100))
    return {
        "achieved_msgs_per_s": result["msgs_per_s"],
        "lag_bytes": pct,
        "lag_ms_at_rate": {k: v / rate_bytes * 1000 for k, v in pct.items()},
        "samples": len(lags),
        "drain_after_s": drain,
    }


def run(systems: Systems, settings: common.Settings) -> dict[str, Any]:
    present = [s for s in ("habroker_async", "redis_pipelined") if systems.has(s)]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in present}
    for rep in range(settings.reps):
        for system in present if rep % 2 == 0 else list(reversed(present)):
            runs[system].append(one(systems, system, settings))
    out: dict[str, Any] = {
        "offered_msgs_per_s": settings.lag_rate,
        "batch": BATCH,
        "producers": PRODUCERS,
        "seconds": settings.lag_seconds,
        "systems": {},
    }
    for system, reps in runs.items():
        out["systems"][system] = {
            "achieved_msgs_per_s": summary([r["achieved_msgs_per_s"] for r in reps]),
            "lag_p50_bytes": summary([r["lag_bytes"]["p50"] for r in reps]),
            "lag_p99_bytes": summary([r["lag_bytes"]["p99"] for r in reps]),
            "lag_max_bytes": summary([r["lag_bytes"]["p100"] for r in reps]),
            "lag_p99_ms": summary([r["lag_ms_at_rate"]["p99"] for r in reps]),
            "runs": reps,
        }
    return out
