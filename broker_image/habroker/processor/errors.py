"""The broker's refusals as remoting response codes (what a Java broker answers in each case)."""

from __future__ import annotations

from habroker.broker import BrokerError
from habroker.metadata import MetadataError
from habroker.remoting import ResponseCode
from habroker.remoting.server import RequestRefused
from habroker.store import InvalidTopic, MessageTooLarge, PropertiesTooLarge, StoreError
from habroker.store import StoreNotWritable as _NotWritable

_BROKER_CODES = {
    "unknown_topic": ResponseCode.TOPIC_NOT_EXIST,
    "not_master": ResponseCode.SERVICE_NOT_AVAILABLE,
    "fenced": ResponseCode.SERVICE_NOT_AVAILABLE,
    "topic_not_writable": ResponseCode.NO_PERMISSION,
    "topic_not_readable": ResponseCode.NO_PERMISSION,
    "broker_not_readable": ResponseCode.NO_PERMISSION,
    "unknown_group": ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    "bad_group": ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    "group_not_consumable": ResponseCode.NO_PERMISSION,
}


def refusal(exc: Exception) -> RequestRefused:
    """Translate a broker, metadata or store error; anything else is not a refusal."""
    if isinstance(exc, RequestRefused):
        return exc
    if isinstance(exc, BrokerError):
        return RequestRefused(_BROKER_CODES.get(exc.code, ResponseCode.SYSTEM_ERROR), str(exc))
    if isinstance(exc, MessageTooLarge | PropertiesTooLarge):
        return RequestRefused(ResponseCode.MESSAGE_ILLEGAL, str(exc))
    if isinstance(exc, _NotWritable):
        return RequestRefused(ResponseCode.SERVICE_NOT_AVAILABLE, str(exc))
    if isinstance(exc, InvalidTopic | MetadataError | StoreError):
        return RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc))
    raise TypeError(f"not a refusal: {exc!r}")


REFUSALS = (BrokerError, MetadataError, StoreError, RequestRefused)
