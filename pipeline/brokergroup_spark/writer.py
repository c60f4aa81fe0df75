"""Rows into SEND_BATCH_MESSAGE requests: one RocketMQ client batch per (topic, queue) batch.

Every task sends through its own remoting producer (:class:`~habroker.client.SyncMQProducer`,
on a private event loop), which finds the topic's master through ``namesrvAddr`` and is closed
when the task ends.

Delivery is at-least-once. The broker has no transactions or idempotent producers, so a
request it stored stays stored: when a task fails after some of its requests were stored and
Spark retries the task, the retry sends all of the task's rows again and those rows are stored
twice. Nothing is lost — a task only succeeds once every request of its own attempt was stored —
and readers that need exactly-once deduplicate on a key of their own (e.g. ``key``). The
producer itself retries a request the broker did not answer or answered "busy" (RocketMQ's
retryTimesWhenSendFailed), which can store a batch twice the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from habroker.client import MQClientError, OutgoingMessage, SyncMQProducer
from habroker.wire import ENTRY_OVERHEAD, encode_properties
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from brokergroup_spark.options import OptionError, WriteOptions

PRODUCER_GROUP = "brokergroup_spark"
# the property the producer adds to every message (UNIQ_KEY, 32 hex digits) and its separators
_UNIQ_KEY_BYTES = 48
_TEXT = (StringType, BinaryType)
_ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "body": _TEXT,
    "topic": (StringType,),
    "key": _TEXT,
    "tags": (StringType,),
    "queueId": (IntegerType, LongType, ShortType),
}


def check_input_schema(schema: StructType, options: WriteOptions) -> None:
    """Fail on the driver, before any task runs, when the rows cannot become messages."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise OptionError(
            f"writing to a broker group needs a body column (binary or string); got columns "
            f"{', '.join(fields) or 'none'}"
        )
    if "topic" not in fields and options.topic is None:
        raise OptionError("writing needs the topic option or a topic column (string)")
    for name, accepted in _ACCEPTED.items():
        if name in fields and not isinstance(fields[name], accepted):
            kinds = " or ".join(t.typeName() for t in accepted)
            raise OptionError(
                f"column {name} has type {fields[name].simpleString()}; expected {kinds}"
            )
    props = fields.get("properties")
    if props is not None and not (
        isinstance(props, MapType)
        and isinstance(props.keyType, StringType)
        and isinstance(props.valueType, StringType)
    ):
        raise OptionError(
            f"column properties has type {props.simpleString()}; expected map<string,string>"
        )


@dataclass
class WriteReport(WriterCommitMessage):
    messages: int = 0
    requests: int = 0
    per_queue: dict[str, int] = field(default_factory=dict)


def _text(value: Any, column: str, row: int) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise ValueError(f"row {row}: column {column} is not UTF-8") from None
    return str(value)


class _Batcher:
    """Entries per (topic, queueId), sent when a batch reaches its count or byte budget."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.producer = SyncMQProducer(
            options.namesrv_addr, PRODUCER_GROUP, send_timeout=options.timeout
        )
        self.pending: dict[tuple[str, int | None], list[OutgoingMessage]] = {}
        self.sizes: dict[tuple[str, int | None], int] = {}
        self.report = WriteReport()

    def add(self, topic: str, queue: int | None, message: OutgoingMessage, size: int) -> None:
        """Queue a message whose batch entry is ``size`` bytes (with the producer's UNIQ_KEY)."""
        dest = (topic, queue)
        if self.sizes.get(dest, 0) + size > self.options.batch_bytes:
            self.flush(dest)
        self.pending.setdefault(dest, []).append(message)
        self.sizes[dest] = self.sizes.get(dest, 0) + size
        if len(self.pending[dest]) >= self.options.batch_size:
            self.flush(dest)

    def flush(self, dest: tuple[str, int | None]) -> None:
        messages = self.pending.pop(dest, [])
        self.sizes.pop(dest, None)
        if not messages:
            return
        topic, queue = dest
        try:
            result = self.producer.send_batch(topic, messages, queue=queue)
        except MQClientError as exc:
            raise RuntimeError(
                f"producing {len(messages)} message(s) to {topic}"
                f"{'' if queue is None else f'/{queue}'} failed: {exc}"
            ) from exc
        # every SendStatus means stored on the master (FLUSH_*/SLAVE_* leave the flush or the
        # slave's copy unconfirmed, as RocketMQ reports it)
        self.report.messages += result.count
        self.report.requests += 1
        name = f"{result.topic}/{result.queue_id}"
        self.report.per_queue[name] = self.report.per_queue.get(name, 0) + result.count

    def finish(self) -> WriteReport:
        for dest in list(self.pending):
            self.flush(dest)
        return self.report


def write_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> WriteReport:
    """Encode every row and send it; returns only once all of them were stored."""
    batcher = _Batcher(options)
    seen = 0
    try:
        for batch in batches:
            cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            bodies = cols["body"]
            topics = cols.get("topic")
            keys, tags = cols.get("key"), cols.get("tags")
            props, queues = cols.get("properties"), cols.get("queueId")
            for i, body in enumerate(bodies):
                row = seen + i
                if body is None:
                    raise ValueError(f"row {row}: body is null")
                raw = body.encode() if isinstance(body, str) else body
                if not raw:
                    raise ValueError(f"row {row}: body is empty (RocketMQ refuses empty bodies)")
                topic = (topics[i] if topics else None) or options.topic
                if topic is None:
                    raise ValueError(f"row {row}: topic is null and no topic option is set")
                merged: dict[str, str] = dict(props[i] or ()) if props else {}
                if tags and tags[i] is not None:
                    merged["TAGS"] = tags[i]
                if keys and keys[i] is not None:
                    merged["KEYS"] = _text(keys[i], "key", row)
                try:
                    encoded = encode_properties(merged)
                except ValueError as exc:
                    raise ValueError(f"row {row}: {exc}") from None
                size = ENTRY_OVERHEAD + len(raw) + len(encoded) + _UNIQ_KEY_BYTES
                queue = queues[i] if queues else None
                batcher.add(
                    topic,
                    None if queue is None or queue < 0 else int(queue),
                    OutgoingMessage(raw, properties=merged),
                    size,
                )
            seen += len(bodies)
        return batcher.finish()
    finally:
        batcher.producer.close()


def _merge(messages: list[WriterCommitMessage | None]) -> WriteReport:
    total = WriteReport()
    for msg in messages:
        if not isinstance(msg, WriteReport):
            continue
        total.messages += msg.messages
        total.requests += msg.requests
        for name, count in msg.per_queue.items():
            total.per_queue[name] = total.per_queue.get(name, 0) + count
    return total


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.last_report: WriteReport | None = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.last_report = _merge(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Stored messages cannot be taken back: what succeeded stays (at-least-once)."""


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to finish: every message was stored when its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Stored messages cannot be taken back; a retried batch sends its rows again."""
