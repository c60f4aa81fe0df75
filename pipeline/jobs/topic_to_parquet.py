"""Copy a topic into parquet, incrementally: each run appends what arrived since the last one.

    # against a running group: any of its brokers (client port) or RocketMQ name servers
    .venv/bin/python pipeline/jobs/topic_to_parquet.py \\
        --namesrv-addr '127.0.0.1:10911;127.0.0.1:10921' --topic orders \\
        --output /data/orders --checkpoint /data/orders.ckpt

    # self-contained: a local master + slave, two runs with new messages in between
    .venv/bin/python pipeline/jobs/topic_to_parquet.py --demo

    # on a cluster: spark-submit it (docs/spark.md, "Submitting the example job")
    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://127.0.0.1:7077 \\
        --py-files brokergroup.zip pipeline/jobs/topic_to_parquet.py --namesrv-addr ...

A streaming query with ``trigger(availableNow=True)``: it reads everything up to the offsets
present when it starts, in batches of at most ``--max-per-trigger`` messages, writes parquet, and
stops. Spark keeps the offsets in the checkpoint, so the next run resumes exactly there: no
message is written twice and none is skipped, however often the job is run or restarted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any


def spark_session() -> Any:
    """The session: ``spark-submit``'s (its ``--master`` and ``--conf``) when submitted, else
    ``$SPARK_MASTER`` (default ``local[2]``) from plain Python."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from brokergroup_spark import register
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("topic-to-parquet")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        builder = (
            builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .config("spark.ui.enabled", "false")
        )
    spark = (
        builder.config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)  # the workers' Python: the driver's own on this machine, unless chosen
    return spark


def run(spark: Any, args: argparse.Namespace) -> int:
    """One incremental run; returns how many messages it wrote."""
    source = (
        spark.readStream.format("brokergroup")
        .option("namesrvAddr", args.namesrv_addr)
        .option("topic", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .option("failOnDataLoss", str(args.fail_on_data_loss).lower())
    )
    if args.consumer_group:
        source = source.option("consumerGroup", args.consumer_group)
    rows = source.load().selectExpr(
        "topic",
        "queueId",
        "queueOffset",
        "key",
        "tags",
        "body",
        "properties",
        "storeTimestamp",
        "to_date(storeTimestamp) AS day",
    )
    query = (
        rows.writeStream.format("parquet")
        .option("path", str(args.output))
        .option("checkpointLocation", str(args.checkpoint))
        .partitionBy("day")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def demo(args: argparse.Namespace) -> int:
    from habroker.client import OutgoingMessage, SyncMQAdmin, SyncMQProducer
    from habroker.local import LocalGroup

    root = Path(tempfile.mkdtemp(prefix="topic-to-parquet-"))
    args.output, args.checkpoint = root / "parquet", root / "checkpoint"
    args.topic, args.starting_offsets = "orders", "earliest"
    with LocalGroup(root / "group", slaveReadEnable=True) as group:
        args.namesrv_addr = group.namesrv_addr

        def send(first: int, count: int) -> None:
            if first == 0:
                with SyncMQAdmin(group.namesrv_addr) as admin:
                    admin.create_topic(args.topic, 4)
            with SyncMQProducer(group.namesrv_addr) as producer:
                for start in range(first, first + count, 1000):
                    batch = [
                        OutgoingMessage(f'{{"order": {i}}}'.encode(), tags="new", keys=f"o-{i}")
                        for i in range(start, min(start + 1000, first + count))
                    ]
                    producer.send_batch(args.topic, batch)

        spark = spark_session()
        send(0, 10_000)
        print(f"run 1 wrote {run(spark, args)} messages")
        send(10_000, 5_000)
        print(f"run 2 wrote {run(spark, args)} messages")
        print(f"run 3 wrote {run(spark, args)} messages (nothing new)")
        table = spark.read.parquet(str(args.output))
        total, distinct = table.count(), table.select("queueId", "queueOffset").distinct().count()
        print(f"{args.output}: {total} rows, {distinct} distinct (queueId, queueOffset)")
        spark.stop()
        return 0 if total == distinct == 15_000 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="run against a local master + slave")
    parser.add_argument(
        "--namesrv-addr",
        help="where the group's routes come from, ';'-separated host:port: any broker of the "
        "group (listenPort, default 10911; in Kubernetes the <group>-namesrv Service, port "
        "9876) or RocketMQ name servers",
    )
    parser.add_argument("--topic")
    parser.add_argument("--output", type=Path, help="parquet directory")
    parser.add_argument("--checkpoint", type=Path, help="Spark checkpoint directory")
    parser.add_argument("--starting-offsets", default="earliest", help="for the first run only")
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--consumer-group", help="report progress under this group")
    parser.add_argument("--fail-on-data-loss", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    if args.demo:
        return demo(args)
    names = ("namesrv_addr", "topic", "output", "checkpoint")
    missing = [n for n in names if not getattr(args, n)]
    if missing:
        flags = ", ".join("--" + n.replace("_", "-") for n in missing)
        parser.error(f"missing {flags} (or use --demo)")
    spark = spark_session()
    print(f"wrote {run(spark, args)} messages to {args.output}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
