"""Parity with Spark's Kafka source, against a real master + slave and a real Spark session:
minPartitions, subscribePattern, starting/ending offsets by timestamp, includeHeaders,
minOffsetsPerTrigger/maxTriggerDelay, the lag metrics of a progress report, and consumer-group
offsets that follow what the query has processed."""

import time

import pytest
from brokergroup_spark.group import Group
from habroker.client import SyncMQAdmin

from tests.brokergroup_spark.conftest import (
    LOCAL_MASTER,
    available_now,
    create_topic,
    produce,
    read,
    rows_read,
    stream,
    wait_for,
)


def group_offsets(group, consumer_group, topic):
    with SyncMQAdmin(group.master.address) as admin:
        progress = admin.consumer_progress(consumer_group, topic)
    return {p.message_queue.queue_id: (p.consumer_offset, p.broker_offset) for p in progress}


def keys(df):
    return sorted((r.topic, r.queueId, r.queueOffset) for r in df.collect())


# -- offsets a group can watch ---------------------------------------------------------------


def test_group_offsets_equal_the_queue_ends_after_an_available_now_run(spark, group, tmp_path):
    produce(group, "watched", queues=2, per_queue=300)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    df = stream(
        spark,
        group,
        topic="watched",
        startingOffsets="earliest",
        maxOffsetsPerTrigger=250,
        consumerGroup="watchers",
    )
    query = available_now(df, out, ckpt)
    assert sum(rows_read(query)) == 600
    # the last batch was committed by the sink, so the group is at the end: no lag
    assert group_offsets(group, "watchers", "watched") == {0: (300, 300), 1: (300, 300)}

    produce(group, "watched", queues=2, per_queue=100, first=300)
    assert group_offsets(group, "watchers", "watched") == {0: (300, 400), 1: (300, 400)}
    query = available_now(df, out, ckpt)
    assert sum(rows_read(query)) == 200
    assert group_offsets(group, "watchers", "watched") == {0: (400, 400), 1: (400, 400)}


