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
                await self.sync_all(session)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval)

    async def sync_all(self, session: aiohttp.ClientSession) -> bool:
        master = self.broker.master_http_address
        own = f"{self.broker.config.brokerIP1}:{self.broker.config.listenPort}"
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

    @staticmethod
    async def _get(session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(url) as resp:
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
