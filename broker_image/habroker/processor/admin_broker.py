"""AdminBrokerProcessor: topics, groups, offsets, configuration and statistics for admin tools.

What ``mqadmin`` and RocketMQ's dashboard call, and what a slave (ours or a Java one) copies
metadata with: GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer in the shapes RocketMQ writes to its config files.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from typing import Any

from habroker import __version__
from habroker.broker import BrokerController
from habroker.config import ConfigError
from habroker.metadata import MetadataError
from habroker.processor import body
from habroker.processor.client_manager import ConsumerManager, ProducerManager
from habroker.processor.errors import REFUSALS, refusal
from habroker.processor.headers import Header
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import Channel
from habroker.remoting.command import CURRENT_VERSION
from habroker.remoting.server import RemotingServer, RequestRefused

log = logging.getLogger(__name__)

# mqadmin's clusterList prints this as the version
BROKER_VERSION_DESC = f"habroker-{__version__}"


class _Rate:
    """Messages per second between two looks, as RocketMQ's ``putTps`` strings."""

    def __init__(self) -> None:
        self.last = (time.monotonic(), 0)
        self.value = 0.0

    def sample(self, total: int) -> str:
        now = time.monotonic()
        then, before = self.last
        if now - then >= 1.0:
            self.value = max(total - before, 0) / (now - then)
            self.last = (now, total)
        v = f"{self.value:.2f}"
        return f"{v} {v} {v}"


