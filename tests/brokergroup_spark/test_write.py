"""Writing: batch and streaming round trips, clear errors, and at-least-once on task retry."""

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from tests.brokergroup_spark.conftest import (
    create_topic,
    named,
    on_local_and_cluster,
    produce,
    read,
)

ROWS = StructType(
    [
        StructField("body", BinaryType()),
        StructField("key", StringType()),
        StructField("tags", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("queueId", IntegerType()),
        StructField("ignored", StringType()),
    ]
)


def write(df, group, **options):
    writer = df.write.format("brokergroup").mode("append").option("namesrvAddr", group.namesrv_addr)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


@on_local_and_cluster
def test_batch_write_round_trip(spark, group):
    topic = named(spark, "written")
    create_topic(group, topic, 2)
    data = [
        (
            f"body-{i}".encode(),
            f"key-{i}" if i % 5 else None,
            f"tag{i % 2}",
            {"n": str(i)},
            i % 2,
            "x",
        )
        for i in range(300)
    ]
    write(spark.createDataFrame(data, ROWS).repartition(3), group, topic=topic, batchSize=64)
    group.wait_replicated()
    rows = read(spark, group, topic).collect()
    assert len(rows) == 300
    by_body = {r.body: r for r in rows}
    for body, key, tags, props, queue, _ in data:
        row = by_body[body]
        assert (row.key, row.tags, row.queueId) == (key, tags, queue)
        assert row.properties["n"] == props["n"]
    # each queue's offsets are dense: 150 messages at 0..149
    for queue in (0, 1):
        assert sorted(r.queueOffset for r in rows if r.queueId == queue) == list(range(150))


def test_topic_column_and_string_bodies(spark, group):
    create_topic(group, "route-a", 1)
    create_topic(group, "route-b", 1)
    df = spark.createDataFrame(
        [("route-a", "hello"), ("route-b", "world"), ("route-a", "again")],
        "topic string, body string",
    )
    write(df, group)
    bodies = {
        t: sorted(r.body for r in read(spark, group, t).collect()) for t in ("route-a", "route-b")
    }
    assert bodies == {"route-a": [b"again", b"hello"], "route-b": [b"world"]}


def test_stream_write_copies_a_topic(spark, group, tmp_path):
    produce(group, "copy-src", queues=2, per_queue=120)
    create_topic(group, "copy-dst", 1)
    src = (
        spark.readStream.format("brokergroup")
        .option("namesrvAddr", group.namesrv_addr)
        .option("topic", "copy-src")
        .option("startingOffsets", "earliest")
        .load()
        .select("body", "key", "tags")
    )
    query = (
        src.writeStream.format("brokergroup")
        .option("namesrvAddr", group.master.address)  # the master alone is enough
        .option("topic", "copy-dst")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copied = read(spark, group, "copy-dst").collect()
    original = read(spark, group, "copy-src").collect()
    assert sorted((r.body, r.key, r.tags) for r in copied) == sorted(
        (r.body, r.key, r.tags) for r in original
    )


@pytest.mark.parametrize(
    ("ddl", "options", "message_part"),
    [
        ("value binary", {"topic": "written"}, "needs a body column"),
        ("body binary", {}, "needs the topic option or a topic column"),
        ("body int", {"topic": "written"}, "column body has type int"),
        ("body binary, properties map<string,int>", {"topic": "written"}, "map<string,string>"),
        ("body binary", {"topic": "written", "batchSize": 0}, "batchSize=0"),
        ("body binary", {"topic": "written", "batchBytes": 5 << 20}, "batchBytes=5242880"),
    ],
)
def test_bad_writes_fail_before_any_task(spark, group, ddl, options, message_part):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message_part):
        write(df, group, **options)


def test_broker_refusal_names_the_problem(spark, group):
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception, match="topic 'not-created' does not exist"):
        write(df, group, topic="not-created")


def test_retried_task_resends_its_rows_at_least_once(spark, group):
    """A task that fails after some of its requests were stored is retried whole: the rows
    stored by the failed attempt are stored again (duplicates), and none is lost.

    The first attempt sends rows 40.. to a queue the topic does not have: the broker stores the
    first request (rows 0-39, queue 0) and the producer refuses the second (the route has no
    such queue), which fails the task. The retry sends all 100 rows to queue 0.
    """
    create_topic(group, "retry", 1)

    def first_attempt_misroutes(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        first = TaskContext.get().attemptNumber() == 0
        for batch in batches:
            ids = batch.column(0)
            queue = pc.if_else(pc.greater_equal(ids, 40), 7, 0) if first else pc.multiply(ids, 0)
            body = pc.cast(pc.cast(ids, pa.string()), pa.binary())
            yield pa.RecordBatch.from_arrays(
                [body, pc.cast(queue, pa.int32())], ["body", "queueId"]
            )

    df = spark.range(100, numPartitions=1).mapInArrow(
        first_attempt_misroutes, "body binary, queueId int"
    )
    write(df, group, topic="retry", batchSize=40)
    bodies = [int(r.body) for r in read(spark, group, "retry").collect()]
    counts = {b: bodies.count(b) for b in set(bodies)}
    assert set(counts) == set(range(100))  # nothing lost
    assert sorted(b for b, n in counts.items() if n == 2) == list(range(40))  # stored twice
    assert len(bodies) == 140


def test_a_task_that_keeps_failing_fails_the_job_and_keeps_what_was_stored(spark, group):
    create_topic(group, "refused", 1)
    # the third body is over the broker's maxMessageSize (256 KiB here): the broker refuses it
    big = b"c" * (300 * 1024)
    df = spark.createDataFrame([(b"a",), (b"b",), (big,)], "body binary")
    with pytest.raises(Exception, match="refused SEND_BATCH_MESSAGE"):
        write(df.coalesce(1), group, topic="refused", batchSize=2)
    # two attempts, each stored its first request before the broker refused the second
    assert sorted(r.body for r in read(spark, group, "refused").collect()) == [
        b"a",
        b"a",
        b"b",
        b"b",
    ]
