"""MQAdmin: what ``mqadmin`` does, over the same requests, for habroker and RocketMQ alike.

Every operation finds brokers the way mqadmin does — through the name server (cluster info or a
topic's route) — and talks to each group's master; nothing here depends on which broker
implementation answers.

Resetting a group's offsets (:meth:`MQAdmin.reset_offsets`) writes the new offsets on each
queue's master (UPDATE_CONSUMER_OFFSET).  That is an *offline* reset: RocketMQ's
``resetOffsetByTime`` instead asks the broker to tell running consumers to jump, and a consumer
that is running while offsets are written here keeps its own position and overwrites them at
its next commit.  Stop the group's consumers first.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from habroker import fastjson
from habroker.client.consumer import MQPullConsumer
from habroker.client.errors import MQBrokerError, MQClientError
from habroker.client.instance import ClientInstance
from habroker.client.producer import check_topic
from habroker.client.route import ClusterInfo, MessageQueue, TopicRoute
from habroker.message import MessageExt, decode_offset_msg_id, decode_records
from habroker.remoting import RequestCode, ResponseCode
from habroker.remoting.acl import SessionCredentials

log = logging.getLogger(__name__)

PERM_READ_WRITE = 6


@dataclass(frozen=True, slots=True)
class TopicQueueStats:
    """One queue's offsets (mqadmin topicStatus)."""

    message_queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A consumer group's position on one queue (mqadmin consumerProgress)."""

    message_queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def lag(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclass(frozen=True, slots=True)
class OffsetReset:
    message_queue: MessageQueue
    old_offset: int | None
    new_offset: int


def _queue(key: Any) -> MessageQueue:
    """A MessageQueue map key: an object key as fastjson writes it (or a quoted one)."""
    fields = key.as_dict() if isinstance(key, fastjson.ObjectKey) else fastjson.loads(key)
    return MessageQueue(str(fields["topic"]), str(fields["brokerName"]), int(fields["queueId"]))


class MQAdmin:
    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        timeout: float = 5.0,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("MQAdmin needs namesrv_addr or a ClientInstance")
        self._owns_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "", timeout=timeout, credentials=credentials, tls=tls
        )

    async def _json(self, address: str, code: int, header: dict[str, Any] | None = None) -> Any:
        answer = await self.instance.call(address, code, header)
        try:
            return fastjson.loads(answer.body_bytes) if answer.body_bytes else {}
        except ValueError as exc:
            raise MQClientError(
                f"{address} answered {code} with a body that is not JSON: {exc}"
            ) from None

    # -- cluster -----------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        """Every broker group the name server knows (mqadmin clusterList)."""
        return await self.instance.routes.cluster_info()

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        masters = (await self.cluster_info()).masters(cluster)
        if not masters:
            where = f"cluster {cluster!r}" if cluster else "the name server"
            raise MQClientError(f"{where} knows no broker group with a master")
        return masters

    async def broker_runtime_info(self, address: str) -> dict[str, str]:
        """A broker's runtime counters (GET_BROKER_RUNTIME_INFO; mqadmin brokerStatus)."""
        data = await self._json(address, RequestCode.GET_BROKER_RUNTIME_INFO)
        return {str(k): str(v) for k, v in (data.get("table") or {}).items()}

    # -- topics ------------------------------------------------------------------------
    async def create_topic(
        self,
        topic: str,
        queues: int = 4,
        *,
        read_queues: int | None = None,
        perm: int = PERM_READ_WRITE,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on one broker, or on every master of a cluster (all
        clusters by default); returns the addresses it was created on."""
        check_topic(topic)
        if queues < 1:
            raise ValueError(f"queues={queues}: a topic needs at least one queue")
        header = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": read_queues or queues,
            "writeQueueNums": queues,
            "perm": perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        }
        targets = [broker_addr] if broker_addr else list((await self.masters(cluster)).values())
        for address in targets:
            await self.instance.call(address, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        self.instance.routes.invalidate(topic)
        return targets

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on every master, then DELETE_TOPIC_IN_NAMESRV on every name
        server (as mqadmin deleteTopic); returns the masters it was deleted on."""
        masters = list((await self.masters(cluster)).values())
        for address in masters:
            await self.instance.call(address, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        for address in self.instance.routes.namesrv:
            if address in masters:
                continue  # a habroker group answering as its own name server: done above
            header: dict[str, Any] = {"topic": topic}
            if cluster:
                header["clusterName"] = cluster
            try:
                await self.instance.call(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, header)
            except MQClientError as exc:
                log.warning("name server %s did not drop the route of %s: %s", address, topic, exc)
        self.instance.routes.invalidate(topic)
        return masters

    async def topic_list(self) -> list[str]:
        """Every topic the name server knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
        data = await self.instance.routes.namesrv_json(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        )
        return sorted(str(t) for t in data.get("topicList") or [])

    async def topic_route(self, topic: str) -> TopicRoute:
        return await self.instance.routes.get(topic, refresh=True)

    async def topic_stats(self, topic: str) -> list[TopicQueueStats]:
        """Min/max offset of each queue on each group of the topic (GET_TOPIC_STATS_INFO)."""
        route = await self.topic_route(topic)
        out: list[TopicQueueStats] = []
        for broker in route.brokers:
            if broker.master_addr is None:
                continue
            data = await self._json(
                broker.master_addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}
            )
            for key, value in (data.get("offsetTable") or {}).items():
                out.append(
                    TopicQueueStats(
                        _queue(key),
                        int(value.get("minOffset", 0)),
                        int(value.get("maxOffset", 0)),
                        int(value.get("lastUpdateTimestamp", 0)),
                    )
                )
        return sorted(out, key=lambda s: s.message_queue)

    # -- consumer groups ---------------------------------------------------------------
    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """Broker offset, group offset and lag per queue (GET_CONSUME_STATS on each master: of
        the topic's groups, or of every group the name server knows)."""
        if topic:
            route = await self.topic_route(topic)
            addresses = [b.master_addr for b in route.brokers if b.master_addr]
        else:
            addresses = list((await self.masters()).values())
        header: dict[str, Any] = {"consumerGroup": group}
        if topic:
            header["topic"] = topic
        out: list[QueueProgress] = []
        for address in addresses:
            data = await self._json(address, RequestCode.GET_CONSUME_STATS, header)
            for key, value in (data.get("offsetTable") or {}).items():
                out.append(
                    QueueProgress(
                        _queue(key),
                        int(value.get("brokerOffset", 0)),
                        int(value.get("consumerOffset", 0)),
                        int(value.get("lastTimestamp", 0)),
                    )
                )
        return sorted(out, key=lambda p: p.message_queue)

    async def reset_offsets(self, group: str, topic: str, to: str | int) -> list[OffsetReset]:
        """Set a group's offset on every queue of a topic to ``"earliest"``, ``"latest"`` or
        the first message stored at or after a time in epoch milliseconds (offline: see the
        module docstring)."""
        if isinstance(to, str) and to not in ("earliest", "latest"):
            raise ValueError(f"to={to!r}: 'earliest', 'latest' or a time in epoch ms")
        offsets = MQPullConsumer(instance=self.instance, group=group)
        out: list[OffsetReset] = []
        for mq in (await self.topic_route(topic)).subscribe_queues():
            if to == "earliest":
                target = await offsets.min_offset(mq)
            elif to == "latest":
                target = await offsets.max_offset(mq)
            else:
                target = await offsets.search_offset(mq, int(to))
            old = await offsets.committed(mq)
            await offsets.commit_offset(mq, target)
            out.append(OffsetReset(mq, old, target))
        return out

    # -- messages ----------------------------------------------------------------------
    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offsetMsgId names, from the broker it names (VIEW_MESSAGE_BY_ID)."""
        try:
            (host, port), offset = decode_offset_msg_id(offset_msg_id.strip())
        except ValueError as exc:
            raise MQClientError(
                f"{offset_msg_id!r} is not an offsetMsgId (the broker's id: store address and "
                f"commit-log offset, 32 or 56 hex characters): {exc}"
            ) from None
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        answer = await self.instance.invoke(
            address, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}
        )
        if answer.code != ResponseCode.SUCCESS:
            raise MQBrokerError(answer.code, answer.remark, address, RequestCode.VIEW_MESSAGE_BY_ID)
        records = decode_records(answer.body_bytes)
        if not records:
            raise MQClientError(f"{address} answered VIEW_MESSAGE_BY_ID with no record")
        return records[0]

    # -- lifecycle ---------------------------------------------------------------------
    async def close(self) -> None:
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> MQAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
