"""Topic routes from name servers: which broker groups hold a topic, and at which addresses.

RocketMQ clients never take broker addresses: they ask a name server (``namesrvAddr``, several
``host:port`` separated by ``;``) for a topic's route — broker groups by name with their members'
addresses by brokerId (0 is the master), and each group's queue counts — and cache it.  Any
broker of a habroker group answers these requests for its own group, so ``namesrv_addr`` may be
the group itself; a real RocketMQ name server answers the same requests the same way.

:class:`TopicRouteCache` keeps routes for ``ttl`` seconds (RocketMQ refreshes every 30 s) and
callers drop a route when a broker it names stops answering, so the next request asks again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from habroker import fastjson
from habroker.client.errors import (
    MQBrokerError,
    MQClientError,
    NameServerUnreachableError,
    TopicNotExistError,
)
from habroker.remoting.channel import RemotingError
from habroker.remoting.client import RemotingClient
from habroker.remoting.codes import RequestCode, ResponseCode

log = logging.getLogger(__name__)

MASTER_ID = 0
PERM_WRITE = 0x2
PERM_READ = 0x4
DEFAULT_ROUTE_TTL = 30.0  # pollNameServerInterval


def parse_namesrv_addr(spec: str | Sequence[str]) -> list[str]:
    """``"h1:9876;h2:9876"`` (RocketMQ's form; ``,`` accepted too) or a list → addresses."""
    parts = spec.replace(",", ";").split(";") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for part in parts:
        addr = part.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"name server address {addr!r}: expected host:port")
        if addr not in out:
            out.append(addr)
    if not out:
        raise ValueError("no name server address given (namesrv_addr is empty)")
    return out


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker group (RocketMQ's MessageQueue)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(frozen=True, slots=True)
class BrokerData:
    """A broker group: its name, cluster and members' client addresses by brokerId."""

    broker_name: str
    cluster: str
    addrs: Mapping[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BrokerData:
        raw = data.get("brokerAddrs") or {}
        addrs = {int(k): str(v) for k, v in raw.items()}
        return cls(str(data.get("brokerName", "")), str(data.get("cluster", "")), addrs)


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueData:
        return cls(
            str(data.get("brokerName", "")),
            int(data.get("readQueueNums", 0)),
            int(data.get("writeQueueNums", 0)),
            int(data.get("perm", 0)),
            int(data.get("topicSysFlag", 0)),
        )


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A name server's TopicRouteData for one topic."""

    topic: str
    brokers: tuple[BrokerData, ...]
    queues: tuple[QueueData, ...]

    @classmethod
    def from_json(cls, topic: str, data: Mapping[str, Any]) -> TopicRoute:
        return cls(
            topic,
            tuple(BrokerData.from_json(b) for b in data.get("brokerDatas") or []),
            tuple(QueueData.from_json(q) for q in data.get("queueDatas") or []),
        )

    def broker(self, name: str) -> BrokerData | None:
        for b in self.brokers:
            if b.broker_name == name:
                return b
        return None

    def publish_queues(self) -> list[MessageQueue]:
        """Queues a producer may write: write queues of writable groups whose master is known."""
        out: list[MessageQueue] = []
        for qd in sorted(self.queues, key=lambda q: q.broker_name):
            b = self.broker(qd.broker_name)
            if not qd.writable or b is None or b.master_addr is None:
                continue
            out.extend(
                MessageQueue(self.topic, qd.broker_name, i) for i in range(qd.write_queue_nums)
            )
        return out

    def subscribe_queues(self) -> list[MessageQueue]:
        """Queues a consumer reads: read queues of readable groups."""
        out: list[MessageQueue] = []
        for qd in sorted(self.queues, key=lambda q: q.broker_name):
            if qd.readable:
                out.extend(
                    MessageQueue(self.topic, qd.broker_name, i) for i in range(qd.read_queue_nums)
                )
        return out


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: every broker group a name server knows, by cluster."""

    brokers: Mapping[str, BrokerData]
    clusters: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterInfo:
        brokers = {
            str(name): BrokerData.from_json(b)
            for name, b in (data.get("brokerAddrTable") or {}).items()
        }
        clusters = {
            str(c): tuple(sorted(str(n) for n in names))
            for c, names in (data.get("clusterAddrTable") or {}).items()
        }
        return cls(brokers, clusters)

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName → master address, for one cluster or all."""
        names: Iterable[str] = self.brokers if cluster is None else self.clusters.get(cluster, ())
        out: dict[str, str] = {}
        for name in sorted(names):
            b = self.brokers.get(name)
            if b is not None and b.master_addr is not None:
                out[name] = b.master_addr
        return out


@dataclass(slots=True)
class _Cached:
    route: TopicRoute
    fetched: float = field(default_factory=time.monotonic)


class TopicRouteCache:
    """Routes by topic, fetched from the first name server that answers."""

    def __init__(
        self,
        remoting: RemotingClient,
        namesrv_addr: str | Sequence[str],
        *,
        ttl: float = DEFAULT_ROUTE_TTL,
        timeout: float = 3.0,
    ) -> None:
        self.remoting = remoting
        self.namesrv = parse_namesrv_addr(namesrv_addr)
        self.ttl = ttl
        self.timeout = timeout
        self._routes: dict[str, _Cached] = {}
        self._fetching: dict[str, asyncio.Task[TopicRoute]] = {}
        self._preferred = 0  # index of the name server that answered last
        # brokerName -> {brokerId: address}, from every route seen (MQClientInstance's table)
        self.broker_addrs: dict[str, dict[int, str]] = {}

    # -- name-server requests ----------------------------------------------------------
    async def namesrv_invoke(
        self, code: int, header: Mapping[str, Any] | None = None
    ) -> tuple[str, int, str | None, bytes]:
        """Ask the name servers in turn, starting with the last that answered."""
        errors: list[str] = []
        n = len(self.namesrv)
        for i in range(n):
            index = (self._preferred + i) % n
            address = self.namesrv[index]
            try:
                answer = await self.remoting.invoke(address, code, header, timeout=self.timeout)
            except RemotingError as exc:
                errors.append(str(exc))
                continue
            self._preferred = index
            return address, answer.code, answer.remark, answer.body_bytes
        raise NameServerUnreachableError(self.namesrv, "; ".join(errors))

    async def namesrv_json(self, code: int, header: Mapping[str, Any] | None = None) -> Any:
        address, status, remark, body = await self.namesrv_invoke(code, header)
        if status != ResponseCode.SUCCESS:
            raise MQBrokerError(status, remark, address, code)
        try:
            return fastjson.loads(body) if body else {}
        except ValueError as exc:
            raise MQClientError(
                f"{address} answered {code} with a body that is not JSON: {exc}"
            ) from None

    # -- routes ------------------------------------------------------------------------
    async def get(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        cached = self._routes.get(topic)
        if not refresh and cached is not None and time.monotonic() - cached.fetched < self.ttl:
            return cached.route
        # one request per topic however many callers ask at once; a caller that is cancelled
        # does not cancel the others' fetch
        task = self._fetching.get(topic)
        if task is None:
            task = asyncio.create_task(self._fetch(topic), name=f"route {topic}")
            self._fetching[topic] = task
            task.add_done_callback(lambda t: self._fetched(topic, t))
        return await asyncio.shield(task)

    def _fetched(self, topic: str, task: asyncio.Task[TopicRoute]) -> None:
        if self._fetching.get(topic) is task:
            del self._fetching[topic]
        if not task.cancelled():
            task.exception()  # retrieved: no warning when every caller went away

    async def _fetch(self, topic: str) -> TopicRoute:
        address, status, remark, body = await self.namesrv_invoke(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
        )
        if status == ResponseCode.TOPIC_NOT_EXIST:
            self._routes.pop(topic, None)
            raise TopicNotExistError(topic, f"name server {address}")
        if status != ResponseCode.SUCCESS:
            raise MQBrokerError(status, remark, address, RequestCode.GET_ROUTEINFO_BY_TOPIC)
        try:
            route = TopicRoute.from_json(topic, fastjson.loads(body))
        except (ValueError, TypeError, AttributeError) as exc:
            raise MQClientError(
                f"route of {topic!r} from {address} does not parse: {exc}"
            ) from None
        if not route.brokers:
            raise TopicNotExistError(topic, f"name server {address} (no broker holds it)")
        for b in route.brokers:
            self.broker_addrs[b.broker_name] = dict(b.addrs)
        self._routes[topic] = _Cached(route)
        return route

    def invalidate(self, topic: str | None = None) -> None:
        """Forget one topic's route (or all), so the next request asks a name server again."""
        if topic is None:
            self._routes.clear()
        else:
            self._routes.pop(topic, None)

    def invalidate_broker(self, address: str) -> None:
        """A broker stopped answering: forget every route naming it."""
        for topic, cached in list(self._routes.items()):
            if any(address in b.addrs.values() for b in cached.route.brokers):
                del self._routes[topic]

    async def cluster_info(self) -> ClusterInfo:
        data = await self.namesrv_json(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = ClusterInfo.from_json(data)
        for name, b in info.brokers.items():
            self.broker_addrs[name] = dict(b.addrs)
        return info

    # -- addresses ---------------------------------------------------------------------
    def master_address(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def subscribe_address(self, broker_name: str, broker_id: int) -> tuple[str, int] | None:
        """Where to pull: the suggested member if the route has it, else the master, else any
        (RocketMQ's findBrokerAddressInSubscribe with onlyThisBroker=false)."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            return None
        for wanted in (broker_id, MASTER_ID):
            if wanted in addrs:
                return addrs[wanted], wanted
        first = min(addrs)
        return addrs[first], first
