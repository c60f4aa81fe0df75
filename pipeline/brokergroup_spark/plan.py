"""Offsets and partitions: pure functions from queue bounds and options to offset ranges.

An offset map is ``{(topic, queueId): queueOffset}``; Spark checkpoints it as
``{"topic": {"queueId": offset}}`` (JSON wants string keys). Ranges are half-open
``[start, end)`` over queue offsets.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import InputPartition

from brokergroup_spark.options import EARLIEST, LATEST, OffsetSpec, OptionError

Queue = tuple[str, int]
Offsets = dict[Queue, int]
Bounds = Mapping[Queue, tuple[int, int]]  # (minOffset, maxOffset) of each queue


class QueueRange(InputPartition):
    """One Spark task: queue offsets ``[start, end)`` of one (topic, queueId)."""

    def __init__(
        self,
        topic: str,
        queue_id: int,
        start: int,
        end: int,
        broker_name: str = "",
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.start = start
        self.end = end
        self.broker_name = broker_name  # the broker group holding the queue (its route says)

    def __repr__(self) -> str:
        return f"QueueRange({self.topic}/{self.queue_id} [{self.start}, {self.end}))"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QueueRange) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((self.topic, self.queue_id, self.start, self.end))


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, queue), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(queue)] = offset
    return out


def from_json(data: Mapping[str, Any]) -> Offsets:
    return {
        (topic, int(queue)): int(offset)
        for topic, queues in data.items()
        for queue, offset in queues.items()
    }


def resolve(spec: OffsetSpec, bounds: Bounds, *, name: str, default: str) -> Offsets:
    """Concrete offsets for every queue in ``bounds``; queues the JSON leaves out get ``default``."""
    chosen: dict[Queue, int] = {}
    if isinstance(spec, dict):
        for topic, queues in spec.items():
            for queue_id, offset in queues.items():
                if (topic, queue_id) not in bounds:
                    known = sorted(q for t, q in bounds if t == topic)
                    raise OptionError(
                        f"option {name}: topic {topic!r} has no queue {queue_id} (queues {known})"
                    )
                chosen[(topic, queue_id)] = offset
    fallback = (spec if isinstance(spec, str) else default) == "earliest"
    out: Offsets = {}
    for queue, (lo, hi) in bounds.items():
        offset = chosen.get(queue, EARLIEST if fallback else LATEST)
        if offset == EARLIEST:
            offset = lo
        elif offset == LATEST:
            offset = hi
        elif offset > hi:
            raise OptionError(
                f"option {name}: offset {offset} for {queue[0]}/{queue[1]} is past the queue's "
                f"end (maxOffset {hi})"
            )
        out[queue] = offset
    return out


def split(queue: Queue, start: int, end: int, max_records: int | None) -> list[QueueRange]:
    """The range as tasks of at most ``max_records`` offsets each (one task when unset)."""
    if end <= start:
        return []
    step = max_records or (end - start)
    return [QueueRange(queue[0], queue[1], s, min(s + step, end)) for s in range(start, end, step)]


def ranges(
    start: Offsets, end: Offsets, max_records: int | None, bounds: Bounds | None = None
) -> list[QueueRange]:
    """Tasks for every queue that advanced. A queue missing from ``start`` (one added since the
    query began) starts at its minimum offset, as new Kafka partitions start at earliest."""
    out: list[QueueRange] = []
    for queue in sorted(end):
        begin = start.get(queue)
        if begin is None:
            begin = bounds[queue][0] if bounds and queue in bounds else 0
        out.extend(split(queue, begin, end[queue], max_records))
    return out


def rate_limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Advance at most ``max_rows`` offsets in all, shared in proportion to each queue's backlog.

    Shares are rounded down and the few left over go one each to the largest remaining
    backlogs, so the total is exactly ``max_rows`` whenever the backlog is larger.
    """
    backlog = {q: max(0, latest[q] - start.get(q, latest[q])) for q in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    take = {q: max_rows * n // total for q, n in backlog.items()}
    left = max_rows - sum(take.values())
    for q in sorted(backlog, key=lambda q: (take[q] - backlog[q], q))[:left]:
        take[q] += 1
    return {q: start.get(q, latest[q]) + take[q] for q in latest}


def at_least(parts: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """At least ``min_partitions`` tasks (Kafka's ``minPartitions``), as far as there are offsets:
    each range is cut into equal pieces (sizes differ by at most one), the extra pieces going one
    at a time to the range whose pieces are then largest. A range's pieces are adjacent, so
    together they cover it exactly: no overlap, no gap."""
    if not min_partitions or len(parts) >= min_partitions:
        return parts
    count = [1] * len(parts)
    heap: list[tuple[float, int]] = [(-float(p.end - p.start), i) for i, p in enumerate(parts)]
    heapq.heapify(heap)
    total = len(parts)
    while total < min_partitions and heap:
        _, i = heapq.heappop(heap)
        size = parts[i].end - parts[i].start
        if count[i] >= size:
            continue  # single offsets already: this range cannot give more
        count[i] += 1
        total += 1
        heapq.heappush(heap, (-(size / count[i]), i))
    out: list[QueueRange] = []
    for part, pieces in zip(parts, count, strict=True):
        size = part.end - part.start
        cuts = [part.start + size * k // pieces for k in range(pieces + 1)]
        out.extend(
            QueueRange(part.topic, part.queue_id, lo, hi, part.broker_name)
            for lo, hi in itertools.pairwise(cuts)
        )
    return out


def offsets_behind(latest: Offsets, consumed: Offsets) -> dict[str, str]:
    """Kafka's per-trigger source metrics: how far each queue's consumed offset is behind the
    latest offset, as strings (``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
    ``avgOffsetsBehindLatest``); empty when there is nothing to compare."""
    behind = [max(0, latest[q] - consumed.get(q, latest[q])) for q in latest]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }
