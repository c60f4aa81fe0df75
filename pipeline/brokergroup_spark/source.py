"""The ``brokergroup`` data source: batch and streaming readers, batch and streaming writers.

Where each method runs matters (see docs/spark.md): ``reader()``/``partitions()`` plan on the
driver side, ``read()``/``write()`` run in executor workers on pickled copies — so the objects
below hold only parsed options and plain partitions, and every task opens its own remoting
client (:class:`~brokergroup_spark.group.Group`, on a private event loop) and closes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from habroker.client import MQClientError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from brokergroup_spark import plan
from brokergroup_spark.group import Group, TopicPlacement
from brokergroup_spark.options import (
    OptionError,
    ReadOptions,
    TimestampSpec,
    include_headers,
    parse_read_options,
    parse_write_options,
)
from brokergroup_spark.schema import spark_schema, with_headers
from brokergroup_spark.writer import BatchWriter, StreamWriter, check_input_schema

log = logging.getLogger("brokergroup_spark")


class BrokerGroupDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("brokergroup")``."""

    @classmethod
    def name(cls) -> str:
        return "brokergroup"

    def schema(self) -> StructType:
        return spark_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_read_options(self.options, streaming=False)
        _fixed_schema(schema, options.include_headers)
        return BatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_read_options(self.options, streaming=True)
        _fixed_schema(schema, options.include_headers)
        return StreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        _append_only(overwrite)
        options = parse_write_options(self.options)
        check_input_schema(schema, options)
        return BatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        _append_only(overwrite)
        options = parse_write_options(self.options)
        check_input_schema(schema, options)
        return StreamWriter(options, schema)


def _fixed_schema(schema: StructType, headers: bool) -> None:
    fixed = spark_schema(headers)
    if schema != fixed:
        raise OptionError(
            f"the brokergroup source has a fixed schema ({fixed.simpleString()}); "
            "leave out .schema(...) and select or cast columns after load() (includeHeaders "
            "adds the headers column)"
        )


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError(
            "a topic is append-only: its messages cannot be replaced (use mode append)"
        )


def _placed(
    parts: list[plan.QueueRange], placements: Mapping[str, TopicPlacement]
) -> list[plan.QueueRange]:
    for part in parts:
        part.broker_name = placements[part.topic].broker_name
    return parts


def _group(options: ReadOptions) -> Group:
    return Group(options.namesrv_addr, options.timeout, options.consumer_group)


def _topics(options: ReadOptions, group: Group) -> tuple[str, ...]:
    """The topics named, or those subscribePattern matches now."""
    if options.topic_pattern is None:
        return options.topics
    return group.topics_matching(options.topic_pattern)


