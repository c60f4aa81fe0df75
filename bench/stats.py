"""Small statistics shared by every benchmark: min/median/max, percentiles, ratios."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def summary(values: Sequence[float]) -> dict[str, Any]:
    """``{"min", "median", "max", "n", "runs"}`` of repeated measurements (runs kept)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"min": None, "median": None, "max": None, "n": 0, "runs": []}
    return {
        "min": min(vals),
        "median": statistics.median(vals),
        "max": max(vals),
        "n": len(vals),
        "runs": vals,
    }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, nearest-rank."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return float(sorted_values[rank - 1])


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 99)) -> dict[str, float]:
    """``{"p50": ..., "p99": ...}`` of unsorted values."""
    ordered = sorted(values)
    return {f"p{q:g}": percentile(ordered, q) for q in qs}


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def replica_ceiling_of(master: float, slave: float, load: float) -> float | None:
    """DLEDGER / SYNC with every core busy if a three-peer group cost a SYNC pair's master plus
    two of its slaves: (M + S + L) / (M + 2S + L), CPU us per message, L the load generator's."""
    return ratio(master + slave + load, master + 2 * slave + load)


def median_of(entry: dict[str, Any] | None) -> float | None:
    return None if entry is None else entry.get("median")
