"""MQProducer: send messages over RocketMQ's remoting protocol, as DefaultMQProducer does.

A send resolves the topic's route, picks the next write queue round-robin over every group
whose master is known, and sends SEND_MESSAGE_V2 (one message) or SEND_BATCH_MESSAGE (RocketMQ's
MessageBatch encoding, :func:`habroker.wire.encode_entry`) to that group's master.  Each message
gets a client id (``UNIQ_KEY``, :mod:`habroker.client.uniq_id`) unless it has one.  The answer's
code is the send status: FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE mean
the master stored the message but could not confirm the flush or the slave copy in time — a
:class:`SendResult`, not an error.  A broker that does not answer, or answers "busy" or
"not available", is retried on the next queue (another group when there is one) with a fresh
route, ``retry_times`` times, as RocketMQ's retryTimesWhenSendFailed.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from habroker.client.errors import (
    BrokerUnreachableError,
    MessageRejectedError,
    MQBrokerError,
    MQClientError,
    TopicNotExistError,
)
from habroker.client.instance import ClientInstance
from habroker.client.route import MessageQueue, TopicRoute
from habroker.client.uniq_id import new_uniq_id
from habroker.message import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
from habroker.remoting import RequestCode, ResponseCode
from habroker.remoting.acl import SessionCredentials
from habroker.wire import OutgoingMessage, encode_entry, encode_properties

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_TOPIC = "TBW102"  # AUTO_CREATE_TOPIC_KEY_TOPIC
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
TOPIC_MAX_LENGTH = 127
_VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_RETRY_CODES = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.TOPIC_NOT_EXIST,
    }
)


class SendStatus(StrEnum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a message (or a batch) was stored.

    ``msg_id`` is the client id (UNIQ_KEY; a batch's are comma-separated), ``offset_msg_id``
    the broker's (store address + commit-log offset; what ``message view --id`` takes), and
    ``queue_offset`` the first message's position in its queue.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    broker_address: str
    region_id: str = "DefaultRegion"

    @property
    def topic(self) -> str:
        return self.message_queue.topic

    @property
    def queue_id(self) -> int:
        return self.message_queue.queue_id

    @property
    def count(self) -> int:
        return self.msg_id.count(",") + 1


def check_topic(topic: str) -> None:
    """RocketMQ's Validators.checkTopic, so a bad name fails here and not at the broker."""
    if not topic or not topic.strip():
        raise MessageRejectedError("the topic name is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MessageRejectedError(f"topic {topic!r} is longer than {TOPIC_MAX_LENGTH} characters")
    if not _VALID_NAME.match(topic):
        raise MessageRejectedError(
            f"topic {topic!r} has characters RocketMQ does not allow (only [%|a-zA-Z0-9_-])"
        )


def _message(
    body: OutgoingMessage | bytes | bytearray | memoryview | str,
    tags: str | None = None,
    keys: str | Iterable[str] | None = None,
    properties: Mapping[str, str] | None = None,
) -> OutgoingMessage:
    if isinstance(body, OutgoingMessage):
        if tags is None and keys is None and properties is None:
            return body
        return OutgoingMessage(
            body.body,
            tags if tags is not None else body.tags,
            keys if keys is not None else body.keys,
            {**(body.properties or {}), **(properties or {})},
            body.flag,
        )
    raw = body.encode() if isinstance(body, str) else bytes(body)
    return OutgoingMessage(raw, tags, keys, properties)


class MQProducer:
    """Sends to a topic by name; brokers come from ``namesrv_addr`` (or a shared instance)."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        group: str = DEFAULT_PRODUCER_GROUP,
        *,
        instance: ClientInstance | None = None,
        send_timeout: float = 3.0,
        retry_times: int = 2,
        max_message_size: int = MAX_MESSAGE_SIZE,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("MQProducer needs namesrv_addr or a ClientInstance")
        self.group = group
        self._owns_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "", timeout=send_timeout, credentials=credentials, tls=tls
        )
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.max_message_size = max_message_size
        self._next: dict[str, itertools.count[int]] = {}
        self._started = False

    async def start(self) -> MQProducer:
        if not self._started:
            self._started = True
            self.instance.register_producer(self.group)
        return self

    # -- sending -----------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        body: OutgoingMessage | bytes | bytearray | memoryview | str,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue: MessageQueue | int | None = None,
        delay_level: int = 0,
        wait_store_msg_ok: bool = True,
    ) -> SendResult:
        """One message (SEND_MESSAGE_V2).  ``delay_level`` (1-18: 1s 5s 10s 30s 1m … 2h, the
        broker's messageDelayLevel) delivers it that much later, as setDelayTimeLevel does."""
        msg = _message(body, tags, keys, properties)
        check_topic(topic)
        self._check_body(msg.body)
        props = self._properties(msg)
        uniq = props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        if delay_level < 0:
            raise MessageRejectedError(f"delay_level={delay_level}: must be >= 0")
        if delay_level:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        if not wait_store_msg_ok:
            props["WAIT"] = "false"
        header = self._header(topic, msg.flag, _encode(props).decode(), batch=False)
        return await self._send(topic, RequestCode.SEND_MESSAGE_V2, header, msg.body, queue, uniq)

    async def send_batch(
        self,
        topic: str,
        messages: Iterable[OutgoingMessage | bytes | bytearray | memoryview | str],
        *,
        queue: MessageQueue | int | None = None,
    ) -> SendResult:
        """Several messages in one request (SEND_BATCH_MESSAGE), stored together in one queue."""
        check_topic(topic)
        entries: list[bytes] = []
        ids: list[str] = []
        for item in messages:
            msg = _message(item)
            self._check_body(msg.body)
            props = self._properties(msg)
            if props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
                raise MessageRejectedError(
                    "a batch cannot hold delayed messages (RocketMQ refuses them); send them alone"
                )
            ids.append(props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            entries.append(encode_entry(msg.body, _encode(props), msg.flag))
        if not entries:
            raise MessageRejectedError("a batch needs at least one message")
        body = b"".join(entries)
        if len(body) > self.max_message_size:
            raise MessageRejectedError(
                f"the batch is {len(body)} bytes, over maxMessageSize={self.max_message_size}; "
                "send it in smaller batches"
            )
        header = self._header(topic, 0, None, batch=True)
        return await self._send(
            topic, RequestCode.SEND_BATCH_MESSAGE, header, body, queue, ",".join(ids)
        )

    def _check_body(self, body: bytes) -> None:
        if not body:
            raise MessageRejectedError("the message body is empty (RocketMQ refuses those)")
        if len(body) > self.max_message_size:
            raise MessageRejectedError(
                f"the message body is {len(body)} bytes, over maxMessageSize="
                f"{self.max_message_size}"
            )

    @staticmethod
    def _properties(msg: OutgoingMessage) -> dict[str, str]:
        props = {k: v for k, v in (msg.properties or {}).items()}
        if msg.tags:
            props["TAGS"] = msg.tags
        if msg.keys:
            props["KEYS"] = msg.keys if isinstance(msg.keys, str) else " ".join(msg.keys)
        if not props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = new_uniq_id()
        return props

    def _header(
        self, topic: str, flag: int, properties: str | None, *, batch: bool
    ) -> dict[str, object]:
        # SendMessageRequestHeaderV2: the same fields as SEND_MESSAGE under one-letter names
        return {
            "a": self.group,
            "b": topic,
            "c": DEFAULT_TOPIC,
            "d": 4,
            "e": -1,
            "f": 0,
            "g": time.time_ns() // 1_000_000,
            "h": flag,
            "i": properties or None,
            "j": 0,
            "k": False,
            "m": batch,
        }

    async def _send(
        self,
        topic: str,
        code: int,
        header: dict[str, object],
        body: bytes,
        queue: MessageQueue | int | None,
        uniq: str,
    ) -> SendResult:
        await self.start()
        last_error: MQClientError | None = None
        avoid: str | None = None
        for attempt in range(self.retry_times + 1):
            route = await self.instance.routes.get(topic, refresh=attempt > 0)
            mq = self._select(route, queue, avoid)
            address = self.instance.routes.master_address(mq.broker_name)
            if address is None:
                raise MQClientError(f"broker group {mq.broker_name} of {topic!r} has no master")
            header["e"] = mq.queue_id
            try:
                answer = await self.instance.invoke(
                    address, code, header, body, timeout=self.send_timeout
                )
            except BrokerUnreachableError as exc:
                last_error, avoid = exc, mq.broker_name
                log.info("send to %s failed (attempt %d): %s", address, attempt + 1, exc)
                continue
            status = _STATUS_BY_CODE.get(answer.code)
            if status is None:
                error = MQBrokerError(answer.code, answer.remark, address, code)
                if answer.code in _RETRY_CODES and attempt < self.retry_times:
                    last_error, avoid = error, mq.broker_name
                    continue
                if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                    self.instance.routes.invalidate(topic)
                    raise TopicNotExistError(topic, f"broker {address}") from None
                raise error
            ext = answer.ext_fields
            return SendResult(
                status,
                uniq,
                ext.get("msgId", ""),
                MessageQueue(topic, mq.broker_name, int(ext.get("queueId", mq.queue_id))),
                int(ext.get("queueOffset", -1)),
                address,
                ext.get("MSG_REGION") or "DefaultRegion",
            )
        assert last_error is not None
        raise last_error

    def _select(
        self, route: TopicRoute, queue: MessageQueue | int | None, avoid: str | None
    ) -> MessageQueue:
        queues = route.publish_queues()
        if not queues:
            raise MQClientError(
                f"topic {route.topic!r} has no writable queue on a group with a master "
                f"(route: {[q.broker_name for q in route.queues]})"
            )
        if isinstance(queue, MessageQueue):
            return queue
        if queue is not None and queue >= 0:
            for mq in queues:
                if mq.queue_id == queue:
                    return mq
            raise MQClientError(
                f"topic {route.topic!r} has no write queue {queue} "
                f"(its write queues are 0..{max(q.queue_id for q in queues)})"
            )
        counter = self._next.get(route.topic)
        if counter is None:
            counter = self._next[route.topic] = itertools.count(random.randrange(len(queues)))
        for _ in range(len(queues)):
            mq = queues[next(counter) % len(queues)]
            if mq.broker_name != avoid:
                return mq
        return queues[next(counter) % len(queues)]

    # -- lifecycle ---------------------------------------------------------------------
    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.instance.unregister(producer_group=self.group)
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> MQProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _encode(props: Mapping[str, str]) -> bytes:
    try:
        return encode_properties(props)
    except ValueError as exc:
        raise MessageRejectedError(str(exc)) from None
