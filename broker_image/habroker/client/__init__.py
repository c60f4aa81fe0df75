"""Python client for habroker: producers and pull consumers over the HTTP API.

Addresses are the brokers' ``httpListenPort`` (default 10913), not RocketMQ's client port.

``AsyncProducer`` and ``PullConsumer`` are asyncio-native (aiohttp); ``Producer`` and
``BrokerGroupReader`` block (standard library ``http.client``) for code without an event loop.
"""

from habroker.client._protocol import BrokerAPIError, PullResult, SendResult, parse_brokers
from habroker.client.aio import AsyncProducer, PullConsumer, Receipt
from habroker.client.sync import BrokerConnection, BrokerGroupReader, Producer
from habroker.wire import OutgoingMessage

__all__ = [
    "AsyncProducer",
    "BrokerAPIError",
    "BrokerConnection",
    "BrokerGroupReader",
    "OutgoingMessage",
    "Producer",
    "PullConsumer",
    "PullResult",
    "Receipt",
    "SendResult",
    "parse_brokers",
]
