"""Batch reads against a real master + slave: data set, offsets, partitions, redirection."""

import pytest
from brokergroup_spark.group import Group
from habroker.client.sync import BrokerConnection
from habroker.local import LocalGroup

from tests.brokergroup_spark.conftest import message, produce, read, wait_for


def test_batch_read_returns_the_known_data_set(spark, group):
    produce(group, "known", queues=3, per_queue=400)
    df = read(spark, group, "known", maxRecordsPerPartition=150)
    assert df.rdd.getNumPartitions() == 9  # 3 queues x ceil(400 / 150)
    rows = df.collect()
    assert len(rows) == 1200
    seen = set()
    for row in rows:
        want = message("known", row.queueId, row.queueOffset)
        assert row.body == want.body and row.topic == "known"
        assert row.tags == want.tags and row.key == want.keys
        assert row.properties == {"TAGS": want.tags, "KEYS": want.keys, "idx": str(row.queueOffset)}
        assert row.storeTimestamp >= row.bornTimestamp
        seen.add((row.queueId, row.queueOffset))
    assert seen == {(q, i) for q in range(3) for i in range(400)}
    offsets = [r.commitLogOffset for r in sorted(rows, key=lambda r: r.commitLogOffset)]
    assert len(set(offsets)) == 1200


def test_offsets_json_bounds_the_read(spark, group):
    produce(group, "bounded", queues=2, per_queue=100)
    df = read(
        spark,
        group,
        "bounded",
        startingOffsets='{"bounded": {"0": 10, "1": -2}}',
        endingOffsets='{"bounded": {"0": 20}}',
    )
    got = sorted((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect())
    assert got == [(0, i) for i in range(10, 20)] + [(1, i) for i in range(100)]


def test_several_topics_in_one_read(spark, group):
    produce(group, "multi-a", queues=1, per_queue=30)
    produce(group, "multi-b", queues=2, per_queue=20)
    df = (
        spark.read.format("brokergroup")
        .option("endpoints", group.http_endpoints)
        .option("topics", "multi-a,multi-b")
        .load()
    )
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"multi-a": 30, "multi-b": 40}


def test_backlog_reads_are_served_by_the_slave(spark, group):
    # ~1.5 MB of log behind the first pulls: the master redirects to brokerId 1.
    produce(group, "backlog", queues=1, per_queue=6000, size=200)
    df = read(spark, group, "backlog", consumerGroup="spark-readers")
    served = {r.brokerId: r["count"] for r in df.groupBy("brokerId").count().collect()}
    assert served.get(1, 0) > 0, served
    assert sum(served.values()) == 6000
    # Given only the master (e.g. the client Service), everything comes from the master.
    master_only = (
        spark.read.format("brokergroup")
        .option("endpoints", group.master.http_address)
        .option("topic", "backlog")
        .load()
    )
    served = {r.brokerId: r["count"] for r in master_only.groupBy("brokerId").count().collect()}
    assert served == {0: 6000}


def test_reader_follows_suggestions_at_the_client_level(group):
    produce(group, "direct", queues=1, per_queue=3000, size=200)
    with Group({**group.http_broker_map()}) as client:
        served = {}
        for batch in client.read_range("direct", 0, 0, 3000, batch=256):
            for broker in batch.column("brokerId").to_pylist():
                served[broker] = served.get(broker, 0) + 1
        assert sum(served.values()) == 3000 and served.get(1, 0) > 0


@pytest.fixture(scope="module")
def small_topic(group):
    produce(group, "small", queues=1, per_queue=5)
    return "small"


@pytest.mark.parametrize(
    ("options", "message_part"),
    [
        ({"endpoints": None}, "option endpoints is required"),
        ({"startingOffsets": '{"small": {"9": 0}}'}, "has no queue 9"),
        ({"endingoffsets": "earliest"}, "would read nothing"),
        ({"starting_offsets": "earliest"}, "unknown read option"),
    ],
)
def test_bad_options_fail_the_query_with_the_message(
    spark, group, small_topic, options, message_part
):
    reader = spark.read.format("brokergroup").option("topic", small_topic)
    if "endpoints" not in options:
        reader = reader.option("endpoints", group.http_endpoints)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    with pytest.raises(Exception, match=message_part):
        reader.load().count()


def test_unknown_topic_is_reported(spark, group):
    with pytest.raises(Exception, match="do not exist"):
        read(spark, group, "no-such-topic").count()


def test_reads_fall_back_to_the_slave_when_the_master_is_down(spark, tmp_path):
    group = LocalGroup(tmp_path / "g", slaveReadEnable=True, metaSyncInterval=200).start()
    try:
        produce(group, "failover", queues=2, per_queue=100)
        wait_for(
            lambda: (
                "failover"
                in BrokerConnection(group.slaves[0].http_address).json("GET", "/v1/topics")[
                    "topicConfigTable"
                ]
            ),
            what="topic copied to the slave",
        )
        group.master.stop()
        rows = read(spark, group, "failover").select("queueId", "queueOffset", "brokerId")
        got = rows.collect()
        assert {r.brokerId for r in got} == {1}
        assert sorted((r.queueId, r.queueOffset) for r in got) == [
            (q, i) for q in range(2) for i in range(100)
        ]
    finally:
        group.stop()


def test_slaves_named_by_the_master_serve_backlog_reads(spark, group):
    produce(group, "discover", queues=1, per_queue=6000, size=200)
    wait_for(
        lambda: any(s.get("listenAddress") for s in group.master.status()["master"]["slaves"]),
        what="the slave's announced address",
    )
    df = (
        spark.read.format("brokergroup")
        .option("endpoints", group.master.http_address)  # the master alone, as a client Service
        .option("topic", "discover")
        .option("discoverSlaves", "true")
        .load()
    )
    served = {r.brokerId: r["count"] for r in df.groupBy("brokerId").count().collect()}
    assert served.get(1, 0) > 0 and sum(served.values()) == 6000, served


def test_a_user_schema_is_refused(spark, group, small_topic):
    reader = spark.read.format("brokergroup").schema("body binary")
    reader = reader.option("endpoints", group.http_endpoints).option("topic", small_topic)
    with pytest.raises(Exception, match="fixed schema"):
        reader.load().count()
