"""Options: parsed once on the driver into frozen dataclasses that travel to executors.

Spark hands a data source its options as strings in a case-insensitive map whose keys arrive
lower-cased, so every name is looked up lower-cased and reported in its documented spelling.
Anything unknown or malformed is an error that names the option and what it accepts: a typo
must never silently fall back to a default.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from habroker.client.route import parse_namesrv_addr

EARLIEST = -2  # in per-queue offset JSON, as in Spark's Kafka source
LATEST = -1
MAX_PULL = 1024  # messages per pull (a Java broker caps it lower: maxTransferCount*)
MAX_PRODUCE_ENTRIES = 4096  # messages per SEND_BATCH_MESSAGE
MAX_BATCH_BYTES = 4 * 1024 * 1024  # a batch's body, as the broker's default maxMessageSize

OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]

_TOPIC = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")

READ_OPTIONS = (
    "namesrvAddr",
    "topic",
    "topics",
    "startingOffsets",
    "endingOffsets",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "maxRecordsPerPartition",
    "consumerGroup",
    "pullBatchSize",
    "timeoutMs",
)
WRITE_OPTIONS = ("namesrvAddr", "topic", "batchSize", "batchBytes", "timeoutMs")
_SPARKS_OWN = ("checkpointlocation",)  # Spark adds these to a streaming query's options
# Options of earlier versions: refused with what replaces them, never silently reinterpreted.
_RETIRED = {
    "endpoints": (
        "option endpoints (the brokers' HTTP API) is gone: the connector speaks RocketMQ's "
        "remoting protocol now. Use namesrvAddr: the group's client addresses (listenPort, "
        "default 10911; in Kubernetes the <group>-namesrv Service, port 9876) or RocketMQ name "
        "servers, ';'-separated host:port"
    ),
    "discoverslaves": (
        "option discoverSlaves is gone: the slaves come with the topic's route from namesrvAddr "
        "(the addresses they register), so backlog reads follow redirection without it"
    ),
}
_STREAM_ONLY = ("maxOffsetsPerTrigger",)
_BATCH_ONLY = ("endingOffsets",)


class OptionError(ValueError):
    """A bad option; the message says which one and what it accepts."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv_addr: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    max_records_per_partition: int | None
    consumer_group: str | None
    pull_batch_size: int
    timeout: float


@dataclass(frozen=True, slots=True)
class WriteOptions:
    namesrv_addr: str
    topic: str | None
    batch_size: int
    batch_bytes: int
    timeout: float


