"""SendMessageProcessor: SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

A single send carries its message in the custom header (properties string) and the body; a
batch carries RocketMQ's MessageBatch encoding as the body.  Both become one store put and wait
exactly as the HTTP face's produce does (SYNC_FLUSH, SYNC_MASTER); the put status maps onto
the response codes a Java producer expects (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
SLAVE_NOT_AVAILABLE are successes with a warning, not errors).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from habroker.broker import BrokerController, PendingPut, PutOptions
from habroker.dledger.protocol import Body
from habroker.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    TRANSACTION_TYPE_MASK,
    decode_properties,
    encode_properties,
    joined_offset_msg_ids,
)
from habroker.metadata import PERM_WRITE
from habroker.processor.errors import REFUSALS, refusal
from habroker.processor.headers import INT32, INT64, Header
from habroker.processor.send_msg_back import RETRY_GROUP_TOPIC_PREFIX, RetryPolicy
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import Channel
from habroker.remoting.server import AnswerLater, RemotingServer, RequestRefused
from habroker.store import BatchEntry, PutResult, PutStatus
from habroker.wire import BadBatch, decode_batch

log = logging.getLogger(__name__)

PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_WAIT = "WAIT"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"

_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}

_INT32_MIN, _INT32_MAX = INT32
_INT64_MIN, _INT64_MAX = INT64

# SendMessageRequestHeaderV2's one-letter names
_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}


@dataclass(slots=True)
class SendHeader:
    producer_group: str
    topic: str
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool
    default_topic: str | None  # the template of a topic created by this send (TBW102)
    default_topic_queue_nums: int | None  # an auto-created topic's queues (capped by it)

    @classmethod
    def decode(cls, request: RemotingCommand) -> SendHeader:
        fields = request.ext_fields
        if request.code != RequestCode.SEND_MESSAGE and "b" in fields:
            fast = cls._decode_v2(request.code, fields)
            if fast is not None:
                return fast
            fields = {_V2_NAMES.get(k, k): v for k, v in fields.items()}
            request = RemotingCommand(request.code, ext_fields=fields)
        h = Header(request)
        return cls(
            producer_group=h.text("producerGroup"),
            topic=h.text("topic"),
            queue_id=h.int32("queueId"),
            sys_flag=h.int32("sysFlag"),
            born_timestamp=h.int64("bornTimestamp"),
            flag=h.int32("flag"),
            properties=h.opt_text("properties") or "",
            reconsume_times=h.int32("reconsumeTimes", 0),
            max_reconsume_times=h.opt_int32("maxReconsumeTimes"),
            batch=h.flag("batch") or request.code == RequestCode.SEND_BATCH_MESSAGE,
            default_topic=h.opt_text("defaultTopic"),
            default_topic_queue_nums=h.opt_int32("defaultTopicQueueNums"),
        )

    @classmethod
    def _decode_v2(cls, code: int, f: dict[str, str]) -> SendHeader | None:
        """A SendMessageRequestHeaderV2 as every producer writes it, read without the checked
        path's renaming and one call a field (a few µs a request on the client port); None
        for anything else (a missing field, an empty or bad number), which the checked path
        then refuses or reads with its defaults exactly as before."""
        try:
            queue_id, sys_flag, flag = int(f["e"]), int(f["f"]), int(f["h"])
            born = int(f["g"])
            reconsume = int(f["j"]) if "j" in f else 0
            max_reconsume = int(f["l"]) if "l" in f else None
            queue_nums = int(f["d"]) if "d" in f else None
        except (KeyError, ValueError):
            return None
        if not (
            _INT32_MIN <= queue_id <= _INT32_MAX
            and _INT32_MIN <= sys_flag <= _INT32_MAX
            and _INT32_MIN <= flag <= _INT32_MAX
            and _INT32_MIN <= reconsume <= _INT32_MAX
            and _INT64_MIN <= born <= _INT64_MAX
            and (max_reconsume is None or _INT32_MIN <= max_reconsume <= _INT32_MAX)
            and (queue_nums is None or _INT32_MIN <= queue_nums <= _INT32_MAX)
        ):
            return None
        group, topic = f.get("a"), f["b"]
        if group is None:
            return None
        batch = f.get("m")
        return cls(
            producer_group=group,
            topic=topic,
            queue_id=queue_id,
            sys_flag=sys_flag,
            born_timestamp=born,
            flag=flag,
            properties=f.get("i") or "",
            reconsume_times=reconsume,
            max_reconsume_times=max_reconsume,
            batch=(batch is not None and batch.strip().lower() == "true")
            or code == RequestCode.SEND_BATCH_MESSAGE,
            default_topic=f.get("c"),
            default_topic_queue_nums=queue_nums,
        )


@dataclass(slots=True)
class _Put:
    """A send request decoded into the broker's put arguments."""

    topic: str
    queue_id: int | None
    entries: Sequence[BatchEntry]
    born_host: tuple[str, int]
    options: PutOptions


class SendMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.retry = RetryPolicy(broker)

    def register(self, server: RemotingServer) -> None:
        for code in (
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE,
        ):
            server.register(code, self.process)

    def process(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand | AnswerLater[Any] | Awaitable[RemotingCommand]:
        """The put runs as the frame is read; the answer comes at once, or from the ack's
        done callback (``AnswerLater``: a SYNC slave's status, a DLedger quorum's answer), with
        no task per request. Only SYNC_FLUSH puts await in a task (the flush, then the ack)."""
        broker = self.broker
        try:
            put = self._decode(request, channel)
            pending = broker.put_now(
                put.topic, put.queue_id, put.entries, put.born_host, **put.options
            )
        except BadBatch as exc:
            raise RequestRefused(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
        except REFUSALS as exc:
            raise refusal(exc) from None
        if pending.flush_first:
            return self._flush_then_answer(request, put, pending)
        if pending.ack is None:
            return self._acked(request, put, pending, None)
        return AnswerLater(pending.ack, partial(self._acked, request, put, pending))

    def _acked(
        self,
        request: RemotingCommand,
        put: _Put,
        pending: PendingPut,
        outcome: PutStatus | Body | None,
    ) -> RemotingCommand:
        result = self.broker.put_done(pending, outcome)
        return self._response(request, put, result, pending.queue_id)

    async def _flush_then_answer(
        self, request: RemotingCommand, put: _Put, pending: PendingPut
    ) -> RemotingCommand:
        await self.broker.flush_then_wait(pending)
        outcome = await pending.ack if pending.ack is not None else None
        return self._acked(request, put, pending, outcome)

    def _decode(self, request: RemotingCommand, channel: Channel) -> _Put:
        """The request as a put: its checks (RocketMQ's msgCheck and friends) and entries."""
        header = SendHeader.decode(request)
        broker = self.broker
        topic = header.topic
        if header.sys_flag & TRANSACTION_TYPE_MASK:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION,
                "transactional messages are not supported by habroker (sysFlag "
                f"{header.sys_flag:#x}); see docs/remoting.md",
            )
        props = decode_properties(header.properties.encode()) if header.properties else {}
        if props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
            raise RequestRefused(
                ResponseCode.NO_PERMISSION,
                "transactional messages (TRAN_MSG) are not supported by habroker",
            )
        cfg = broker.config
        if not cfg.brokerPermission & PERM_WRITE:
            # RocketMQ's msgCheck refuses only order topics: routes already steer other sends
            # away (they lose write permission), and one in flight may still land
            topic_cfg = broker.topics.get(topic)
            if topic_cfg is not None and topic_cfg.order:
                raise RequestRefused(
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{cfg.brokerIP1}] sending message is forbidden",
                )
        queue_id: int | None = header.queue_id
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            topic, queue_id = self.retry.retry_or_dlq(
                topic,
                header.queue_id,
                header.reconsume_times,
                header.max_reconsume_times,
                request.version,
            )
        if header.batch:
            self._check_batch_delay(props)
        wait = props.pop(PROPERTY_WAIT, "true").lower() != "false"
        if header.batch:
            entries = decode_batch(request.body_bytes)
        else:
            props[PROPERTY_CLUSTER] = broker.config.brokerClusterName
            entries = [BatchEntry(header.flag, request.body_bytes, encode_properties(props))]
        return _Put(
            topic,
            queue_id if queue_id is not None and queue_id >= 0 else None,
            entries,
            _host_port(channel.remote_address),
            {
                "born_timestamp": header.born_timestamp,
                "sys_flag": header.sys_flag,
                "reconsume_times": header.reconsume_times,
                "wait": wait,
                "delay": not header.batch,
                "default_queue_nums": header.default_topic_queue_nums,
                "default_topic": header.default_topic or None,
            },
        )

    def _response(
        self, request: RemotingCommand, put: _Put, result: PutResult, used_queue: int
    ) -> RemotingCommand:
        if len(put.entries) > 1:
            msg_id = joined_offset_msg_ids(
                self.broker.store_host, result.record_offsets or (result.wrote_offset,)
            )
        else:
            msg_id = result.msg_id
        return request.response(
            _STATUS_CODES[result.status],
            None,
            {
                "msgId": msg_id,
                "queueId": used_queue,
                "queueOffset": result.queue_offset,
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    @staticmethod
    def _check_batch_delay(props: dict[str, str]) -> None:
        """RocketMQ refuses a batch whose own properties ask for a delay."""
        try:
            level = int(props.get(PROPERTY_DELAY_TIME_LEVEL, "0"))
        except ValueError:
            return
        if level > 0:
            raise RequestRefused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"a batch cannot be delayed (DELAY={level}); send delayed messages one by one",
            )


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return "127.0.0.1", 0
    return host.strip("[]"), int(port)
