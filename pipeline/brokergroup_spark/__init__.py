"""PySpark data source ``brokergroup``: read and write a broker group's topics from Spark.

Register it once per session::

    from brokergroup_spark import register
    register(spark)
    spark.read.format("brokergroup").option("endpoints", "0=host:10913").option("topic", "t").load()

``endpoints`` are the brokers' HTTP API addresses (``httpListenPort``, default 10913).
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Make ``format("brokergroup")`` available in ``spark`` (a SparkSession)."""
    from brokergroup_spark.source import BrokerGroupDataSource

    spark.dataSource.register(BrokerGroupDataSource)
