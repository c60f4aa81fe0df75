"""Lag of a streaming query, in the terms of Spark's Kafka source, from its progress reports.

Spark's Kafka source puts ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
``avgOffsetsBehindLatest`` into ``query.lastProgress["sources"][i]["metrics"]`` through the JVM
interface ``ReportsSourceMetrics``. A Python data source has no way to do that in PySpark 4.3:
``DataSourceStreamReader`` has no metrics method, the runner protocol between the JVM and the
Python planner (``pyspark/sql/streaming/python_streaming_source_runner.py``) has no call for one,
and the JVM side (``PythonMicroBatchStream*``) does not implement ``ReportsSourceMetrics``, so the
``metrics`` map of a Python source is always empty (and its ``description`` is the JVM object's
default ``toString``).

What a Python source does get into every progress report is its offsets: ``startOffset`` and
``endOffset`` of the batch and ``latestOffset`` — what ``reportLatestOffset()`` returned, which
for this source is the queue ends the batch was planned against, exactly the figures Kafka's
metrics are computed from. :func:`source_metrics` computes Kafka's three metrics from those, so

    from brokergroup_spark.progress import source_metrics
    source_metrics(query.lastProgress)  # {"avgOffsetsBehindLatest": "12.5", ...}

gives the same numbers the Kafka source would report for the same positions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from brokergroup_spark import plan


def _offsets(value: Any) -> plan.Offsets | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    try:
        return plan.from_json(value)
    except (AttributeError, TypeError, ValueError):
        return None  # not this source's offsets


def offsets_behind_latest(source: Mapping[str, Any]) -> dict[str, str]:
    """Kafka's three lag metrics for one entry of a progress report's ``sources``: per queue,
    ``latestOffset - endOffset``; empty when the entry lacks either (e.g. no batch yet)."""
    latest = _offsets(source.get("latestOffset"))
    consumed = _offsets(source.get("endOffset"))
    if latest is None or consumed is None:
        return {}
    return plan.offsets_behind(latest, consumed)


def source_metrics(progress: Mapping[str, Any] | None, index: int = 0) -> dict[str, str]:
    """:func:`offsets_behind_latest` of ``progress["sources"][index]`` (``query.lastProgress``,
    or a listener's ``json.loads(event.progress.json)``); empty for no progress."""
    if not progress:
        return {}
    sources = progress.get("sources") or []
    if index >= len(sources):
        return {}
    return offsets_behind_latest(sources[index])
