"""ClientInstance: the connections, routes and heartbeats a process's producers, consumers and
admin share (RocketMQ's MQClientInstance).

One :class:`~habroker.remoting.client.RemotingClient` (a channel per broker address), one
:class:`~habroker.client.route.TopicRouteCache`, one client id, and the heartbeat every 30
seconds that tells brokers which producer and consumer groups this process belongs to (a
broker lists them for admin tools and rebalances consumer groups by them).  Requests that
brokers send to clients are answered REQUEST_CODE_NOT_SUPPORTED except the one-way ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from habroker.client.errors import BrokerUnreachableError, MQBrokerError
from habroker.client.route import MASTER_ID, TopicRouteCache
from habroker.message import tags_code
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.acl import SessionCredentials, rpc_hook
from habroker.remoting.channel import Channel, RemotingError
from habroker.remoting.client import RemotingClient
from habroker.remoting.command import Body, SerializeType

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 30.0  # heartbeatBrokerInterval
DEFAULT_TIMEOUT = 3.0  # mqClientApiTimeout
UNREGISTER_TIMEOUT = 2.0
SUB_ALL = "*"


def local_ip() -> str:
    """This host's address as routes and ids name it (the host name's address), or loopback."""
    with contextlib.suppress(OSError):
        return socket.gethostbyname(socket.gethostname())
    return "127.0.0.1"


def subscription_json(topic: str, expression: str | None) -> dict[str, Any]:
    """RocketMQ's SubscriptionData for a TAG expression (``*`` or ``a || b``)."""
    text = (expression or "").strip() or SUB_ALL
    tags = [] if text == SUB_ALL else [t.strip() for t in text.split("||") if t.strip()]
    return {
        "classFilterMode": False,
        "codeSet": [tags_code(t) for t in tags],
        "expressionType": "TAG",
        "subString": text,
        "subVersion": time.time_ns() // 1_000_000,
        "tagsSet": tags,
        "topic": topic,
    }


@dataclass(slots=True)
class ConsumerRegistration:
    """What a heartbeat says about one consumer group of this process."""

    group: str
    consume_type: str = "CONSUME_ACTIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": self.message_model,
            "subscriptionDataSet": list(self.subscriptions.values()),
            "unitMode": False,
        }


class _ClientRequests:
    """Requests a broker sends to this client: one-way notices are ignored, others refused."""

    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED or request.is_oneway:
            return
        answer = request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"request code {request.code} is not supported by the habroker Python client",
        )
        channel.write(answer)


class ClientInstance:
    def __init__(
        self,
        namesrv_addr: str | Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        route_ttl: float = 30.0,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        serialize_type: SerializeType = SerializeType.JSON,
        instance_name: str | None = None,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``credentials``: sign every request for a broker with ``aclEnable`` (RocketMQ's
        AclClientRPCHook; docs/security.md)."""
        self.timeout = timeout
        self.remoting = RemotingClient(
            timeout=timeout,
            serialize_type=serialize_type,
            dispatcher=_ClientRequests(),
            rpc_hook=rpc_hook(credentials) if credentials is not None else None,
            tls=tls,
        )
        self.routes = TopicRouteCache(self.remoting, namesrv_addr, ttl=route_ttl, timeout=timeout)
        name = instance_name or f"{os.getpid()}#{time.time_ns()}"
        self.client_id = f"{local_ip()}@{name}"
        self.heartbeat_interval = heartbeat_interval
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, ConsumerRegistration] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._closed = False

    # -- requests ----------------------------------------------------------------------
    async def invoke(
        self,
        address: str,
        code: int,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> RemotingCommand:
        """One request to a broker; an unreachable broker is :class:`BrokerUnreachableError`."""
        try:
            return await self.remoting.invoke(
                address, code, header, body, timeout=timeout or self.timeout
            )
        except RemotingError as exc:
            self.routes.invalidate_broker(address)
            raise BrokerUnreachableError(address, str(exc)) from None

    async def call(
        self,
        address: str,
        code: int,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """Like :meth:`invoke`; an answer whose code is not in ``ok`` is MQBrokerError."""
        answer = await self.invoke(address, code, header, body, timeout=timeout)
        if answer.code not in ok:
            raise MQBrokerError(answer.code, answer.remark, address, code)
        return answer

    # -- membership and heartbeats -----------------------------------------------------
    def register_producer(self, group: str) -> None:
        self.producer_groups.add(group)
        self._start_heartbeats()

    def register_consumer(self, registration: ConsumerRegistration) -> None:
        self.consumers[registration.group] = registration
        self._start_heartbeats()

    def heartbeat_json(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [c.to_json() for c in self.consumers.values()],
            "producerDataSet": [{"groupName": g} for g in sorted(self.producer_groups)],
        }

    async def send_heartbeats(self) -> int:
        """HEART_BEAT to every known broker (masters only without consumers); the count sent."""
        if not self.producer_groups and not self.consumers:
            return 0
        body = json.dumps(self.heartbeat_json(), separators=(",", ":")).encode()
        sent = 0
        for name, addrs in list(self.routes.broker_addrs.items()):
            for broker_id, address in sorted(addrs.items()):
                if not self.consumers and broker_id != MASTER_ID:
                    continue
                try:
                    await self.call(address, RequestCode.HEART_BEAT, None, body)
                    sent += 1
                except (BrokerUnreachableError, MQBrokerError) as exc:
                    log.info("heartbeat to %s (%s/%d) failed: %s", address, name, broker_id, exc)
        return sent

    def _start_heartbeats(self) -> None:
        if self._heartbeat is None and not self._closed:
            self._heartbeat = asyncio.create_task(self._heartbeats(), name="client-heartbeat")

    async def _heartbeats(self) -> None:
        while True:
            try:
                await self.send_heartbeats()
            except Exception:
                log.exception("heartbeat round failed")
            await asyncio.sleep(self.heartbeat_interval)

    async def unregister(self, *, producer_group: str = "", consumer_group: str = "") -> None:
        """UNREGISTER_CLIENT to every known broker, so admin tools stop listing this client."""
        self.producer_groups.discard(producer_group)
        self.consumers.pop(consumer_group, None)
        header = {
            "clientID": self.client_id,
            "producerGroup": producer_group or None,
            "consumerGroup": consumer_group or None,
        }
        # best effort and short: a broker that is gone must not hold up a shutdown
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(UNREGISTER_TIMEOUT):
                for addrs in list(self.routes.broker_addrs.values()):
                    for broker_id, address in sorted(addrs.items()):
                        if not consumer_group and broker_id != MASTER_ID:
                            continue
                        with contextlib.suppress(BrokerUnreachableError):
                            await self.invoke(address, RequestCode.UNREGISTER_CLIENT, header)

    async def close(self) -> None:
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        await self.remoting.close()

    async def __aenter__(self) -> ClientInstance:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
