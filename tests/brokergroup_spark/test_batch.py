"""Batch reads against a real master + slave: data set, offsets, partitions, redirection."""

import asyncio
import time

import pytest
from brokergroup_spark.group import Group
from habroker.client import SyncMQAdmin
from habroker.local import LocalGroup

from tests.brokergroup_spark.conftest import (
    create_topic,
    message,
    named,
    on_local_and_cluster,
    produce,
    read,
    wait_for,
    wait_for_route,
)


@on_local_and_cluster
def test_batch_read_returns_the_known_data_set(spark, group):
    topic = named(spark, "known")
    produce(group, topic, queues=3, per_queue=400)
    df = read(spark, group, topic, maxRecordsPerPartition=150)
    assert df.rdd.getNumPartitions() == 9  # 3 queues x ceil(400 / 150)
    rows = df.collect()
    assert len(rows) == 1200
    seen = set()
    for row in rows:
        want = message(topic, row.queueId, row.queueOffset)
        assert row.body == want.body and row.topic == topic
        assert row.tags == want.tags and row.key == want.keys
        props = dict(row.properties)
        assert len(props.pop("UNIQ_KEY")) == 32  # the producer's message id
        assert props == {"TAGS": want.tags, "KEYS": want.keys, "idx": str(row.queueOffset)}
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
        .option("namesrvAddr", group.namesrv_addr)
        .option("topics", "multi-a,multi-b")
        .load()
    )
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {"multi-a": 30, "multi-b": 40}


def pulled(broker):
    """Messages a broker has served to pulls (GET_BROKER_RUNTIME_INFO, as mqadmin brokerStatus)."""
    with SyncMQAdmin(broker.address) as admin:
        return int(admin.broker_runtime_info(broker.address)["msgGetTotalTodayNow"])


@on_local_and_cluster
def test_backlog_reads_are_served_by_the_slave(spark, group):
    # ~1.5 MB of log behind the first pulls: the master redirects to brokerId 1 (on the
    # cluster: tasks in executor JVMs follow the redirection in their own Python workers)
    topic = named(spark, "backlog")
    produce(group, topic, queues=1, per_queue=6000, size=200)
    before = pulled(group.slaves[0])
    df = read(spark, group, topic, consumerGroup="spark-readers")
    served = {r.brokerId: r["count"] for r in df.groupBy("brokerId").count().collect()}
    assert served.get(1, 0) > 0, served
    assert sum(served.values()) == 6000
    # the rows say who served them, and the slave's own counters agree
    assert pulled(group.slaves[0]) - before >= served[1]


def test_the_route_from_the_master_alone_names_the_slave(spark, group):
    # namesrvAddr = the master alone (a client Service): the route it answers names the slave,
    # so backlog reads still move there (what discoverSlaves was for over HTTP)
    produce(group, "discover", queues=1, per_queue=6000, size=200)
    df = (
        spark.read.format("brokergroup")
        .option("namesrvAddr", group.master.address)
        .option("topic", "discover")
        .load()
    )
    served = {r.brokerId: r["count"] for r in df.groupBy("brokerId").count().collect()}
    assert served.get(1, 0) > 0 and sum(served.values()) == 6000, served


def test_reader_follows_suggestions_at_the_client_level(group):
    produce(group, "direct", queues=1, per_queue=3000, size=200)
    with Group(group.namesrv_addr) as client:
        served = {}
        for batch in client.read_range("direct", 0, 0, 3000, batch=256):
            for broker in batch.column("brokerId").to_pylist():
                served[broker] = served.get(broker, 0) + 1
        assert sum(served.values()) == 3000 and served.get(1, 0) > 0


def test_a_slave_that_does_not_answer_costs_one_timeout_per_range(group):
    # as when executors cannot reach the addresses slaves announce: the master serves the rest
    produce(group, "frozen", queues=1, per_queue=3000, size=200)
    group.slaves[0].pause()
    try:
        started = time.monotonic()
        with Group(group.master.address, timeout=1.5) as client:
            batches = list(client.read_range("frozen", 0, 0, 3000, batch=256))
        rows = [
            (offset, broker)
            for b in batches
            for offset, broker in zip(
                b.column("queueOffset").to_pylist(), b.column("brokerId").to_pylist(), strict=True
            )
        ]
        elapsed = time.monotonic() - started
    finally:
        group.slaves[0].resume()
    assert [o for o, _ in rows] == list(range(3000))
    assert {b for _, b in rows} == {0}
    assert elapsed < 6, f"{elapsed:.1f} s: the frozen slave was asked more than once"


