"""Python clients for habroker: RocketMQ's remoting protocol, and the HTTP API.

**Remoting** (RocketMQ's own protocol on ``listenPort``; works against habroker and against Java
RocketMQ brokers and name servers alike).  Brokers are found through ``namesrv_addr`` — one or
more ``host:port`` separated by ``;``: any broker of a habroker group, or a RocketMQ name server:

* :class:`MQProducer` — send one message or a batch; :class:`SendResult` says where it went.
* :class:`MQPullConsumer` — ``pull`` a queue at an offset, or ``assign`` queues and ``poll``
  with long polling, following ``suggestWhichBrokerId`` to slaves and back; group offsets.
* :class:`MQAdmin` — topics, routes, stats, cluster, consumer progress, offset reset, view a
  message by its offsetMsgId.
* :class:`ClientInstance` — the connections, route cache and heartbeats these share.
* :class:`SyncMQProducer`, :class:`SyncMQPullConsumer`, :class:`SyncMQAdmin` — blocking facades.

**HTTP API** (addresses are the brokers' ``httpListenPort``, default 10913; what the operator
and older scripts use): :class:`AsyncProducer` and :class:`PullConsumer` (asyncio,
aiohttp), :class:`Producer`, :class:`BrokerGroupReader` and :class:`BrokerConnection`
(blocking); their results are :class:`HttpSendResult` / :class:`HttpPullResult` and their errors
:class:`BrokerAPIError`.
"""

from habroker.client._protocol import BrokerAPIError, parse_brokers
from habroker.client._protocol import PullResult as HttpPullResult
from habroker.client._protocol import SendResult as HttpSendResult
from habroker.client.admin import MQAdmin, OffsetReset, QueueProgress, TopicQueueStats
from habroker.client.aio import AsyncProducer, PullConsumer, Receipt
from habroker.client.blocking import SyncMQAdmin, SyncMQProducer, SyncMQPullConsumer
from habroker.client.consumer import MQPullConsumer, PolledBatch, PullResult, PullStatus
from habroker.client.errors import (
    BrokerUnreachableError,
    MessageRejectedError,
    MQBrokerError,
    MQClientError,
    NameServerUnreachableError,
    TopicNotExistError,
)
from habroker.client.instance import ClientInstance
from habroker.client.producer import MQProducer, SendResult, SendStatus
from habroker.client.route import ClusterInfo, MessageQueue, TopicRoute, TopicRouteCache
from habroker.client.sync import BrokerConnection, BrokerGroupReader, Producer
from habroker.remoting.acl import SessionCredentials
from habroker.wire import OutgoingMessage

__all__ = [
    "AsyncProducer",
    "BrokerAPIError",
    "BrokerConnection",
    "BrokerGroupReader",
    "BrokerUnreachableError",
    "ClientInstance",
    "ClusterInfo",
    "HttpPullResult",
    "HttpSendResult",
    "MQAdmin",
    "MQBrokerError",
    "MQClientError",
    "MQProducer",
    "MQPullConsumer",
    "MessageQueue",
    "MessageRejectedError",
    "NameServerUnreachableError",
    "OffsetReset",
    "OutgoingMessage",
    "PolledBatch",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "QueueProgress",
    "Receipt",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "SyncMQAdmin",
    "SyncMQProducer",
    "SyncMQPullConsumer",
    "TopicNotExistError",
    "TopicQueueStats",
    "TopicRoute",
    "TopicRouteCache",
    "parse_brokers",
]
