"""One SparkSession at a time and one master + slave group for the whole test session.

Starting Spark costs 10-25 s and a broker group about a second, so tests share both and keep
apart by topic name (``named``). The SparkSession runs local[2]; tests marked
``on_local_and_cluster`` run again against a real standalone cluster (``spark_cluster``: a
Master and two Workers). Tests that damage a group (retention) start their own. Everything talks
RocketMQ's remoting protocol: the connector gets ``namesrvAddr`` (the group's brokers) and the
fixtures create topics and send messages with the remoting admin and producer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from habroker.client import OutgoingMessage, SyncMQAdmin, SyncMQProducer
from habroker.local import LocalGroup

from tests.brokergroup_spark.cluster import QUICK_JVM, StandaloneCluster

# Redirection: a backlog over 10% of 1 MiB (~100 KB of log) sends readers to the slave.
REDIRECTING = {
    "slaveReadEnable": True,
    "totalPhysicalMemorySize": 1 << 20,
    "accessMessageInMemoryMaxRatio": 10,
    "mappedFileSizeCommitLog": 4 << 20,
    "maxMessageSize": 256 * 1024,
    "metaSyncInterval": 200,
}


# Tests marked with this run on both: local[2] (one JVM, Python workers beside it) and a real
# standalone cluster (a Master and two one-core Workers, each executor its own JVM with its own
# Python workers), where everything a task needs must travel pickled to another process.
on_local_and_cluster = pytest.mark.parametrize("spark", ["local", "cluster"], indirect=True)


@pytest.fixture(scope="session")
def spark_cluster(
    tmp_path_factory: pytest.TempPathFactory, _sessions: Sessions
) -> Iterator[StandaloneCluster]:
    """Never skipped: no Java or a cluster that does not come up fails the tests that need it."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield cluster
    finally:
        if _sessions.kind == "cluster":
            _sessions.stop()  # the application first, while its master still answers
        cluster.stop()


def session_builder(master: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("brokergroup-spark-tests")
        .config("spark.driver.extraJavaOptions", QUICK_JVM)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("spark://"):
        builder = (
            builder.config("spark.executor.extraJavaOptions", QUICK_JVM)
            .config("spark.executor.memory", "768m")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", "2")
        )
    return builder


class Sessions:
    """The one SparkSession a process may have, switched between local and cluster on demand
    (tests are ordered so that it switches once: the cluster ones run last)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.session: Any = None

    def get(self, kind: str, master: str) -> Any:
        if self.kind != kind:
            self.stop()
            os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
            from brokergroup_spark import register

            session = session_builder(master).getOrCreate()
            session.sparkContext.setLogLevel("ERROR")
            register(session)  # also points the Python workers at this interpreter
            if kind == "cluster":
                wait_for_executors(session, 2)
            self.kind, self.session = kind, session
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
        self.kind = self.session = None


def wait_for_executors(session: Any, count: int, timeout: float = 120.0) -> None:
    """Until ``count`` executors (besides the driver) have registered with the application."""
    wait_for(
        lambda: session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() >= count + 1,
        timeout=timeout,
        what=f"{count} executors",
    )


#: the local session's master: 2 threads; a failed task is tried twice
LOCAL_MASTER = "local[2,2]"


@pytest.fixture(scope="session")
def _sessions() -> Iterator[Sessions]:
    sessions = Sessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(request: pytest.FixtureRequest, _sessions: Sessions) -> Any:
    """The SparkSession: local[2] by default, the standalone cluster when parametrized so."""
    kind = getattr(request, "param", "local")
    if kind == "cluster":
        cluster: StandaloneCluster = request.getfixturevalue("spark_cluster")
        return _sessions.get("cluster", cluster.url)
    return _sessions.get("local", LOCAL_MASTER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Cluster runs last, so the process starts each kind of SparkSession once."""

    def on_cluster(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        return callspec is not None and callspec.params.get("spark") == "cluster"

    items.sort(key=on_cluster)


@pytest.fixture(scope="session")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGroup]:
    grp = LocalGroup(tmp_path_factory.mktemp("spark-group"), **REDIRECTING).start()
    try:
        wait_for_route(grp)
        yield grp
    finally:
        grp.stop()


def named(spark: Any, topic: str) -> str:
    """``topic`` for the local session, another name for the cluster's (tests run on both)."""
    return topic if spark.sparkContext.master.startswith("local") else f"{topic}-cluster"


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
    queue_gap: float = 0.0,
) -> None:
    """``per_queue`` messages into each queue (creating the topic), replicated to the slave;
    ``queue_gap`` seconds between queues (so that store times tell the queues apart)."""
    if first == 0:
        create_topic(group, topic, queues)
    with SyncMQProducer(group.master.address, send_timeout=30) as producer:
        for queue in range(queues):
            if queue and queue_gap:
                time.sleep(queue_gap)
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


def stream(spark: Any, group: LocalGroup, **options: Any) -> Any:
    """A streaming DataFrame of the group (options as the source takes them: topic, topics,
    subscribePattern, ...)."""
    reader = spark.readStream.format("brokergroup").option("namesrvAddr", group.namesrv_addr)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def available_now(df: Any, out: Any, checkpoint: Any, timeout: float = 180) -> Any:
    """Runs ``df`` to parquet at ``out`` with an availableNow trigger; the finished query."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout)
    assert query.exception() is None, query.exception()
    return query


def rows_read(query: Any) -> list[int]:
    """The input rows of each of the query's batches that read any."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
