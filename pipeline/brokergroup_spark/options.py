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
    "subscribePattern",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingOffsetsByTimestamp",
    "endingTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "includeHeaders",
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
# Options of Spark's Kafka source that have no meaning here, or another name: refused with what
# to use instead (a Kafka habit must fail loudly, never be ignored).
_KAFKA_ONLY = {
    "subscribe": "option subscribe is Kafka's: use topics (comma-separated) or topic",
    "assign": (
        "option assign is Kafka's: the brokergroup source reads every queue of its topics "
        "(topic/topics/subscribePattern); bound queues with startingOffsets/endingOffsets JSON "
        "(an ending offset equal to the starting one reads nothing) or filter on queueId"
    ),
    "groupidprefix": (
        "option groupIdPrefix is Kafka's: pulls name the consumerGroup option's group "
        "(default DEFAULT_CONSUMER); it is also where a stream reports its progress"
    ),
    "kafkaconsumer.polltimeoutms": "option kafkaConsumer.pollTimeoutMs is Kafka's: use timeoutMs",
    "fetchoffset.numretries": (
        "option fetchOffset.numRetries is Kafka's: offset requests fail after timeoutMs (a "
        "stream retries at its next trigger)"
    ),
    "fetchoffset.retryintervalms": (
        "option fetchOffset.retryIntervalMs is Kafka's: offset requests fail after timeoutMs"
    ),
    "maxbytespertrigger": (
        "option maxBytesPerTrigger is not supported: limit a micro-batch by messages with "
        "maxOffsetsPerTrigger"
    ),
}
_KAFKA_CONFIG = {
    "kafka.bootstrap.servers": (
        "option kafka.bootstrap.servers is Kafka's: use namesrvAddr, ';'-separated host:port of "
        "the group's brokers (listenPort, default 10911; in Kubernetes the <group>-namesrv "
        "Service, port 9876) or RocketMQ name servers"
    ),
    "kafka.group.id": "option kafka.group.id is Kafka's: use consumerGroup",
}
_STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_BATCH_ONLY = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
_STRATEGIES = ("error", "latest")
_DURATION = re.compile(r"^(\d+)\s*(us|ms|s|m|min|h|d)?$", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_DURATION_MS["d"] = 86_400_000


class OptionError(ValueError):
    """A bad option; the message says which one and what it accepts."""


TimestampSpec = int | dict[str, dict[int, int]]  # one time for every queue, or per queue (ms)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    namesrv_addr: str
    topics: tuple[str, ...]  # empty when topic_pattern is given
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    max_records_per_partition: int | None
    consumer_group: str | None
    pull_batch_size: int
    timeout: float
    topic_pattern: str | None = None  # subscribePattern (Java regex syntax, whole-name match)
    starting_by_time: TimestampSpec | None = None  # store timestamps (ms), resolved by the broker
    starting_by_time_strategy: str = "error"  # no message at/after the time: error or latest
    ending_by_time: TimestampSpec | None = None
    min_partitions: int | None = None
    include_headers: bool = False
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000  # Kafka's default, 15m

    def reads(self, topic: str) -> bool:
        """Is ``topic`` one of the topics read (named, or matching subscribePattern)?"""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def describe(self) -> str:
        what = (
            f"subscribePattern={self.topic_pattern}"
            if self.topic_pattern is not None
            else f"topics={','.join(self.topics)}"
        )
        return f"brokergroup[{what} namesrvAddr={self.namesrv_addr}]"


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
        for key in sorted(self.values):
            if key in _KAFKA_ONLY:
                raise OptionError(_KAFKA_ONLY[key])
            if key in _KAFKA_CONFIG:
                raise OptionError(_KAFKA_CONFIG[key])
            if key.startswith("kafka."):
                raise OptionError(
                    f"option {key} is a Kafka consumer setting (kafka.*), which has no meaning "
                    "here: the brokergroup source speaks RocketMQ's remoting protocol; its "
                    f"options: {', '.join(known)}"
                )
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


def _topics(opts: _Options) -> tuple[tuple[str, ...], str | None]:
    """The topics named, or the subscribePattern (a regex the whole topic name must match)."""
    one, many, pattern = opts.get("topic"), opts.get("topics"), opts.get("subscribePattern")
    given = [n for n, v in (("topic", one), ("topics", many), ("subscribePattern", pattern)) if v]
    if len(given) > 1:
        both = "not both" if len(given) == 2 else "only one"
        raise OptionError(f"options {' and '.join(given)}: give one of them, {both}")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(
                f"option subscribePattern={pattern!r} is not a valid regular expression: {exc}"
            ) from None
        return (), pattern
    if not one and not many:
        raise OptionError(
            "option topic (or topics, comma-separated, or subscribePattern, a regex) is required"
        )
    names = [t.strip() for t in (many or one or "").split(",") if t.strip()]
    if not names:
        raise OptionError("option topics: no topic named")
    if len(set(names)) != len(names):
        raise OptionError(f"option topics={many!r}: a topic is listed twice")
    return tuple(_topic(t, "topics" if many else "topic") for t in names), None


def _check_topic(name: str, topic: str, topics: tuple[str, ...], pattern: str | None) -> None:
    if pattern is not None:
        if re.fullmatch(pattern, topic) is None:
            raise OptionError(
                f"option {name}: topic {topic!r} does not match subscribePattern {pattern!r}"
            )
    elif topic not in topics:
        raise OptionError(
            f"option {name}: topic {topic!r} is not one of the topics read ({', '.join(topics)})"
        )


def _per_queue_json(name: str, text: str, example: str) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name}={text!r}: expected JSON like {example}") from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option {name}: the JSON must be a non-empty object of topics")
    for topic, queues in data.items():
        if not isinstance(queues, dict) or not queues:
            raise OptionError(
                f"option {name}: topic {topic!r} needs an object of queueId to value, e.g. "
                f"{example}"
            )
        for queue in queues:
            if not str(queue).isdigit():
                raise OptionError(f"option {name}: queueId {queue!r} of {topic!r} is not a number")
    return data