@pytest.fixture(scope="module")
def small_topic(group):
    produce(group, "small", queues=1, per_queue=5)
    return "small"


@pytest.mark.parametrize(
    ("options", "message_part"),
    [
        ({"namesrvAddr": None}, "option namesrvAddr is required"),
        ({"endpoints": "0=127.0.0.1:10913"}, "endpoints .* is gone.*Use namesrvAddr"),
        ({"discoverSlaves": "true"}, "discoverSlaves is gone"),
        ({"startingOffsets": '{"small": {"9": 0}}'}, "has no queue 9"),
        ({"endingoffsets": "earliest"}, "would read nothing"),
        ({"starting_offsets": "earliest"}, "unknown read option"),
    ],
)
def test_bad_options_fail_the_query_with_the_message(
    spark, group, small_topic, options, message_part
):
    reader = spark.read.format("brokergroup").option("topic", small_topic)
    if "namesrvAddr" not in options:
        reader = reader.option("namesrvAddr", group.namesrv_addr)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    with pytest.raises(Exception, match=message_part):
        reader.load().count()


def test_unknown_topic_is_reported(spark, group):
    with pytest.raises(Exception, match="topic 'no-such-topic' does not exist"):
        read(spark, group, "no-such-topic").count()


def test_reads_fall_back_to_the_slave_when_the_master_is_down(spark, tmp_path):
    group = LocalGroup(tmp_path / "g", slaveReadEnable=True, metaSyncInterval=200).start()
    try:
        wait_for_route(group)
        produce(group, "failover", queues=2, per_queue=100)

        def slave_has_topic():
            with SyncMQAdmin(group.slaves[0].address) as slave:
                return "failover" in slave.topic_list()

        wait_for(slave_has_topic, what="topic copied to the slave")
        group.master.stop()
        rows = read(spark, group, "failover").select("queueId", "queueOffset", "brokerId")
        got = rows.collect()
        assert {r.brokerId for r in got} == {1}
        assert sorted((r.queueId, r.queueOffset) for r in got) == [
            (q, i) for q in range(2) for i in range(100)
        ]
    finally:
        group.stop()


def test_a_user_schema_is_refused(spark, group, small_topic):
    reader = spark.read.format("brokergroup").schema("body binary")
    reader = reader.option("namesrvAddr", group.namesrv_addr).option("topic", small_topic)
    with pytest.raises(Exception, match="fixed schema"):
        reader.load().count()


def test_bodies_a_java_producer_compressed_are_read_as_it_sent_them(spark, group):
    # SEND_MESSAGE_V2 with the sysFlag and body bytes RocketMQ's own compressors produced (the
    # Java client compresses bodies over 4 KiB): the pull serves them as stored, the connector
    # decompresses them in its Arrow decode
    from habroker.client import ClientInstance
    from habroker.remoting import RequestCode

    from tests.habroker.test_compression import JAVA, ORIGINAL

    sent = [("", b"plain-0"), ("ZLIB_4.9.7", None), ("LZ4", None), ("", b"plain-3")]
    sent += [("ZSTD", None), ("ZLIB", None)]

    async def send() -> None:
        async with ClientInstance(group.master.address) as client:
            for i, (name, plain) in enumerate(sent):
                flag, body = JAVA[name] if name else (0, plain)
                header = {"a": "java-like", "b": "zipped", "c": "TBW102", "d": 4, "e": 0}
                header |= {"f": flag, "g": 0, "h": 0, "i": f"KEYS\x01k{i}", "j": 0, "m": False}
                await client.call(group.master.address, RequestCode.SEND_MESSAGE_V2, header, body)

    create_topic(group, "zipped", 1)
    asyncio.run(send())
    rows = read(spark, group, "zipped").orderBy("queueOffset").collect()
    assert [r.body for r in rows] == [plain or ORIGINAL for _, plain in sent]
    assert [r.key for r in rows] == [f"k{i}" for i in range(len(sent))]
