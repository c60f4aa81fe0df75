"""ConsumerManager and ProducerManager: who is connected, in which group, subscribed to what.

Filled by HEART_BEAT, emptied by UNREGISTER_CLIENT, a closed channel or two minutes of silence
(RocketMQ's channelExpiredTimeout).  The pull processor reads subscriptions from here when a
consumer does not post its own, and consumers of a group are told when its members change so
they rebalance at once instead of at their next 20-second round.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from habroker.message import tags_code
from habroker.remoting import RemotingCommand, RequestCode
from habroker.remoting.channel import Channel

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_SECONDS = 120.0
SUB_ALL = "*"


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    expression_type: str = "TAG"
    tags: list[str] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    sub_version: int = 0

    @classmethod
    def build(
        cls, topic: str, expression: str | None, expression_type: str = "TAG"
    ) -> SubscriptionData:
        """RocketMQ's FilterAPI: ``*`` (or empty) is everything, else tags joined by ``||``."""
        text = (expression or "").strip()
        if not text or text == SUB_ALL:
            return cls(topic, SUB_ALL, expression_type or "TAG")
        tags = [t.strip() for t in text.split("||") if t.strip()]
        return cls(
            topic,
            text,
            expression_type or "TAG",
            tags,
            [tags_code(t) for t in tags],
            time.time_ns() // 1_000_000,
        )

    @property
    def matches_all(self) -> bool:
        return self.sub_string == SUB_ALL or not self.codes

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": self.codes,
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionData:
        sub = cls.build(
            str(data.get("topic", "")),
            data.get("subString"),
            str(data.get("expressionType") or "TAG"),
        )
        sub.sub_version = int(data.get("subVersion") or 0)
        return sub


@dataclass(slots=True)
class ClientChannelInfo:
    channel: Channel
    client_id: str
    language: str
    version: int
    last_update: float = field(default_factory=time.monotonic)

    def connection_json(self) -> dict[str, Any]:
        return {
            "clientAddr": self.channel.remote_address,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Channel, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: list[SubscriptionData],
    ) -> bool:
        """Record a heartbeat; True when the group's membership changed."""
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = ConsumerGroupInfo(group)
        g.consume_type = consume_type
        g.message_model = message_model
        g.consume_from_where = consume_from_where
        old = g.channels.get(info.channel)
        changed = old is None or old.client_id != info.client_id
        g.channels[info.channel] = info
        fresh = {s.topic: s for s in subscriptions}
        for topic, sub in fresh.items():
            current = g.subscriptions.get(topic)
            if current is None or current.sub_string != sub.sub_string:
                g.subscriptions[topic] = sub
            elif sub.sub_version > current.sub_version:
                current.sub_version = sub.sub_version
        for topic in list(g.subscriptions):
            if topic not in fresh:
                del g.subscriptions[topic]
        if changed:
            log.info(
                "consumer %s joined group %s from %s",
                info.client_id,
                group,
                info.channel.remote_address,
            )
        return changed

    def unregister(self, group: str, channel: Channel) -> bool:
        g = self.groups.get(group)
        if g is None or channel not in g.channels:
            return False
        info = g.channels.pop(channel)
        log.info("consumer %s left group %s", info.client_id, group)
        if not g.channels:
            del self.groups[group]
        return True

    def channel_closed(self, channel: Channel) -> list[str]:
        """Forget a closed channel; returns the groups it was in."""
        return [group for group in list(self.groups) if self.unregister(group, channel)]

    def expire(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        changed: list[str] = []
        for group, g in list(self.groups.items()):
            for channel, info in list(g.channels.items()):
                if now - info.last_update > CHANNEL_EXPIRED_SECONDS:
                    log.warning(
                        "consumer %s of group %s sent no heartbeat for %.0fs; dropped",
                        info.client_id,
                        group,
                        now - info.last_update,
                    )
                    self.unregister(group, channel)
                    channel.close()
                    changed.append(group)
        return changed

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        g = self.groups.get(group)
        return g.subscriptions.get(topic) if g else None

    def notify_ids_changed(self, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED, one-way, to every consumer of the group."""
        g = self.groups.get(group)
        if g is None:
            return
        for channel in list(g.channels):
            channel.send_oneway(
                RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}
                )
            )


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[Channel, ClientChannelInfo]] = {}

    def register(self, group: str, info: ClientChannelInfo) -> None:
        self.groups.setdefault(group, {})[info.channel] = info

    def unregister(self, group: str, channel: Channel) -> None:
        members = self.groups.get(group)
        if members is not None:
            members.pop(channel, None)
            if not members:
                del self.groups[group]

    def channel_closed(self, channel: Channel) -> None:
        for group in list(self.groups):
            self.unregister(group, channel)

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for group, members in list(self.groups.items()):
            for channel, info in list(members.items()):
                if now - info.last_update > CHANNEL_EXPIRED_SECONDS:
                    self.unregister(group, channel)
