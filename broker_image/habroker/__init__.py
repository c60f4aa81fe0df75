"""habroker: a RocketMQ-compatible replication broker (commit log, consume queues, classic HA)."""

__version__ = "0.1.0"
