"""ClientManageProcessor and ConsumerManageProcessor: heartbeats, membership and offsets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from habroker.broker import BrokerController
from habroker.metadata import PERM_READ, PERM_WRITE
from habroker.processor import body
from habroker.processor.client_manager import (
    ClientChannelInfo,
    ConsumerManager,
    ProducerManager,
    SubscriptionData,
)
from habroker.processor.errors import REFUSALS, refusal
from habroker.processor.headers import Header
from habroker.processor.send_msg_back import RETRY_GROUP_TOPIC_PREFIX
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import Channel
from habroker.remoting.server import RemotingServer, RequestRefused

log = logging.getLogger(__name__)

SCAN_INTERVAL = 10.0


class ClientManageProcessor:
    def __init__(
        self, broker: BrokerController, consumers: ConsumerManager, producers: ProducerManager
    ) -> None:
        self.broker = broker
        self.consumers = consumers
        self.producers = producers
        self._scanner: asyncio.Task[None] | None = None

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heartbeat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister_client)
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset)
        server.close_listeners.append(self.channel_closed)

    def start(self) -> None:
        self._scanner = asyncio.create_task(self._scan(), name="client-housekeeping")

    async def stop(self) -> None:
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner

    async def _scan(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL)
            for group in self.consumers.expire():
                self.consumers.notify_ids_changed(group)
            self.producers.expire()

    def channel_closed(self, channel: Channel) -> None:
        for group in self.consumers.channel_closed(channel):
            self.consumers.notify_ids_changed(group)
        self.producers.channel_closed(channel)

    # -- heartbeats ------------------------------------------------------------------------
    def heartbeat(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        try:
            data = body.loads(request.body or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"heartbeat body: {exc}") from None
        if not isinstance(data, dict):
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "heartbeat body is not an object")
        _check_heartbeat(data)
        client_id = str(data.get("clientID") or channel.remote_address)
        language = request.language.name
        for consumer in data.get("consumerDataSet") or []:
            self._register_consumer(consumer, channel, client_id, language, request.version)
        for producer in data.get("producerDataSet") or []:
            group = str(producer.get("groupName") or "")
            if group:
                self.producers.register(
                    group, ClientChannelInfo(channel, client_id, language, request.version)
                )
        return request.response()

    def _register_consumer(
        self,
        consumer: dict[str, Any],
        channel: Channel,
        client_id: str,
        language: str,
        version: int,
    ) -> None:
        group = str(consumer.get("groupName") or "")
        if not group:
            return
        subs = [
            SubscriptionData.from_json(s)
            for s in consumer.get("subscriptionDataSet") or []
            if isinstance(s, dict)
        ]
        changed = self.consumers.register(
            group,
            ClientChannelInfo(channel, client_id, language, version),
            str(consumer.get("consumeType") or "CONSUME_PASSIVELY"),
            str(consumer.get("messageModel") or "CLUSTERING"),
            str(consumer.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
            subs,
        )
        # as RocketMQ's heartBeat: a group that does not exist (autoCreateSubscriptionGroup
        # off) is registered, but gets no retry topic
        broker = self.broker
        cfg = broker.groups.find_config(group, broker.config.autoCreateSubscriptionGroup)
        if cfg is not None and not broker.is_slave:
            retry = RETRY_GROUP_TOPIC_PREFIX + group
            if broker.topics.get(retry) is None:
                n = cfg.retryQueueNums
                with contextlib.suppress(*REFUSALS):
                    broker.topics.create(retry, n, n, PERM_READ | PERM_WRITE)
        if changed and (cfg is None or cfg.notifyConsumerIdsChangedEnable):
            self.consumers.notify_ids_changed(group)

    def unregister_client(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        producer_group = h.opt_text("producerGroup")
        consumer_group = h.opt_text("consumerGroup")
        if producer_group:
            self.producers.unregister(producer_group, channel)
        if consumer_group and self.consumers.unregister(consumer_group, channel):
            self.consumers.notify_ids_changed(consumer_group)
        return request.response()

    @staticmethod
    def check_client_config(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return request.response()

    def consumer_list(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        group = Header(request).text("consumerGroup")
        info = self.consumers.groups.get(group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
            )
        return request.response(body=body.dump_bytes({"consumerIdList": info.client_ids()}))

    # -- offsets ---------------------------------------------------------------------------
    def query_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        group, topic, queue_id = h.text("consumerGroup"), h.text("topic"), h.int32("queueId")
        offset = self.broker.offsets.query(group, topic, queue_id)
        if offset is not None and offset >= 0:
            return request.response(header={"offset": offset})
        # RocketMQ 4.9: a group new to a queue whose messages all still exist starts at 0
        if self.broker.store.min_offset_in_queue(topic, queue_id) <= 0:
            return request.response(header={"offset": 0})
        return request.response(
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def update_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        try:
            self.broker.commit_offset(
                h.text("consumerGroup"),
                h.text("topic"),
                h.int32("queueId"),
                h.int64("commitOffset"),
            )
        except REFUSALS as exc:
            raise refusal(exc) from None
        return request.response()


def _objects(data: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"heartbeat body: {where}{key} is not a list of objects"
        )
    return value


def _check_heartbeat(data: dict[str, Any]) -> None:
    """The shape HeartbeatData decodes to in Java; anything else is refused before a change."""
    _objects(data, "producerDataSet", "")
    for consumer in _objects(data, "consumerDataSet", ""):
        for sub in _objects(consumer, "subscriptionDataSet", "consumerDataSet[]."):
            for key, kinds in (("topic", (str,)), ("subString", (str,)), ("subVersion", (int,))):
                value = sub.get(key)
                if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
                    raise RequestRefused(
                        ResponseCode.SYSTEM_ERROR,
                        f"heartbeat body: subscriptionDataSet[].{key} is {value!r}",
                    )