def parse_offsets(
    name: str,
    text: str,
    topics: tuple[str, ...],
    *,
    ending: bool,
    pattern: str | None = None,
) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"queueId": offset}}`` (-2 earliest, -1 latest)."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return "earliest" if lowered == "earliest" else "latest"
    if not text.strip().startswith("{"):
        raise OptionError(
            f'option {name}={text!r}: expected earliest, latest or JSON like {{"topic": {{"0": 23, "1": -2}}}}'
        )
    data = _per_queue_json(name, text, '{"topic": {"0": 23, "1": -2}}')
    out: dict[str, dict[int, int]] = {}
    for topic, queues in data.items():
        _check_topic(name, topic, topics, pattern)
        per_queue: dict[int, int] = {}
        for queue, offset in queues.items():
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


def _timestamp(name: str, value: object) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OptionError(
            f"option {name}: {value!r} is not a timestamp: expected milliseconds since the epoch "
            "(>= 0)"
        )
    return value


def parse_timestamps(
    by_queue: str | None,
    one: str | None,
    topics: tuple[str, ...],
    pattern: str | None,
    *,
    prefix: str,
) -> TimestampSpec | None:
    """``<prefix>OffsetsByTimestamp`` (JSON per queue) or ``<prefix>Timestamp`` (every queue)."""
    json_name, one_name = f"{prefix}OffsetsByTimestamp", f"{prefix}Timestamp"
    if by_queue and one:
        raise OptionError(f"options {json_name} and {one_name}: give one of them, not both")
    if one:
        return _timestamp(one_name, one)
    if not by_queue:
        return None
    data = _per_queue_json(json_name, by_queue, '{"topic": {"0": 1700000000000}}')
    out: dict[str, dict[int, int]] = {}
    for topic, queues in data.items():
        _check_topic(json_name, topic, topics, pattern)
        out[topic] = {
            int(q): _timestamp(f"{json_name} ({topic}/{q})", v) for q, v in queues.items()
        }
    return out


