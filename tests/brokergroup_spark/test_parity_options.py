"""Kafka-source parity, the parts that need no broker: options, splitting, lag metrics, headers."""

import itertools
import json

import pyarrow as pa
import pytest
from brokergroup_spark import plan
from brokergroup_spark.options import OptionError, parse_read_options, parse_write_options
from brokergroup_spark.progress import offsets_behind_latest, source_metrics
from brokergroup_spark.records import decode
from brokergroup_spark.schema import ARROW_SCHEMA_WITH_HEADERS, with_headers
from brokergroup_spark.source import BrokerGroupDataSource

from tests.brokergroup_spark.records_util import record

NS = "127.0.0.1:10911"


def read(streaming=False, **opts):
    raw = {"namesrvAddr": NS, "topic": "t", **opts}
    raw = {k.lower(): str(v) for k, v in raw.items() if v is not None}
    return parse_read_options(raw, streaming=streaming)


def test_kafka_options_with_a_meaning_here_are_accepted():
    opts = read(
        minPartitions=8,
        includeHeaders="true",
        startingTimestamp=1_700_000_000_000,
        startingOffsetsByTimestampStrategy="LATEST",
        endingOffsetsByTimestamp='{"t": {"0": 1700000001000}}',
    )
    assert opts.min_partitions == 8 and opts.include_headers
    assert opts.starting_by_time == 1_700_000_000_000
    assert opts.starting_by_time_strategy == "latest"
    assert opts.ending_by_time == {"t": {0: 1_700_000_001_000}}
    stream = read(
        streaming=True,
        topic=None,
        subscribePattern="orders-.*",
        startingOffsetsByTimestamp='{"orders-eu": {"0": 5, "3": 7}}',
        minOffsetsPerTrigger=100,
        maxTriggerDelay="30s",
    )
    assert stream.topics == () and stream.topic_pattern == "orders-.*"
    assert (
        stream.reads("orders-eu") and not stream.reads("orders") and not stream.reads("xorders-a")
    )
    assert stream.starting_by_time == {"orders-eu": {0: 5, 3: 7}}
    assert (stream.min_offsets_per_trigger, stream.max_trigger_delay_ms) == (100, 30_000)
    assert read(streaming=True).max_trigger_delay_ms == 15 * 60 * 1000  # Kafka's default


@pytest.mark.parametrize(
    ("text", "ms"), [("250", 250), ("250ms", 250), ("2s", 2000), ("5m", 300_000), ("1h", 3_600_000)]
)
def test_max_trigger_delay_takes_spark_durations(text, ms):
    assert read(streaming=True, maxTriggerDelay=text).max_trigger_delay_ms == ms


@pytest.mark.parametrize(
    ("opts", "streaming", "message"),
    [
        # Kafka options with no meaning here name what to use instead
        (
            {"kafka.bootstrap.servers": "h:9092"},
            False,
            "kafka.bootstrap.servers is Kafka's: use namesrvAddr",
        ),
        ({"kafka.security.protocol": "SSL"}, True, "Kafka consumer setting"),
        ({"kafka.group.id": "g"}, True, "use consumerGroup"),
        ({"groupIdPrefix": "g"}, True, "consumerGroup"),
        ({"subscribe": "a,b"}, False, "use topics"),
        ({"assign": '{"t": [0]}'}, False, "every queue of its topics"),
        ({"kafkaConsumer.pollTimeoutMs": "100"}, False, "use timeoutMs"),
        ({"fetchOffset.numRetries": "3"}, True, "timeoutMs"),
        ({"maxBytesPerTrigger": "1000"}, True, "maxOffsetsPerTrigger"),
        # the parity options check their values
        ({"minPartitions": 0}, False, "must be >= 1"),
        ({"includeHeaders": "yes"}, False, "expected true or false"),
        ({"topic": None, "subscribePattern": "a[("}, False, "not a valid regular expression"),
        ({"subscribePattern": "a.*"}, False, "give one of them"),
        ({"startingTimestamp": "yesterday"}, False, "not a timestamp"),
        ({"startingTimestamp": -5}, False, "not a timestamp"),
        (
            {"startingTimestamp": 1, "startingOffsetsByTimestamp": '{"t": {"0": 1}}'},
            False,
            "not both",
        ),
        ({"startingTimestamp": 1, "startingOffsets": "earliest"}, False, "give one of them"),
        ({"startingOffsetsByTimestamp": '{"u": {"0": 1}}'}, False, "not one of the topics"),
        ({"startingOffsetsByTimestamp": '{"t": {"x": 1}}'}, False, "is not a number"),
        ({"startingOffsetsByTimestamp": '{"t": {"0": "x"}}'}, False, "not a timestamp"),
        ({"startingOffsetsByTimestamp": "[1]"}, False, "non-empty object"),
        ({"startingOffsetsByTimestampStrategy": "closest"}, False, "expected error or latest"),
        ({"endingTimestamp": 5}, True, "applies to batch reads only"),
        ({"endingTimestamp": 5, "endingOffsets": "latest"}, False, "give one of them"),
        ({"minOffsetsPerTrigger": 10}, False, "applies to streaming reads only"),
        ({"maxTriggerDelay": "5s"}, False, "applies to streaming reads only"),
        ({"maxTriggerDelay": "soon"}, True, "expected a duration"),
    ],
)
def test_kafka_habits_are_refused_or_checked_clearly(opts, streaming, message):
    with pytest.raises(OptionError, match=message):
        read(streaming=streaming, **opts)


