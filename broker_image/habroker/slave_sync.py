"""SlaveSynchronize: a slave copies topics, subscription groups and consumer offsets from its master.

Replication copies only the commit log; without this copy a slave would not know the topics
it must serve, nor where consumers it takes over had got to. Failures are logged and retried on
the next round; they never affect data replication (as in RocketMQ).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from habroker.broker import BrokerController

log = logging.getLogger(__name__)

SLAVE_ID_HEADER = "X-Habroker-Slave-Id"
SLAVE_LISTEN_HEADER = "X-Habroker-Slave-Listen-Address"
SLAVE_HTTP_HEADER = "X-Habroker-Slave-Http-Address"
SLAVE_HA_HEADER = "X-Habroker-Slave-Ha-Address"


class SlaveSynchronize:
    def __init__(self, broker: BrokerController, interval: float) -> None:
        self.broker = broker
        self.interval = interval
        self.last_sync: float | None = None
        self.last_error: str | None = None
        self.syncs = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="slave-synchronize")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def trigger(self) -> None:
        """Sync now (after a master change) instead of waiting for the next round."""
        self._wake.set()

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(2.0, min(10.0, self.interval)))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                announced = self._ha_local_address()
                await self.sync_all(session)
                self._wake.clear()
                deadline = time.monotonic() + self.interval
                # wake early when the HA connection (re)connects, so the master learns which
                # connection is ours (brokerId, listen address) within a second, not a round
                while (left := deadline - time.monotonic()) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), min(left, 1.0))
                    if self._wake.is_set() or self._ha_local_address() != announced:
                        break

    def _ha_local_address(self) -> str | None:
        client = self.broker.ha_client
        return client.local_address if client is not None else None

    def identity_headers(self) -> dict[str, str]:
        """Who this slave is, for the master's status: the classic HA protocol carries only
        offsets, so the slave names its HA connection's local address over HTTP."""
        cfg = self.broker.config
        headers = {
            SLAVE_ID_HEADER: str(cfg.brokerId),
            SLAVE_LISTEN_HEADER: f"{cfg.brokerIP1}:{cfg.listenPort}",
            SLAVE_HTTP_HEADER: f"{cfg.brokerIP1}:{cfg.httpListenPort}",
        }
        local = self._ha_local_address()
        if local:
            headers[SLAVE_HA_HEADER] = local
        return headers

    async def sync_all(self, session: aiohttp.ClientSession) -> bool:
        master = self.broker.master_http_address
        own = f"{self.broker.config.brokerIP1}:{self.broker.config.httpListenPort}"
        if not master:
            return False
        if master == own:
            if self.last_error is None:
                self.last_error = (
                    f"master HTTP address {master} is this broker itself; set masterHttpAddress"
                )
                log.warning("metadata sync skipped: %s", self.last_error)
            return False
        base = f"http://{master}"
        try:
            topics = await self._get(session, f"{base}/v1/topics")
            groups = await self._get(session, f"{base}/v1/subscription-groups")
            offsets = await self._get(session, f"{base}/v1/consumer-offsets")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if message != self.last_error:
                log.warning("metadata sync from master %s failed: %s", master, message)
            self.last_error = message
            return False
        changed_topics = self.broker.topics.replace_all(topics)
        changed_groups = self.broker.groups.replace_all(groups)
        self.broker.offsets.merge(offsets)
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

    async def _get(self, session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(url, headers=self.identity_headers()) as resp:
            if resp.status != 200:
                raise ValueError(f"GET {url} answered {resp.status}")
            return await resp.json()

    def status(self) -> dict[str, Any]:
        return {
            "masterHttpAddress": self.broker.master_http_address or None,
            "lastSyncAgeMs": None
            if self.last_sync is None
            else int((time.monotonic() - self.last_sync) * 1000),
            "syncs": self.syncs,
            "lastError": self.last_error,
        }
