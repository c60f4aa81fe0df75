"""JSON bodies as RocketMQ's fastjson writes them (integer and object map keys).

The dialect itself is :mod:`habroker.fastjson`; this adds the wire's own small helpers.
"""

from __future__ import annotations

from typing import Any

from habroker.fastjson import ObjectKey, dumps, loads

__all__ = ["ObjectKey", "dump_bytes", "dumps", "loads", "message_queue"]


def message_queue(topic: str, broker_name: str, queue_id: int) -> ObjectKey:
    """A MessageQueue as a map key, fields in fastjson's (alphabetical) order."""
    return ObjectKey({"brokerName": broker_name, "queueId": queue_id, "topic": topic})


def dump_bytes(value: Any) -> bytes:
    return dumps(value).encode()