class AdminBrokerProcessor:
    def __init__(
        self, broker: BrokerController, consumers: ConsumerManager, producers: ProducerManager
    ) -> None:
        self.broker = broker
        self.consumers = consumers
        self.producers = producers
        self.started_ms = int(time.time() * 1000)
        self._put_rate = _Rate()
        self._get_rate = _Rate()

    def register(self, server: RemotingServer) -> None:
        for code, handler in (
            (RequestCode.UPDATE_AND_CREATE_TOPIC, self.update_topic),
            (RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic),
            (RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topic_config),
            (RequestCode.GET_TOPIC_CONFIG, self.topic_config),
            (RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offset),
            (RequestCode.GET_ALL_DELAY_OFFSET, self.all_delay_offset),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_subscription_groups),
            (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_subscription_group),
            (RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_subscription_group),
            (RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info),
            (RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats),
            (RequestCode.GET_CONSUME_STATS, self.consume_stats),
            (RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections),
            (RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections),
            (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.topic_consumed_by),
            (RequestCode.GET_BROKER_CONFIG, self.broker_config),
            (RequestCode.UPDATE_BROKER_CONFIG, self.update_broker_config),
            (RequestCode.GET_MAX_OFFSET, self.max_offset),
            (RequestCode.GET_MIN_OFFSET, self.min_offset),
            (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset),
            (RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time),
            (RequestCode.VIEW_MESSAGE_BY_ID, self.view_message),
            (RequestCode.GET_BROKER_EPOCH_CACHE, self.epoch_cache),
        ):
            server.register(code, _refusing(handler))

    # -- topics ----------------------------------------------------------------------------
    def update_topic(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        topic = h.text("topic")
        self._master_only("topics are created on the master; slaves copy them")
        self.broker.create_topic(
            topic,
            h.int32("readQueueNums"),
            h.int32("writeQueueNums"),
            h.int32("perm", 6),
            order=h.flag("order"),
        )
        return request.response()

    def delete_topic(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        topic = Header(request).text("topic")
        self.broker.topics.delete(topic)
        self.broker.offsets.clean_topic(topic)
        removed = self.broker.store.delete_topic(topic)
        log.info("topic %s deleted (%d consume queues removed)", topic, removed)
        return request.response()

    def all_topic_config(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return request.response(body=body.dump_bytes(self.broker.topics.to_json()))

    def topic_config(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        topic = Header(request).text("topic")
        if self.broker.topics.get(topic) is None:
            raise RequestRefused(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}"
            )
        table = self.broker.topics.to_json()["topicConfigTable"]
        return request.response(body=body.dump_bytes(table[topic]))

    def all_consumer_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        table = {
            key: {int(q): o for q, o in sorted(queues.items())}
            for key, queues in sorted(self.broker.offsets.table.items())
        }
        return request.response(body=body.dump_bytes({"offsetTable": table}))

    def all_delay_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        return request.response(body=body.dump_bytes(self.broker.delays.to_json()))

    def epoch_cache(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        """EpochEntryCache (5.x answers it only in controller mode; habroker always: a slave
        checks its master's history with it before replicating)."""
        return request.response(body=body.dump_bytes(self.broker.replicas.entry_cache()))

    def all_subscription_groups(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        return request.response(body=body.dump_bytes(self.broker.groups.to_json()))

    def update_subscription_group(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        data = _json_body(request)
        group = str(data.pop("groupName", "") or "")
        known = {f.name for f in dataclasses.fields(type(self.broker.groups.find(group)))}
        values = {k: v for k, v in data.items() if k in known}
        self.broker.groups.update(group, values)
        return request.response()

    def delete_subscription_group(
        self, request: RemotingCommand, channel: Channel
    ) -> RemotingCommand:
        self.broker.groups.delete(Header(request).text("groupName"))
        return request.response()

    # -- statistics ------------------------------------------------------------------------
    def runtime_info(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        broker = self.broker
        store = broker.store
        stats = broker.stats
        disk = shutil.disk_usage(broker.config.commit_log_dir)
        earliest = 0
        if store.min_phy_offset < store.max_phy_offset:
            first = store.look_message_by_offset(store.min_phy_offset)
            earliest = first.store_timestamp if first is not None else 0
        table: dict[str, Any] = {
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(CURRENT_VERSION),
            "msgPutTotalYesterdayMorning": "0",
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalTodayNow": str(stats.put_messages),
            "msgGetTotalYesterdayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalTodayNow": str(stats.pull_messages),
            "putTps": self._put_rate.sample(stats.put_messages),
            "getTransferedTps": self._get_rate.sample(stats.pull_messages),
            "sendThreadPoolQueueSize": "0",
            "sendThreadPoolQueueCapacity": "10000",
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueCapacity": "100000",
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": "0",
            "dispatchBehindBytes": str(store.max_phy_offset - store.dispatched_offset),
            "earliestMessageTimeStamp": str(earliest),
            "startAcceptSendRequestTimeStamp": "0",
            "commitLogMinOffset": str(store.min_phy_offset),
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogDiskRatio": f"{(disk.used / disk.total) if disk.total else 0:.4f}",
            "commitLogDirCapacity": f"Total : {disk.total} B, Free : {disk.free} B.",
            "bootTimestamp": str(self.started_ms),
            "brokerRole": broker.role.value,
            "remainHowManyDataToFlush": f"{store.max_phy_offset - store.flushed_offset} B",
        }
        if broker.ha_service is not None:
            table["msgPutTotalTodayNow"] = str(stats.put_messages)
        return request.response(body=body.dump_bytes({"table": table}))

    def topic_stats(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        topic = Header(request).text("topic")
        cfg = self.broker.topics.get(topic)
        if cfg is None:
            raise RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.broker.store
        name = self.broker.config.brokerName
        table: dict[Any, Any] = {}
        for q in range(cfg.writeQueueNums):
            max_offset = store.max_offset_in_queue(topic, q)
            last = store.store_time_of(topic, q, max_offset - 1) if max_offset > 0 else None
            table[body.message_queue(topic, name, q)] = {
                "lastUpdateTimestamp": last or 0,
                "maxOffset": max_offset,
                "minOffset": store.min_offset_in_queue(topic, q),
            }
        return request.response(body=body.dump_bytes({"offsetTable": table}))

    def consume_stats(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        group = h.text("consumerGroup")
        only = h.opt_text("topic")
        broker = self.broker
        store = broker.store
        name = broker.config.brokerName
        topics = {
            key.partition("@")[0] for key in broker.offsets.table if key.endswith("@" + group)
        }
        info = self.consumers.groups.get(group)
        if info is not None:
            topics |= set(info.subscriptions)
        if only:
            topics &= {only}
        table: dict[Any, Any] = {}
        for topic in sorted(topics):
            cfg = broker.topics.get(topic)
            if cfg is None:
                continue
            for q in range(cfg.writeQueueNums):
                consumer = broker.offsets.query(group, topic, q)
                consumer = 0 if consumer is None else consumer
                last = store.store_time_of(topic, q, consumer - 1) if consumer > 0 else None
                table[body.message_queue(topic, name, q)] = {
                    "brokerOffset": store.max_offset_in_queue(topic, q),
                    "consumerOffset": consumer,
                    "lastTimestamp": last or 0,
                }
        return request.response(body=body.dump_bytes({"consumeTps": 0.0, "offsetTable": table}))

    def consumer_connections(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        group = Header(request).text("consumerGroup")
        info = self.consumers.groups.get(group)
        if info is None or not info.channels:
            raise RequestRefused(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        return request.response(
            body=body.dump_bytes(
                {
                    "connectionSet": [c.connection_json() for c in info.channels.values()],
                    "consumeFromWhere": info.consume_from_where,
                    "consumeType": info.consume_type,
                    "messageModel": info.message_model,
                    "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
                }
            )
        )

    def producer_connections(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        group = Header(request).text("producerGroup")
        members = self.producers.groups.get(group)
        if not members:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        return request.response(
            body=body.dump_bytes({"connectionSet": [c.connection_json() for c in members.values()]})
        )

    def topic_consumed_by(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        topic = Header(request).text("topic")
        groups = {
            key.partition("@")[2]
            for key in self.broker.offsets.table
            if key.partition("@")[0] == topic
        }
        groups |= {g for g, info in self.consumers.groups.items() if topic in info.subscriptions}
        return request.response(body=body.dump_bytes({"groupList": sorted(groups)}))

    # -- configuration ---------------------------------------------------------------------
    def broker_config(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        props = self.broker.config.to_properties()
        text = "".join(f"{k}={v}\n" for k, v in sorted(props.items()))
        version = body.dumps(self.broker.topics.data_version.to_json())
        return request.response(header={"version": version}, body=text.encode())

    def update_broker_config(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        text = request.body_bytes.decode("utf-8", "replace")
        updates: dict[str, str] = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"not key=value: {line!r}")
            updates[key.strip()] = value.strip()
        try:
            self.broker.update_config(updates)
        except ConfigError as exc:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return request.response()

    # -- offsets and messages --------------------------------------------------------------
    def max_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        return request.response(
            header={
                "offset": self.broker.store.max_offset_in_queue(h.text("topic"), h.int32("queueId"))
            }
        )

    def min_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        return request.response(
            header={
                "offset": self.broker.store.min_offset_in_queue(h.text("topic"), h.int32("queueId"))
            }
        )

    def search_offset(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        offset = self.broker.store.offset_by_time(
            h.text("topic"), h.int32("queueId"), h.int64("timestamp")
        )
        return request.response(header={"offset": offset})

    def earliest_store_time(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        h = Header(request)
        topic, queue_id = h.text("topic"), h.int32("queueId")
        store = self.broker.store
        stamp = store.store_time_of(topic, queue_id, store.min_offset_in_queue(topic, queue_id))
        return request.response(header={"timestamp": stamp if stamp is not None else -1})

    def view_message(self, request: RemotingCommand, channel: Channel) -> RemotingCommand:
        offset = Header(request).int64("offset")
        raw = self.broker.store.read_record(offset)
        if raw is None:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return request.response(body=raw)

    def _master_only(self, why: str) -> None:
        if self.broker.is_slave:
            raise RequestRefused(ResponseCode.NO_PERMISSION, f"this broker is a SLAVE: {why}")


def _json_body(request: RemotingCommand) -> dict[str, Any]:
    try:
        data = body.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"request body: {exc}") from None
    if not isinstance(data, dict):
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, "request body is not a JSON object")
    return data


def _refusing(handler: Any) -> Any:
    """Wrap a handler so broker and metadata errors are answered with their codes."""

    def run(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        try:
            result: RemotingCommand = handler(request, channel)
            return result
        except (*REFUSALS, MetadataError) as exc:
            raise refusal(exc) from None

    return run
