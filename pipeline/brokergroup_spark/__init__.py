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


def register(spark: Any) -> None:
    """Make ``format("brokergroup")`` available in ``spark`` (a SparkSession)."""
    from brokergroup_spark.source import BrokerGroupDataSource

    spark.dataSource.register(BrokerGroupDataSource)