def _duration_ms(opts: _Options, name: str, default: int) -> int:
    text = opts.get(name)
    if not text:
        return default
    match = _DURATION.match(text)
    if match is None:
        raise OptionError(
            f"option {name}={text!r}: expected a duration like 30s, 500ms, 5m, 1h (a bare "
            "number is milliseconds)"
        )
    unit = (match.group(2) or "ms").lower()
    return int(int(match.group(1)) * _DURATION_MS[unit])


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    opts = _Options(raw, READ_OPTIONS, "read")
    mode = "streaming" if streaming else "batch"
    for name in _BATCH_ONLY if streaming else _STREAM_ONLY:
        if opts.get(name) is not None:
            other = "batch" if streaming else "streaming"
            raise OptionError(f"option {name} applies to {other} reads only, not {mode} reads")
    namesrv_addr = _namesrv_addr(opts)
    topics, pattern = _topics(opts)
    starting_by_time = parse_timestamps(
        opts.get("startingOffsetsByTimestamp"),
        opts.get("startingTimestamp"),
        topics,
        pattern,
        prefix="starting",
    )
    if starting_by_time is not None and opts.get("startingOffsets"):
        by = (
            "startingTimestamp"
            if isinstance(starting_by_time, int)
            else "startingOffsetsByTimestamp"
        )
        raise OptionError(
            f"options startingOffsets and {by}: give one of them (queues a per-queue "
            "timestamp JSON leaves out start at the default: earliest for batch, latest for "
            "streams)"
        )
    strategy = (opts.get("startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in _STRATEGIES:
        raise OptionError(
            f"option startingOffsetsByTimestampStrategy={strategy!r}: expected error or latest"
        )
    starting_text = opts.get("startingOffsets") or ("latest" if streaming else "earliest")
    starting = parse_offsets(
        "startingOffsets", starting_text, topics, ending=False, pattern=pattern
    )
    if not streaming and starting == "latest" and opts.get("startingOffsets"):
        raise OptionError(
            "option startingOffsets=latest is for streaming reads; a batch read would be empty"
        )
    ending: OffsetSpec = "latest"
    ending_by_time: TimestampSpec | None = None
    if not streaming:
        ending = parse_offsets(
            "endingOffsets",
            opts.get("endingOffsets") or "latest",
            topics,
            ending=True,
            pattern=pattern,
        )
        if ending == "earliest":
            raise OptionError(
                "option endingOffsets=earliest would read nothing: use latest or JSON"
            )
        ending_by_time = parse_timestamps(
            opts.get("endingOffsetsByTimestamp"),
            opts.get("endingTimestamp"),
            topics,
            pattern,
            prefix="ending",
        )
        if ending_by_time is not None and opts.get("endingOffsets"):
            raise OptionError(
                "options endingOffsets and endingOffsetsByTimestamp/endingTimestamp: give one "
                "of them"
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
        topic_pattern=pattern,
        starting_by_time=starting_by_time,
        starting_by_time_strategy=strategy,
        ending_by_time=ending_by_time,
        min_partitions=opts.integer("minPartitions", None, 1),
        include_headers=opts.boolean("includeHeaders", False),
        min_offsets_per_trigger=opts.integer("minOffsetsPerTrigger", None, 1),
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60 * 1000),
    )


def include_headers(raw: Mapping[str, str]) -> bool:
    """The ``includeHeaders`` option alone (the schema depends on it; checked fully later)."""
    value = {str(k).lower(): str(v) for k, v in raw.items()}.get("includeheaders", "false")
    return value.strip().lower() == "true"


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
