"""The ``brokergroup`` data source: batch and streaming readers, batch and streaming writers.

Where each method runs matters (see docs/spark.md): ``reader()``/``partitions()`` plan on the
driver side, ``read()``/``write()`` run in executor workers on pickled copies — so the objects
below hold only parsed options and plain partitions, and every task opens its own remoting
client (:class:`~brokergroup_spark.group.Group`, on a private event loop) and closes it.
"""

from __future__ import annotations

import logging
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
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from brokergroup_spark import plan
from brokergroup_spark.group import Group, TopicPlacement
from brokergroup_spark.options import (
    OptionError,
    ReadOptions,
    parse_read_options,
    parse_write_options,
)
from brokergroup_spark.schema import SPARK_SCHEMA
from brokergroup_spark.writer import BatchWriter, StreamWriter, check_input_schema

log = logging.getLogger("brokergroup_spark")


class BrokerGroupDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("brokergroup")``."""

    @classmethod
    def name(cls) -> str:
        return "brokergroup"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _fixed_schema(schema)
        return BatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _fixed_schema(schema)
        return StreamReader(parse_read_options(self.options, streaming=True))

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


def _fixed_schema(schema: StructType) -> None:
    if schema != SPARK_SCHEMA:
        raise OptionError(
            f"the brokergroup source has a fixed schema ({SPARK_SCHEMA.simpleString()}); "
            "leave out .schema(...) and select or cast columns after load()"
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


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """What every task runs: one queue range, pulled and decoded into Arrow."""
    assert isinstance(partition, plan.QueueRange)
    with _group(options) as group:
        yield from group.read_range(
            partition.topic,
            partition.queue_id,
            partition.start,
            partition.end,
            broker_name=partition.broker_name,
            batch=options.pull_batch_size,
            fail_on_data_loss=options.fail_on_data_loss,
        )


class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        with _group(self.options) as group:
            bounds, placements = group.plan(self.options.topics)
        start = plan.resolve(
            self.options.starting, bounds, name="startingOffsets", default="earliest"
        )
        end = plan.resolve(self.options.ending, bounds, name="endingOffsets", default="latest")
        for queue, offset in start.items():
            if end[queue] < offset:
                raise OptionError(
                    f"{queue[0]}/{queue[1]}: endingOffsets {end[queue]} is before "
                    f"startingOffsets {offset}"
                )
        return _placed(plan.ranges(start, end, self.options.max_records_per_partition), placements)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over queue offsets; Spark checkpoints the offsets, so a restarted query
    resumes exactly where the last committed batch ended."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._target: plan.Offsets | None = None  # availableNow: the end fixed at start
        self._group: Group | None = None
        self._placements: dict[str, TopicPlacement] = {}

    @property
    def group(self) -> Group:
        if self._group is None:
            self._group = _group(self.options)
        return self._group

    def __getstate__(self) -> dict[str, Any]:
        # executors get pickled copies for read(): connections stay with the planner
        return {
            "options": self.options,
            "_target": self._target,
            "_group": None,
            "_placements": self._placements,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _bounds(self) -> dict[plan.Queue, tuple[int, int]]:
        bounds, self._placements = self.group.plan(self.options.topics)
        return bounds

    def initialOffset(self) -> dict[str, Any]:
        start = plan.resolve(
            self.options.starting, self._bounds(), name="startingOffsets", default="latest"
        )
        return plan.to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {q: hi for q, (_, hi) in self._bounds().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        bounds = self._bounds()
        begin = plan.from_json(start)
        for queue, (lo, _) in bounds.items():
            begin.setdefault(queue, lo)  # a queue added since the query began: from its start
        latest = {q: max(hi, begin[q]) for q, (_, hi) in bounds.items()}
        if self._target is not None:
            latest = {
                q: min(o, max(self._target.get(q, begin[q]), begin[q])) for q, o in latest.items()
            }
        if isinstance(limit, ReadMaxRows):
            latest = plan.rate_limit(begin, latest, limit.max_rows)
        return plan.to_json(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return plan.to_json({q: hi for q, (_, hi) in self._bounds().items()})

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        bounds = self._bounds()
        return _placed(
            plan.ranges(
                plan.from_json(start),
                plan.from_json(end),
                self.options.max_records_per_partition,
                bounds,
            ),
            self._placements,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Report progress to the master (UPDATE_CONSUMER_OFFSET): informational (the checkpoint
        is the truth), so a broker that cannot take it costs a warning, never the query."""
        if self.options.consumer_group:
            try:
                self.group.commit(plan.from_json(end))
            except (OSError, MQClientError) as exc:
                log.warning(
                    "reporting offsets of group %s failed: %s", self.options.consumer_group, exc
                )

    def stop(self) -> None:
        if self._group is not None:
            self._group.close()