def test_pattern_offsets_json_names_matching_topics():
    opts = read(topic=None, subscribePattern="o.*", startingOffsets='{"orders": {"0": 1}}')
    assert opts.starting == {"orders": {0: 1}}
    with pytest.raises(OptionError, match="does not match subscribePattern"):
        read(topic=None, subscribePattern="o.*", startingOffsets='{"x": {"0": 1}}')


def test_write_refuses_kafka_options_too():
    with pytest.raises(OptionError, match="use namesrvAddr"):
        parse_write_options({"kafka.bootstrap.servers": "h:9092", "topic": "t"})


def _check_cover(parts, ranges):
    """The parts cover each (queue, start, end) exactly: adjacent, no overlap, no gap."""
    by_queue = {}
    for p in parts:
        by_queue.setdefault((p.topic, p.queue_id), []).append((p.start, p.end))
    for topic, queue, start, end in ranges:
        pieces = sorted(by_queue.pop((topic, queue)))
        assert pieces[0][0] == start and pieces[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
        assert all(lo < hi for lo, hi in pieces)
    assert not by_queue


@pytest.mark.parametrize("minimum", [1, 2, 3, 7, 16, 111, 500])
def test_min_partitions_splits_without_overlap_or_gap(minimum):
    start = {("t", 0): 0, ("t", 1): 40, ("u", 0): 5}
    end = {("t", 0): 100, ("t", 1): 50, ("u", 0): 6}
    parts = plan.at_least(plan.ranges(start, end, None), minimum)
    total = 100 + 10 + 1
    assert len(parts) == max(3, min(minimum, total))
    _check_cover(parts, [("t", 0, 0, 100), ("t", 1, 40, 50), ("u", 0, 5, 6)])
    sizes = [p.end - p.start for p in parts]
    if minimum <= total:  # the largest ranges were halved: a queue's pieces differ by at most one
        big = [s for s, p in zip(sizes, parts, strict=True) if p.topic == "t" and p.queue_id == 0]
        assert max(big) - min(big) <= 1


def test_min_partitions_keeps_the_broker_group_and_composes_with_max_records():
    parts = plan.ranges({("t", 0): 0}, {("t", 0): 100}, 60)
    for p in parts:
        p.broker_name = "broker-a"
    split = plan.at_least(parts, 5)
    assert len(split) == 5 and {p.broker_name for p in split} == {"broker-a"}
    assert max(p.end - p.start for p in split) <= 60
    _check_cover(split, [("t", 0, 0, 100)])


def test_offsets_behind_latest_like_kafka():
    latest = {("t", 0): 300, ("t", 1): 300, ("t", 2): 10}
    consumed = {("t", 0): 125, ("t", 1): 300, ("t", 2): 0}
    assert plan.offsets_behind(latest, consumed) == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "175",
        "avgOffsetsBehindLatest": str(185 / 3),
    }
    progress = {
        "sources": [
            {
                "description": "x",
                "startOffset": None,
                "endOffset": plan.to_json(consumed),
                "latestOffset": json.dumps(plan.to_json(latest)),
                "metrics": {},
            }
        ]
    }
    assert source_metrics(progress) == plan.offsets_behind(latest, consumed)
    assert source_metrics(None) == {} and source_metrics({"sources": []}) == {}
    assert offsets_behind_latest({"endOffset": None, "latestOffset": "{}"}) == {}
    assert offsets_behind_latest({"endOffset": "not json", "latestOffset": "{}"}) == {}


def test_headers_column_carries_every_property_as_bytes():
    props = "TAGS\x01x\x02KEYS\x01k1 k2\x02dup\x011\x02dup\x012\x02é\x01ü\x02".encode()
    first = record(b"a", queue_offset=0, properties=props)
    buf = first + record(b"b", queue_offset=1, phys=len(first))
    batch = with_headers(decode(buf, topic="t", broker_id=0))
    assert batch.schema == ARROW_SCHEMA_WITH_HEADERS
    assert batch.column("headers").to_pylist() == [
        [
            {"key": "TAGS", "value": b"x"},
            {"key": "KEYS", "value": b"k1 k2"},
            {"key": "dup", "value": b"2"},
            {"key": "é", "value": "ü".encode()},
        ],
        [],
    ]
    # a slice (Spark may hand on part of a batch) keeps its own rows' headers
    assert with_headers(decode(buf, topic="t", broker_id=0).slice(1)).column(
        "headers"
    ).to_pylist() == [[]]


def test_schema_gets_the_headers_column_only_when_asked():
    plain = BrokerGroupDataSource({"namesrvaddr": NS, "topic": "t"}).schema()
    with_h = BrokerGroupDataSource(
        {"namesrvaddr": NS, "topic": "t", "includeheaders": "True"}
    ).schema()
    assert plain.names[-1] == "brokerId" and with_h.names == [*plain.names, "headers"]
    assert with_h["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    assert pa.field("headers", ARROW_SCHEMA_WITH_HEADERS.field("headers").type)
