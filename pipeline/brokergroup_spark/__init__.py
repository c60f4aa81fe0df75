"""PySpark data source ``brokergroup``: read and write a broker group's topics from Spark.

Register it once per session::

    from brokergroup_spark import register
    register(spark)
    spark.read.format("brokergroup").option("namesrvAddr", "bg-namesrv:9876").option("topic", "t").load()

``namesrvAddr`` is where RocketMQ clients find brokers (``host:port;host:port``): any broker of
the group (its client port, ``listenPort``) or RocketMQ name servers. Reads, writes and group
offsets all go over RocketMQ's remoting protocol.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> str | None:
    """Make ``format("brokergroup")`` available in ``spark`` (a SparkSession).

    Also picks the interpreter of the session's Python workers when none was chosen
    (:func:`brokergroup_spark.workers.choose_worker_python`: the driver's own for masters on this
    machine, ``spark.pyspark.python`` when only that is set) and returns it (None for a Spark
    Connect session, whose server starts the workers). A worker whose interpreter cannot
    import the package fails with an error naming the fix (docs/spark.md, "Where the Python
    workers run").
    """
    from brokergroup_spark.workers import GuardedDataSource, choose_worker_python

    python = choose_worker_python(spark)
    spark.dataSource.register(GuardedDataSource)
    return python
