"""One SparkSession and one master + slave group for the whole test session.

Starting Spark costs 10-25 s and a broker group about a second, so tests share both and keep
apart by topic name. Tests that damage a group (retention) start their own. Everything talks
RocketMQ's remoting protocol: the connector gets ``namesrvAddr`` (the group's brokers) and the
fixtures create topics and send messages with the remoting admin and producer.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from habroker.client import OutgoingMessage, SyncMQAdmin, SyncMQProducer
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
    try:
        wait_for_route(grp)
        yield grp
    finally:
        grp.stop()


def members(group: LocalGroup) -> dict[int, str]:
    """brokerId → client address as the master's route names them."""
    with SyncMQAdmin(group.master.address) as admin:
        info = admin.cluster_info()
    return {int(k): v for b in info.brokers.values() for k, v in b.addrs.items()}


def wait_for_route(group: LocalGroup) -> None:
    """Until the master's route names every slave (they register when they start)."""
    want = {b.config["brokerId"]: b.address for b in group.brokers}
    wait_for(lambda: members(group) == want, what="the slaves in the master's route")


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
    if first == 0:
        create_topic(group, topic, queues)
    with SyncMQProducer(group.master.address, send_timeout=30) as producer:
        for queue in range(queues):
            for start in range(first, first + per_queue, chunk):
                stop = min(start + chunk, first + per_queue)
                producer.send_batch(
                    topic,
                    [message(topic, queue, i, size) for i in range(start, stop)],
                    queue=queue,
                )
    group.wait_replicated()


def create_topic(group: LocalGroup, topic: str, queues: int) -> None:
    with SyncMQAdmin(group.master.address) as admin:
        admin.create_topic(topic, queues)


def read(spark: Any, group: LocalGroup, topic: str, **options: Any) -> Any:
    reader = spark.read.format("brokergroup").option("namesrvAddr", group.namesrv_addr)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()
