"""One SparkSession and one master + slave group for the whole test session.

Starting Spark costs 10-25 s and a broker group about a second, so tests share both and keep
apart by topic name. Tests that damage a group (retention) start their own.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from habroker.client import OutgoingMessage, Producer
from habroker.local import LocalGroup

# Redirection: a backlog over 10% of 1 MiB (~100 KB of log) sends readers to the slave.
REDIRECTING = {
    "slaveReadEnable": True,
    "totalPhysicalMemorySize": 1 << 20,
    "accessMessageInMemoryMaxRatio": 10,
    "mappedFileSizeCommitLog": 4 << 20,
    "maxMessageSize": 256 * 1024,
    "metaSyncInterval": 200,
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from brokergroup_spark import register
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,2]")  # 2 threads; a failed task is tried twice
        .appName("brokergroup-spark-tests")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGroup]:
    grp = LocalGroup(tmp_path_factory.mktemp("spark-group"), **REDIRECTING).start()
    yield grp
    grp.stop()


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def message(topic: str, queue: int, index: int, size: int = 50) -> OutgoingMessage:
    """The known data set: every field derivable from (topic, queue, index)."""
    return OutgoingMessage(
        f"{topic}/{queue}/{index:06d}/".encode().ljust(size, b"."),
        tags=f"tag{index % 3}",
        keys=f"k-{queue}-{index}",
        properties={"idx": str(index)},
    )


def produce(
    group: LocalGroup,
    topic: str,
    queues: int,
    per_queue: int,
    *,
    first: int = 0,
    size: int = 50,
    chunk: int = 500,
) -> None:
    """``per_queue`` messages into each queue (creating the topic), replicated to the slave."""
    with Producer(group.master.http_address) as producer:
        if first == 0:
            producer.create_topic(topic, queues)
        for queue in range(queues):
            for start in range(first, first + per_queue, chunk):
                stop = min(start + chunk, first + per_queue)
                producer.send_batch(
                    topic,
                    [message(topic, queue, i, size) for i in range(start, stop)],
                    queue_id=queue,
                )
    group.wait_replicated()


def read(spark: Any, group: LocalGroup, topic: str, **options: Any) -> Any:
    reader = spark.read.format("brokergroup").option("endpoints", group.http_endpoints)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()