def test_group_offsets_follow_a_running_query_batch_by_batch(spark, group):
    produce(group, "followed", queues=2, per_queue=10)
    df = stream(spark, group, topic="followed", consumerGroup="followers")
    query = (
        df.select("queueId", "queueOffset")
        .writeStream.format("memory")
        .queryName("followed_rows")
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        # the query starts at latest: before any batch, the group is where the query starts
        wait_for(lambda: query.lastProgress is not None, timeout=60, what="first trigger")
        wait_for(
            lambda: group_offsets(group, "followers", "followed") == {0: (10, 10), 1: (10, 10)},
            timeout=30,
            what="the starting offsets reported",
        )
        produce(group, "followed", queues=2, per_queue=25, first=10)
        wait_for(lambda: spark.table("followed_rows").count() == 50, timeout=60, what="rows")
        # within a trigger or two of the batch's commit, without any further data
        wait_for(
            lambda: group_offsets(group, "followers", "followed") == {0: (35, 35), 1: (35, 35)},
            timeout=30,
            what="the processed offsets reported",
        )
    finally:
        query.stop()


# -- minPartitions ---------------------------------------------------------------------------


def test_min_partitions_splits_queues_into_more_tasks(spark, group):
    produce(group, "fewqueues", queues=2, per_queue=105)
    df = read(spark, group, "fewqueues", minPartitions=7)
    assert df.rdd.getNumPartitions() == 7
    got = [(r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect()]
    assert len(got) == len(set(got)) == 210  # no overlap
    assert set(got) == {(q, i) for q in range(2) for i in range(105)}  # no gap


def test_min_partitions_in_a_stream(spark, group, tmp_path):
    produce(group, "fewqueues-s", queues=1, per_queue=90)
    df = stream(
        spark,
        group,
        topic="fewqueues-s",
        startingOffsets="earliest",
        minPartitions=3,
        includeHeaders="true",
    )
    out = tmp_path / "out"
    available_now(df, out, tmp_path / "ckpt")
    written = spark.read.parquet(str(out))
    assert written.count() == 90 and len(list(out.glob("part-*.parquet"))) == 3
    row = written.where("queueOffset = 7").first()
    assert ("idx", b"7") in [(h.key, bytes(h.value)) for h in row.headers]
    assert sorted(r.queueOffset for r in written.collect()) == list(range(90))


# -- subscribePattern ------------------------------------------------------------------------


def test_subscribe_pattern_reads_the_matching_topics(spark, group):
    produce(group, "pat-orders", queues=2, per_queue=5)
    produce(group, "pat-refunds", queues=1, per_queue=3)
    produce(group, "xpat-orders", queues=1, per_queue=4)  # matches only a partial match
    df = (
        spark.read.format("brokergroup")
        .option("namesrvAddr", group.namesrv_addr)
        .option("subscribePattern", "pat-(orders|refunds)")
        .load()
    )
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"pat-orders": 10, "pat-refunds": 3}


def test_subscribe_pattern_leaves_system_topics_out(group):
    created = ["sys-user", "%RETRY%sys", "%DLQ%sys"]
    # every broker keeps these, as RocketMQ's TopicConfigManager does (an admin may not create
    # a system topic: TBW102, rmq_sys_*, ...; tests/habroker/remoting/test_system_topics.py)
    own = ["SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT"]
    own += ["DefaultCluster", "broker-a", "DefaultCluster_REPLY_TOPIC"]
    with SyncMQAdmin(group.master.address) as admin:
        for name in created:
            admin.create_topic(name, 1)
        assert set(created + own) <= set(admin.topic_list())
    with Group(group.namesrv_addr) as client:
        found = client.topics_matching(".*")
    assert "sys-user" in found
    assert not set(created[1:] + own) & set(found)


def test_subscribe_pattern_stream_picks_up_new_topics_from_their_start(spark, group, tmp_path):
    produce(group, "grow-a", queues=1, per_queue=6)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    df = stream(spark, group, subscribePattern="grow-[a-z]", startingOffsets="earliest")
    available_now(df, out, ckpt)
    produce(group, "grow-b", queues=2, per_queue=4)  # a new matching topic
    produce(group, "grow-a", queues=1, per_queue=2, first=6)
    available_now(df, out, ckpt)
    got = keys(spark.read.parquet(str(out)).select("topic", "queueId", "queueOffset"))
    assert got == [("grow-a", 0, i) for i in range(8)] + [
        ("grow-b", q, i) for q in range(2) for i in range(4)
    ]


# -- starting / ending offsets by timestamp --------------------------------------------------


def _stored(spark, group, topic):
    """(queueId, queueOffset) -> storeTimestamp in ms, as read back."""
    df = read(spark, group, topic).selectExpr(
        "queueId", "queueOffset", "unix_millis(storeTimestamp) AS ms"
    )
    return {(r.queueId, r.queueOffset): r.ms for r in df.collect()}


def _first_at_or_after(stored, queue, ms):
    offsets = sorted(o for q, o in stored if q == queue)
    return next((o for o in offsets if stored[(queue, o)] >= ms), offsets[-1] + 1)


@pytest.fixture(scope="module")
def timed(_sessions, group):
    """A topic written in three rounds some 300 ms apart, queue 1 some 20 ms after queue 0 in
    each: store times tell them apart (a round can take less than a millisecond). Once per
    module, read with the local session: ``spark`` is per test."""
    spark = _sessions.get("local", LOCAL_MASTER)
    for i, first in enumerate((0, 10, 20)):
        if i:
            time.sleep(0.3)
        produce(group, "timed", queues=2, per_queue=10, first=first, queue_gap=0.02)
    return _stored(spark, group, "timed")


def test_starting_timestamp_starts_every_queue_at_that_time(spark, group, timed):
    at = timed[(0, 10)]
    got = keys(read(spark, group, "timed", startingTimestamp=at))
    want = [("timed", q, o) for q in range(2) for o in range(_first_at_or_after(timed, q, at), 30)]
    assert got == want and want[0] == ("timed", 0, 10)


def test_starting_offsets_by_timestamp_per_queue(spark, group, timed):
    spec = f'{{"timed": {{"1": {timed[(1, 20)]}}}}}'  # queue 0 left out: the default (earliest)
    got = keys(read(spark, group, "timed", startingOffsetsByTimestamp=spec))
    assert got == [("timed", 0, o) for o in range(30)] + [("timed", 1, o) for o in range(20, 30)]


def test_ending_timestamp_bounds_a_batch_read(spark, group, timed):
    got = keys(
        read(
            spark,
            group,
            "timed",
            startingTimestamp=timed[(0, 10)],
            endingTimestamp=timed[(0, 20)],
        )
    )
    assert got == [("timed", q, o) for q in range(2) for o in range(10, 20)]


def test_a_timestamp_after_every_message_fails_or_starts_at_the_end(spark, group, timed):
    later = max(timed.values()) + 60_000
    with pytest.raises(Exception, match="no message stored at or after"):
        read(spark, group, "timed", startingTimestamp=later).collect()
    df = read(
        spark, group, "timed", startingTimestamp=later, startingOffsetsByTimestampStrategy="latest"
    )
    assert df.count() == 0


def test_stream_starts_at_a_timestamp(spark, group, timed, tmp_path):
    at = timed[(0, 20)]  # the third round: queue 0's, then queue 1's, are stored from then on
    df = stream(spark, group, topic="timed", startingTimestamp=at)
    out = tmp_path / "out"
    available_now(df, out, tmp_path / "ckpt")
    got = keys(spark.read.parquet(str(out)))
    assert got == [("timed", q, o) for q in range(2) for o in range(20, 30)]
    # a time after queue 0's last message: error by default (Kafka's), like the batch read
    df = stream(spark, group, topic="timed", startingTimestamp=timed[(1, 29)])
    with pytest.raises(Exception, match="timed/0 has no message stored at or after"):
        available_now(df, tmp_path / "out2", tmp_path / "ckpt2")


def test_an_empty_batch_read_returns_no_rows(spark, group):
    produce(group, "nothing-between", queues=1, per_queue=5)
    bounds = '{"nothing-between": {"0": 3}}'
    df = read(spark, group, "nothing-between", startingOffsets=bounds, endingOffsets=bounds)
    assert df.count() == 0


# -- includeHeaders --------------------------------------------------------------------------


def test_include_headers_gives_kafka_style_headers(spark, group):
    produce(group, "headed", queues=1, per_queue=4)
    df = read(spark, group, "headed", includeHeaders="true")
    assert df.schema.names[-1] == "headers"
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    for row in df.collect():
        headers = [(h.key, bytes(h.value)) for h in row.headers]
        assert dict(headers) == {k: v.encode() for k, v in row.properties.items()}
        assert ("idx", str(row.queueOffset).encode()) in headers
    assert "headers" not in read(spark, group, "headed").schema.names


# -- admission control -----------------------------------------------------------------------


def _live(spark, group, name, **options):
    df = stream(spark, group, topic=name, **options).select("queueId", "queueOffset")
    return (
        df.writeStream.format("memory")
        .queryName(name.replace("-", "_"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_min_offsets_per_trigger_waits_for_enough_new_offsets(spark, group):
    create_topic(group, "trickle", 2)
    query = _live(spark, group, "trickle", minOffsetsPerTrigger=30, maxTriggerDelay="10m")
    try:
        wait_for(lambda: query.lastProgress is not None, timeout=60, what="first trigger")
        produce(group, "trickle", queues=2, per_queue=10, first=0)  # 20 < 30: no batch
        time.sleep(3)  # some 15 triggers
        assert spark.table("trickle").count() == 0
        produce(group, "trickle", queues=2, per_queue=5, first=10)  # 30 now
        wait_for(lambda: spark.table("trickle").count() == 30, timeout=60, what="the batch")
        # the sink shows a batch's rows before the query reports its progress
        wait_for(lambda: sum(rows_read(query)) == 30, timeout=30, what="the batch's progress")
        assert rows_read(query) == [30]
    finally:
        query.stop()


def test_max_trigger_delay_lets_a_small_batch_through(spark, group):
    create_topic(group, "trickle-late", 1)
    query = _live(spark, group, "trickle-late", minOffsetsPerTrigger=10, maxTriggerDelay="6s")
    try:
        wait_for(lambda: query.lastProgress is not None, timeout=60, what="first trigger")
        produce(group, "trickle-late", queues=1, per_queue=10, first=0)  # enough: at once
        wait_for(lambda: spark.table("trickle_late").count() == 10, timeout=60, what="batch")
        seen = time.monotonic()  # the batch ended before this: the delay counts from there
        produce(group, "trickle-late", queues=1, per_queue=3, first=10)  # too few
        time.sleep(2)
        assert spark.table("trickle_late").count() == 10
        wait_for(lambda: spark.table("trickle_late").count() == 13, timeout=60, what="late batch")
        assert time.monotonic() - seen >= 4.0  # 6 s after the first batch, less how late we saw it
        wait_for(lambda: sum(rows_read(query)) == 13, timeout=30, what="the late batch's progress")
        assert rows_read(query) == [10, 3]
    finally:
        query.stop()


# -- lag metrics -----------------------------------------------------------------------------


def test_progress_gives_kafkas_lag_metrics(spark, group, tmp_path):
    from brokergroup_spark.progress import source_metrics

    produce(group, "lagging", queues=2, per_queue=300)
    df = stream(spark, group, topic="lagging", startingOffsets="earliest", maxOffsetsPerTrigger=250)
    query = available_now(df, tmp_path / "out", tmp_path / "ckpt")
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in batches] == [250, 250, 100]
    # PySpark 4.3 gives a Python source no metrics hook: Spark's own map stays empty ...
    assert all(p["sources"][0]["metrics"] == {} for p in batches)
    # (nor can it name itself: the description is the JVM wrapper's default toString)
    assert batches[0]["sources"][0]["description"].startswith(
        "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream"
    ), batches[0]["sources"][0]["description"]
    # ... and the offsets in the report give Kafka's figures
    assert [source_metrics(p) for p in batches] == [
        {
            "minOffsetsBehindLatest": str(n),
            "maxOffsetsBehindLatest": str(n),
            "avgOffsetsBehindLatest": str(float(n)),
        }
        for n in (175, 50, 0)
    ]