def _by_time(
    spec: TimestampSpec,
    bounds: Mapping[plan.Queue, tuple[int, int]],
    placements: Mapping[str, TopicPlacement],
    group: Group,
    *,
    name: str,
    strategy: str,
) -> dict[str, dict[int, int]]:
    """Per-queue store times resolved into offsets by the broker (SEARCH_OFFSET_BY_TIMESTAMP):
    the first message stored at or after the time. A queue with no such message gets its max
    offset (``strategy`` latest) or fails the query (``error``, Kafka's default)."""
    if isinstance(spec, int):
        times = dict.fromkeys(bounds, spec)
    else:
        times = {}
        for topic, queues in spec.items():
            for queue, stamp in queues.items():
                if (topic, queue) not in bounds:
                    known = sorted(q for t, q in bounds if t == topic)
                    raise OptionError(
                        f"option {name}: topic {topic!r} has no queue {queue} (queues {known})"
                    )
                times[(topic, queue)] = stamp
    found = group.offsets_by_time(times, placements) if times else {}
    out: dict[str, dict[int, int]] = {}
    for key, offset in found.items():
        lo, hi = bounds[key]
        if offset >= hi and strategy == "error":
            raise OptionError(
                f"option {name}: {key[0]}/{key[1]} has no message stored at or after "
                f"{times[key]} (its offsets end at {hi}); set "
                "startingOffsetsByTimestampStrategy=latest to start such queues at their end"
            )
        out.setdefault(key[0], {})[key[1]] = min(max(offset, lo), hi)
    return out


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """What every task runs: one queue range, pulled and decoded into Arrow."""
    if not isinstance(partition, plan.QueueRange):
        # Spark runs one task with a placeholder partition when partitions() returned none
        return
    with _group(options) as group:
        for batch in group.read_range(
            partition.topic,
            partition.queue_id,
            partition.start,
            partition.end,
            broker_name=partition.broker_name,
            batch=options.pull_batch_size,
            fail_on_data_loss=options.fail_on_data_loss,
        ):
            yield with_headers(batch) if options.include_headers else batch


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        with _group(options) as group:
            topics = _topics(options, group)
            if not topics:
                raise OptionError(
                    f"option subscribePattern={options.topic_pattern!r} matches no topic of "
                    f"{options.namesrv_addr}"
                )
            bounds, placements = group.plan(topics)
            starting = options.starting
            if options.starting_by_time is not None:
                starting = _by_time(
                    options.starting_by_time,
                    bounds,
                    placements,
                    group,
                    name="startingOffsetsByTimestamp",
                    strategy=options.starting_by_time_strategy,
                )
            ending = options.ending
            if options.ending_by_time is not None:
                ending = _by_time(
                    options.ending_by_time,
                    bounds,
                    placements,
                    group,
                    name="endingOffsetsByTimestamp",
                    strategy="latest",
                )
        start = plan.resolve(starting, bounds, name="startingOffsets", default="earliest")
        end = plan.resolve(ending, bounds, name="endingOffsets", default="latest")
        for queue, offset in start.items():
            if end[queue] < offset:
                raise OptionError(
                    f"{queue[0]}/{queue[1]}: endingOffsets {end[queue]} is before "
                    f"startingOffsets {offset}"
                )
        parts = plan.ranges(start, end, options.max_records_per_partition)
        return _placed(plan.at_least(parts, options.min_partitions), placements)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


