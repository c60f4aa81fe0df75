"""SlaveSynchronize: a slave registers with its master and copies its metadata, RocketMQ's way.

Replication copies only the commit log; without this copy a slave would not know the topics it
must serve, nor where consumers it takes over had got to.  Every round, over the master's
client port (remoting): REGISTER_BROKER (who this slave is — the master answers with its own
client and HA addresses, exactly as a name server answers a Java slave), then
GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (what a Java slave's SlaveSynchronize calls), then
GET_BROKER_CLUSTER_INFO for the group's member table.  A Java master answers everything but the
registration and the member table, which is fine: metadata still flows.  Failures are logged and
retried next round; they never affect data replication.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from habroker import fastjson
from habroker.registration import register_header
from habroker.remoting.channel import RemotingError
from habroker.remoting.client import BrokerResponseError, RemotingClient
from habroker.remoting.codes import RequestCode, ResponseCode
from habroker.tls_config import client_tls

if TYPE_CHECKING:
    from habroker.broker import BrokerController

log = logging.getLogger(__name__)


class SlaveSynchronize:
    def __init__(self, broker: BrokerController, interval: float) -> None:
        self.broker = broker
        self.interval = interval
        self.last_sync: float | None = None
        self.last_error: str | None = None
        self.syncs = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._round: asyncio.Future[bool] | None = None
        self.client = RemotingClient(
            timeout=max(2.0, min(10.0, interval)), tls=client_tls(broker.config)
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="slave-synchronize")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.client.close()

    async def sync_now(self, timeout: float) -> bool:  # noqa: ASYNC109
        """One round now (shared by concurrent callers), waited for at most ``timeout``."""
        if self._round is None or self._round.done():
            self._round = asyncio.ensure_future(self.sync_all())
        try:
            return await asyncio.wait_for(asyncio.shield(self._round), timeout)
        except TimeoutError:
            return False

    def trigger(self) -> None:
        """Sync now (after a master change) instead of waiting for the next round."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            announced = self._ha_local_address()
            await self.sync_all()
            self._wake.clear()
            deadline = time.monotonic() + self.interval
            # wake early when the HA connection (re)connects, so the master learns which
            # connection is ours (brokerId, addresses) within a second, not a round
            while (left := deadline - time.monotonic()) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(left, 1.0))
                if self._wake.is_set() or self._ha_local_address() != announced:
                    break

    def _ha_local_address(self) -> str | None:
        client = self.broker.ha_client
        return client.local_address if client is not None else None

    async def sync_all(self) -> bool:
        broker = self.broker
        master = broker.master_address
        if not master:
            return False
        if master == broker.address:
            if self.last_error is None:
                self.last_error = f"master address {master} is this broker itself"
                log.warning("metadata sync skipped: %s", self.last_error)
            return False
        try:
            try:
                await self._register(master)
            except RemotingError:
                if not broker.registered_master_address:
                    raise
                # the address the master gave us last (a pod IP) may be gone with its pod: ask
                # the configured one (the master's stable name) instead, at once
                log.info(
                    "master %s does not answer; registering with %s instead",
                    master,
                    broker.configured_master_address,
                )
                broker.registered_master_address = ""
                master = broker.master_address
                await self._register(master)
            master = broker.master_address
            topics = await self._get_json(master, RequestCode.GET_ALL_TOPIC_CONFIG)
            offsets = await self._get_json(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
            delay = await self._get_json(master, RequestCode.GET_ALL_DELAY_OFFSET)
            groups = await self._get_json(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            await self._members(master)
            await self._master_permission(master)
        except (RemotingError, BrokerResponseError, ValueError) as exc:
            message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if message != self.last_error:
                log.warning("metadata sync from master %s failed: %s", master, message)
            self.last_error = message
            return False
        changed_topics = broker.topics.replace_all(topics)
        changed_groups = broker.groups.replace_all(groups)
        broker.offsets.merge(offsets)
        broker.adopt_delay_offsets(delay)
        if changed_topics or changed_groups:
            log.info(
                "metadata synced from master %s: topics %s, subscription groups %s",
                master,
                "updated" if changed_topics else "unchanged",
                "updated" if changed_groups else "unchanged",
            )
        if self.last_error:
            log.info("metadata sync from master %s works again", master)
        self.last_error = None
        self.last_sync = time.monotonic()
        self.syncs += 1
        return True

    async def _register(self, master: str) -> None:
        """REGISTER_BROKER with the master, which serves the group's routes."""
        broker = self.broker
        cfg = broker.config
        extra = {"httpAddress": f"{cfg.brokerIP1}:{cfg.httpListenPort}"}
        local = self._ha_local_address()
        if local:
            extra["haClientAddress"] = local
        header, payload = register_header(broker, extra)
        answer = await self.client.invoke(master, RequestCode.REGISTER_BROKER, header, payload)
        if answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return  # a Java master: it is no name server; routes then come from a real one
        if answer.code != ResponseCode.SUCCESS:
            raise BrokerResponseError(
                answer.code, answer.remark, master, RequestCode.REGISTER_BROKER
            )
        told = answer.ext_fields.get("masterAddr", "")
        if told and told != broker.registered_master_address:
            log.info("master %s says its client address is %s", master, told)
            broker.registered_master_address = told

    async def _get_json(self, master: str, code: int) -> Any:
        answer = await self.client.call(master, code)
        data = fastjson.loads(answer.body_bytes or b"{}")
        if not isinstance(data, dict):
            raise ValueError(f"{code}: the master's answer is not a JSON object")
        return data

    async def _master_permission(self, master: str) -> None:
        """The master's brokerPermission (GET_BROKER_CONFIG), for the routes this slave
        answers: a drained master (4) must not look writable through its slave."""
        answer = await self.client.invoke(master, RequestCode.GET_BROKER_CONFIG)
        if answer.code != ResponseCode.SUCCESS:
            return
        for line in answer.body_bytes.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "brokerPermission":
                with contextlib.suppress(ValueError):
                    self.broker.master_broker_permission = int(value.strip())
                return

    async def _members(self, master: str) -> None:
        answer = await self.client.invoke(master, RequestCode.GET_BROKER_CLUSTER_INFO)
        if answer.code != ResponseCode.SUCCESS:
            return
        info = fastjson.loads(answer.body_bytes or b"{}")
        entry = (info.get("brokerAddrTable") or {}).get(self.broker.config.brokerName) or {}
        addrs = entry.get("brokerAddrs") or {}
        self.broker.routes.from_master = {int(k): str(v) for k, v in addrs.items()}

    def status(self) -> dict[str, Any]:
        return {
            "masterAddress": self.broker.master_address or None,  # remoting: metadata copy
            "masterHttpAddress": self.broker.master_http_address or None,
            "lastSyncAgeMs": None
            if self.last_sync is None
            else int((time.monotonic() - self.last_sync) * 1000),
            "syncs": self.syncs,
            "lastError": self.last_error,
        }
