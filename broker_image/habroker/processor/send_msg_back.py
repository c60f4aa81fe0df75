"""CONSUMER_SEND_MSG_BACK and the %RETRY% / %DLQ% rules: what happens to a message a consumer
failed to consume.

A push consumer that answers RECONSUME_LATER sends the message back by its commit-log offset.
As RocketMQ 4.9.7 (SendMessageProcessor.asyncConsumerSendMsgBack): the broker reads the stored
message and puts a copy for ``%RETRY%<group>`` through a delay level (``3 + reconsumeTimes``
unless the consumer named one), with reconsumeTimes + 1, the first topic in RETRY_TOPIC and the
first message id in ORIGIN_MESSAGE_ID.  Once reconsumeTimes reaches maxReconsumeTimes (the
request's, else the group's retryMaxTimes), or when the consumer asks for a negative level, the
copy goes to ``%DLQ%<group>`` (one queue) at once.  The group's consumers subscribe to their
retry topic, so the delayed copy comes back to them; nobody consumes a DLQ unless told to.

The same rules apply when a client resends to ``%RETRY%<group>`` itself (its fallback when the
send-back request fails): :meth:`RetryPolicy.retry_or_dlq`.
"""

from __future__ import annotations

import logging
import random

from habroker.broker import BrokerController, BrokerError
from habroker.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
    encode_properties,
)
from habroker.metadata import (
    PERM_READ,
    PERM_WRITE,
    MetadataError,
    SubscriptionGroupConfig,
    TopicConfig,
)
from habroker.processor.errors import REFUSALS
from habroker.processor.headers import Header
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import Channel
from habroker.remoting.server import RemotingServer, RequestRefused
from habroker.store import BatchEntry

log = logging.getLogger(__name__)

# MixAll's names
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
DLQ_NUMS_PER_GROUP = 1
# MQVersion.Version.V3_4_9.ordinal(): clients from here on send maxReconsumeTimes
V3_4_9 = 121
# a message failed n times comes back after delay level 3 + n (10 s, 30 s, 1 m ... by default)
FIRST_RETRY_DELAY_LEVEL = 3


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


class RetryPolicy:
    """The group lookups and topic creation both retry paths share."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def find_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's config (SubscriptionGroupManager.find_config), or the send-back's
        refusal."""
        broker = self.broker
        found = broker.groups.find_config(group, broker.config.autoCreateSubscriptionGroup)
        if found is not None:
            return found
        raise RequestRefused(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"subscription group not exist, {group} (autoCreateSubscriptionGroup=false: "
            "create it with UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)",
        )

    @staticmethod
    def max_reconsume_times(
        group: SubscriptionGroupConfig, requested: int | None, version: int
    ) -> int:
        """The request's maxReconsumeTimes (clients since 3.4.9 send it), else the group's."""
        if requested is not None and version >= V3_4_9:
            return requested
        return group.retryMaxTimes

    def ensure_topic(self, topic: str, queue_nums: int) -> TopicConfig:
        """RocketMQ's createTopicInSendMessageBackMethod: the topic as it is, else a new one
        with ``queue_nums`` read and write queues, perm read+write."""
        broker = self.broker
        found = broker.topics.get(topic)
        if found is not None:
            return found
        if broker.is_slave:
            raise BrokerError("not_master", "this broker is a SLAVE: retries go to the master")
        try:
            created, _ = broker.topics.create(topic, queue_nums, queue_nums, PERM_READ | PERM_WRITE)
        except MetadataError as exc:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"topic[{topic}] not exist: {exc}"
            ) from None
        return created

    def retry_or_dlq(
        self,
        topic: str,
        queue_id: int,
        reconsume_times: int,
        max_reconsume_times: int | None,
        version: int,
    ) -> tuple[str, int]:
        """A send to ``%RETRY%group``: the topic and queue it is stored in (RocketMQ's
        handleRetryAndDLQ).  Past maxReconsumeTimes that is ``%DLQ%group`` queue 0; the
        message keeps its own DELAY there, as RocketMQ 4.9.7's send path does."""
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group_cfg = self.find_group(group)
        if reconsume_times >= self.max_reconsume_times(group_cfg, max_reconsume_times, version):
            dlq = dlq_topic(group)
            self.ensure_topic(dlq, DLQ_NUMS_PER_GROUP)
            return dlq, random.randrange(DLQ_NUMS_PER_GROUP)
        self.ensure_topic(topic, max(group_cfg.retryQueueNums, 1))
        return topic, queue_id


class ConsumerSendMsgBackProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.policy = RetryPolicy(broker)
        self.sent_back = 0
        self.to_dlq = 0

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.process)

    async def process(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        offset = h.int64("offset")
        group = h.text("group")
        delay_level = h.int32("delayLevel")
        requested_max = h.opt_int32("maxReconsumeTimes")
        broker = self.broker
        policy = self.policy
        group_cfg = policy.find_group(group)
        if not broker.config.brokerPermission & PERM_WRITE:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.brokerIP1}] sending message is forbidden",
            )
        if group_cfg.retryQueueNums <= 0:
            return request.response()  # the group wants no retries: dropped, as RocketMQ does
        if broker.is_slave:
            # RocketMQ's put on a slave fails with SERVICE_NOT_AVAILABLE, answered as SYSTEM_ERROR
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                "SERVICE_NOT_AVAILABLE: this broker is a SLAVE; send messages back to the master",
            )
        topic = retry_topic(group)
        queue_id = random.randrange(group_cfg.retryQueueNums)
        try:
            topic_cfg = policy.ensure_topic(topic, group_cfg.retryQueueNums)
        except BrokerError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        if not topic_cfg.writable:
            raise RequestRefused(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
            )
        msg = (
            broker.store.look_message_by_offset(offset, decompress_body=False)
            if offset >= 0
            else None
        )
        if msg is None:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}"
            )
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        max_times = policy.max_reconsume_times(group_cfg, requested_max, request.version)
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = dlq_topic(group)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            policy.ensure_topic(topic, DLQ_NUMS_PER_GROUP)
            props[PROPERTY_DELAY_TIME_LEVEL] = "0"
        else:
            if delay_level == 0:
                delay_level = FIRST_RETRY_DELAY_LEVEL + msg.reconsume_times
            props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        if not props.get(PROPERTY_ORIGIN_MESSAGE_ID):
            props[PROPERTY_ORIGIN_MESSAGE_ID] = msg.msg_id
        try:
            result, used_queue = await broker.produce(
                topic,
                queue_id,
                [BatchEntry(msg.flag, msg.body, encode_properties(props))],
                msg.born_host,
                born_timestamp=msg.born_timestamp,
                sys_flag=msg.sys_flag,
                reconsume_times=msg.reconsume_times + 1,
                wait=False,
                delay=True,
            )
        except REFUSALS as exc:
            # RocketMQ answers a failed put here with SYSTEM_ERROR and the status as remark
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            self.to_dlq += 1
            log.info(
                "group %s: message %s (%s) failed %d times; moved to %s",
                group,
                props[PROPERTY_ORIGIN_MESSAGE_ID],
                props[PROPERTY_RETRY_TOPIC],
                msg.reconsume_times + 1,
                topic,
            )
        else:
            self.sent_back += 1
            log.debug(
                "group %s: message at %d back to %s/%d (delay level %d, at %d)",
                group,
                offset,
                topic,
                used_queue,
                delay_level,
                result.wrote_offset,
            )
        return request.response()