TOPIC_LIST_TTL = 30.0  # subscribePattern: how often a stream lists topics (as routes refresh)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over queue offsets; Spark checkpoints the offsets, so a restarted query
    resumes exactly where the last committed batch ended.

    Spark calls the planning methods of one query in order, from one long-lived runner: for each
    trigger ``latestOffset(start, limit)`` then ``reportLatestOffset()``; ``start`` is the end
    of the last batch whose sink commit finished (or the initial offsets), since Spark runs one
    batch at a time and writes its commit log before planning the next.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: plan.Offsets | None = None  # availableNow: the end fixed at start
        self._group: Group | None = None
        self._placements: dict[str, TopicPlacement] = {}
        self._topics: tuple[str, ...] = options.topics
        self._listed = float("-inf")  # when subscribePattern's topics were last listed
        self._latest: plan.Offsets | None = None  # queue ends seen by the last latestOffset
        self._committed: plan.Offsets | None = None  # what the group's offsets last got
        self._last_batch = time.monotonic()  # maxTriggerDelay counts from here

    @property
    def group(self) -> Group:
        if self._group is None:
            self._group = _group(self.options)
        return self._group

    def __getstate__(self) -> dict[str, Any]:
        # executors get pickled copies for read(): connections stay with the planner
        state = dict(self.__dict__)
        state["_group"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _bounds(self) -> dict[plan.Queue, tuple[int, int]]:
        if self.options.topic_pattern is not None:
            now = time.monotonic()
            if now - self._listed >= TOPIC_LIST_TTL:
                found = _topics(self.options, self.group)
                if found != self._topics:
                    log.info("subscribePattern %s: topics %s", self.options.topic_pattern, found)
                self._topics, self._listed = found, now
        if not self._topics:
            self._placements = {}
            return {}
        try:
            bounds, self._placements = self.group.plan(self._topics)
        except MQClientError:
            if self.options.topic_pattern is None:
                raise
            # a listed topic is gone (deleted): list again now rather than fail the query
            self._listed = float("-inf")
            self._topics = _topics(self.options, self.group)
            self._listed = time.monotonic()
            bounds, self._placements = self.group.plan(self._topics)
        return bounds

    def initialOffset(self) -> dict[str, Any]:
        bounds = self._bounds()
        starting = self.options.starting
        if self.options.starting_by_time is not None:
            starting = _by_time(
                self.options.starting_by_time,
                bounds,
                self._placements,
                self.group,
                name="startingOffsetsByTimestamp",
                strategy=self.options.starting_by_time_strategy,
            )
        start = plan.resolve(starting, bounds, name="startingOffsets", default="latest")
        log.info("%s: a new stream starts at %s", self.options.describe(), plan.to_json(start))
        return plan.to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """What Spark hands back to :meth:`latestOffset` on every trigger, except under
        ``Trigger.Once``, where it asks for everything (ReadAllAvailable). Python's ReadMinRows
        has no delay and PySpark has no composite limit, so minOffsetsPerTrigger and
        maxTriggerDelay are applied from the options whenever the limit is not ReadAllAvailable."""
        most = self.options.max_offsets_per_trigger
        least = self.options.min_offsets_per_trigger
        if most is not None:
            return ReadMaxRows(most)
        if least is not None:
            return ReadMinRows(least)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {q: hi for q, (_, hi) in self._bounds().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = plan.from_json(start)
        # ``start`` is what the query has processed: the group's offsets may say so now.
        self._report(begin)
        bounds = self._bounds()
        for queue, (lo, _) in bounds.items():
            begin.setdefault(queue, lo)  # a queue added since the query began: from its start
        latest = {q: max(hi, begin[q]) for q, (_, hi) in bounds.items()}
        self._latest = dict(latest)
        if self._target is not None:
            latest = {
                q: min(o, max(self._target.get(q, begin[q]), begin[q])) for q, o in latest.items()
            }
        elif not isinstance(limit, ReadAllAvailable) and self._delay(begin, latest):
            return plan.to_json(begin)  # too few new offsets yet: no batch this trigger
        if isinstance(limit, ReadMaxRows):
            latest = plan.rate_limit(begin, latest, limit.max_rows)
        if latest != begin:
            self._last_batch = time.monotonic()
        return plan.to_json(latest)

    def _delay(self, begin: plan.Offsets, latest: plan.Offsets) -> bool:
        """minOffsetsPerTrigger: hold the batch back until that many new offsets arrived, or
        maxTriggerDelay passed since the last batch (Kafka's rule). Never under availableNow
        (nothing new can arrive) nor Trigger.Once (Spark asks for everything there)."""
        wanted = self.options.min_offsets_per_trigger
        if wanted is None:
            return False
        new = sum(max(0, latest[q] - begin.get(q, latest[q])) for q in latest)
        if new == 0 or new >= wanted:
            return False
        waited = (time.monotonic() - self._last_batch) * 1000
        return waited < self.options.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # the ends latestOffset just saw (Spark asks right after it): no second request round
        latest = self._latest
        if latest is None:
            latest = {q: hi for q, (_, hi) in self._bounds().items()}
        return plan.to_json(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        bounds = self._bounds()
        parts = plan.ranges(
            plan.from_json(start),
            plan.from_json(end),
            self.options.max_records_per_partition,
            bounds,
        )
        return _placed(plan.at_least(parts, self.options.min_partitions), self._placements)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's hook for a finished batch (called when the next batch is planned, with the
        same offsets the next ``latestOffset`` got as its start, which already reported them)."""
        self._report(plan.from_json(end))

    def _report(self, offsets: plan.Offsets) -> None:
        """Store the query's progress as the group's consumer offsets on the master
        (UPDATE_CONSUMER_OFFSET): informational (the checkpoint is the truth), so a broker that
        cannot take it costs a warning, never the query."""
        if not self.options.consumer_group or not offsets or offsets == self._committed:
            return
        try:
            self.group.commit(offsets)
        except (OSError, MQClientError) as exc:
            log.warning(
                "%s: reporting offsets of group %s failed: %s",
                self.options.describe(),
                self.options.consumer_group,
                exc,
            )
            return
        self._committed = dict(offsets)

    def stop(self) -> None:
        if self._group is not None:
            self._group.close()