class _Options:
    """Lookup by documented name in a map whose keys Spark lower-cased."""

    def __init__(self, raw: Mapping[str, str], known: tuple[str, ...], kind: str) -> None:
        self.values = {str(k).lower(): str(v) for k, v in raw.items()}
        retired = sorted(set(self.values) & set(_RETIRED))
        if retired:
            raise OptionError(_RETIRED[retired[0]])
        by_lower = {name.lower(): name for name in known}
        unknown = sorted(set(self.values) - set(by_lower) - set(_SPARKS_OWN))
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, list(by_lower), n=1)
                hints.append(
                    f"{key!r}" + (f" (did you mean {by_lower[close[0]]!r}?)" if close else "")
                )
            raise OptionError(
                f"unknown {kind} option(s) {', '.join(hints)}; valid options: {', '.join(known)}"
            )

    def get(self, name: str) -> str | None:
        value = self.values.get(name.lower())
        return None if value is None else value.strip()

    def integer(self, name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
        text = self.get(name)
        if text is None or text == "":
            return default
        try:
            value = int(text)
        except ValueError:
            raise OptionError(f"option {name}={text!r}: expected an integer") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise OptionError(f"option {name}={value}: must be {bound}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise OptionError(f"option {name}={text!r}: expected true or false")


def _namesrv_addr(opts: _Options) -> str:
    """Where routes come from, as RocketMQ clients take it: ``host:port;host:port``."""
    text = opts.get("namesrvAddr")
    if not text:
        raise OptionError(
            "option namesrvAddr is required: where the group's routes come from, as "
            "';'-separated host:port — any broker of the group (listenPort, default 10911; in "
            "Kubernetes the <group>-namesrv Service, port 9876) or RocketMQ name servers"
        )
    try:
        return ";".join(parse_namesrv_addr(text))
    except ValueError as exc:
        raise OptionError(f"option namesrvAddr={text!r}: {exc}") from None


def _topic(name: str, option: str) -> str:
    if not _TOPIC.match(name):
        raise OptionError(
            f"option {option}: topic {name!r} is not a valid name (1-127 of a-z A-Z 0-9 _ - % |)"
        )
    return name


def _topics(opts: _Options) -> tuple[str, ...]:
    one, many = opts.get("topic"), opts.get("topics")
    if one and many:
        raise OptionError("options topic and topics: give one of them, not both")
    if not one and not many:
        raise OptionError("option topic (or topics, comma-separated) is required")
    names = [t.strip() for t in (many or one or "").split(",") if t.strip()]
    if not names:
        raise OptionError("option topics: no topic named")
    if len(set(names)) != len(names):
        raise OptionError(f"option topics={many!r}: a topic is listed twice")
    return tuple(_topic(t, "topics" if many else "topic") for t in names)


def parse_offsets(name: str, text: str, topics: tuple[str, ...], *, ending: bool) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"queueId": offset}}`` (-2 earliest, -1 latest)."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return "earliest" if lowered == "earliest" else "latest"
    try:
        data = json.loads(text)
    except ValueError:
        raise OptionError(
            f'option {name}={text!r}: expected earliest, latest or JSON like {{"topic": {{"0": 23, "1": -2}}}}'
        ) from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option {name}: the JSON must be a non-empty object of topics")
    out: dict[str, dict[int, int]] = {}
    for topic, queues in data.items():
        if topic not in topics:
            raise OptionError(
                f"option {name}: topic {topic!r} is not one of the topics read ({', '.join(topics)})"
            )
        if not isinstance(queues, dict) or not queues:
            raise OptionError(
                f'option {name}: topic {topic!r} needs an object of queueId to offset, e.g. {{"0": 5}}'
            )
        per_queue: dict[int, int] = {}
        for queue, offset in queues.items():
            if not str(queue).isdigit():
                raise OptionError(f"option {name}: queueId {queue!r} of {topic!r} is not a number")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise OptionError(
                    f"option {name}: offset {offset!r} for {topic}/{queue} must be an integer "
                    ">= 0, or -2 (earliest) / -1 (latest)"
                )
            if ending and offset == EARLIEST:
                raise OptionError(f"option {name}: -2 (earliest) cannot be an ending offset")
            per_queue[int(queue)] = offset
        out[topic] = per_queue
    return out


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _Options(raw, READ_OPTIONS, "read")
    mode = "streaming" if streaming else "batch"
    for name in _BATCH_ONLY if streaming else _STREAM_ONLY:
        if opts.get(name) is not None:
            other = "batch" if streaming else "streaming"
            raise OptionError(f"option {name} applies to {other} reads only, not {mode} reads")
    namesrv_addr = _namesrv_addr(opts)
    topics = _topics(opts)
    starting_text = opts.get("startingOffsets") or ("latest" if streaming else "earliest")
    starting = parse_offsets("startingOffsets", starting_text, topics, ending=False)
    if not streaming and starting == "latest":
        raise OptionError(
            "option startingOffsets=latest is for streaming reads; a batch read would be empty"
        )
    ending: OffsetSpec = "latest"
    if not streaming:
        ending = parse_offsets(
            "endingOffsets", opts.get("endingOffsets") or "latest", topics, ending=True
        )
        if ending == "earliest":
            raise OptionError(
                "option endingOffsets=earliest would read nothing: use latest or JSON"
            )
    group = opts.get("consumerGroup") or None
    if group is not None and not _TOPIC.match(group):
        raise OptionError(
            f"option consumerGroup={group!r}: 1-127 of a-z A-Z 0-9 _ - % | (as topic names)"
        )
    return ReadOptions(
        namesrv_addr=namesrv_addr,
        topics=topics,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=opts.integer("maxOffsetsPerTrigger", None, 1),
        fail_on_data_loss=opts.boolean("failOnDataLoss", True),
        max_records_per_partition=opts.integer("maxRecordsPerPartition", None, 1),
        consumer_group=group,
        pull_batch_size=opts.integer("pullBatchSize", MAX_PULL, 1, MAX_PULL) or MAX_PULL,
        timeout=(opts.integer("timeoutMs", 30_000, 1) or 30_000) / 1000,
    )


def parse_write_options(raw: Mapping[str, str]) -> WriteOptions:
    opts = _Options(raw, WRITE_OPTIONS, "write")
    topic = opts.get("topic") or None
    return WriteOptions(
        namesrv_addr=_namesrv_addr(opts),
        topic=None if topic is None else _topic(topic, "topic"),
        batch_size=opts.integer("batchSize", 1024, 1, MAX_PRODUCE_ENTRIES) or 1024,
        batch_bytes=opts.integer("batchBytes", MAX_BATCH_BYTES, 1024, MAX_BATCH_BYTES)
        or MAX_BATCH_BYTES,
        timeout=(opts.integer("timeoutMs", 30_000, 1) or 30_000) / 1000,
    )
