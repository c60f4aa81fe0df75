"""Structured streaming: checkpointed offsets, restart without duplicates or loss, triggers,
rate limit per trigger, progress reported to the broker's consumer-offset table."""

from habroker.client import SyncMQAdmin

from tests.brokergroup_spark.conftest import (
    available_now,
    create_topic,
    named,
    on_local_and_cluster,
    produce,
    rows_read,
    stream,
    wait_for,
)


def run_available_now(df, out, checkpoint):
    return rows_read(available_now(df, out, checkpoint, timeout=120))


@on_local_and_cluster
def test_restarted_query_resumes_without_duplicates_or_loss(spark, group, tmp_path):
    topic = named(spark, "resume")
    produce(group, topic, queues=2, per_queue=300)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    opts = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": 250, "consumerGroup": "etl"}
    batches = run_available_now(stream(spark, group, topic=topic, **opts), out, ckpt)
    assert sum(batches) == 600 and max(batches) <= 250 and len(batches) == 3

    produce(group, topic, queues=2, per_queue=200, first=300)
    # startingOffsets only applies to a new query: the checkpoint wins on restart
    opts["startingOffsets"] = "latest"
    batches = run_available_now(stream(spark, group, topic=topic, **opts), out, ckpt)
    assert sum(batches) == 400 and max(batches) <= 250

    rows = spark.read.parquet(str(out)).select("queueId", "queueOffset", "body").collect()
    keys = [(r.queueId, r.queueOffset) for r in rows]
    assert len(keys) == len(set(keys)) == 1000
    assert set(keys) == {(q, i) for q in range(2) for i in range(500)}

    # The group's offsets on the broker (UPDATE_CONSUMER_OFFSET) are the end of the last batch
    # the sink committed: the end of the run; `consumer progress` (GET_CONSUME_STATS) shows them.
    with SyncMQAdmin(group.master.address) as admin:
        progress = admin.consumer_progress("etl", topic)
    table = {p.message_queue.queue_id: p.consumer_offset for p in progress}
    assert table == {0: 500, 1: 500}, table
    assert all(p.broker_offset == 500 for p in progress)


def test_processing_time_trigger_reads_new_messages(spark, group):
    produce(group, "live", queues=2, per_queue=50)  # before the query: skipped (latest)
    df = stream(spark, group, topic="live").select("queueId", "queueOffset", "brokerId")
    query = (
        df.writeStream.format("memory")
        .queryName("live_rows")
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: query.lastProgress is not None, what="first trigger")
        produce(group, "live", queues=2, per_queue=40, first=50)
        wait_for(lambda: spark.table("live_rows").count() >= 80, timeout=60, what="streamed rows")
        produce(group, "live", queues=2, per_queue=10, first=90)
        wait_for(lambda: spark.table("live_rows").count() >= 100, timeout=60, what="second round")
    finally:
        query.stop()
    rows = spark.table("live_rows").collect()
    assert sorted((r.queueId, r.queueOffset) for r in rows) == [
        (q, i) for q in range(2) for i in range(50, 100)
    ]


def test_stream_picks_up_queues_added_to_the_topic(spark, group, tmp_path):
    produce(group, "grow", queues=1, per_queue=20)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    df = stream(spark, group, topic="grow", startingOffsets="earliest")
    assert sum(run_available_now(df, out, ckpt)) == 20
    create_topic(group, "grow", 2)  # UPDATE_AND_CREATE_TOPIC with more queues
    produce(group, "grow", queues=2, per_queue=10, first=20)  # queue 1 gets offsets 0..9
    assert sum(run_available_now(df, out, ckpt)) == 20
    rows = spark.read.parquet(str(out)).select("queueId", "queueOffset").collect()
    assert sorted((r.queueId, r.queueOffset) for r in rows) == [(0, i) for i in range(30)] + [
        (1, i) for i in range(10)
    ]
