"""BrokerStartup: one broker process — the broker, its remoting face and its HTTP face.

``listenPort`` serves RocketMQ's remoting protocol (producers, consumers, mqadmin, slaves'
metadata sync, the group's route answers); ``httpListenPort`` the HTTP API (operator, metrics,
health).  Stopping closes both listeners before the broker so no request meets a closed store.
"""

from __future__ import annotations

import logging

from aiohttp import web

from habroker.broker import BrokerController
from habroker.config import BrokerConfig
from habroker.processor import BrokerRemoting
from habroker.server import serve_http

log = logging.getLogger(__name__)


class BrokerStartup:
    def __init__(self, config: BrokerConfig) -> None:
        self.broker = BrokerController(config)
        self.remoting = BrokerRemoting(self.broker)
        self.http: web.AppRunner | None = None

    async def start(self) -> None:
        """Start everything or nothing: a port that cannot be bound undoes what started."""
        cfg = self.broker.config
        await self.broker.start()
        try:
            await self.remoting.start(
                cfg.bindAddress, cfg.listenPort, cfg.fast_listen_port, cfg.externalListenPort
            )
            self.http = await serve_http(self.broker)
        except BaseException:
            await self.remoting.stop()
            await self.broker.stop()
            raise
        # name servers route clients here only once both listeners answer
        self.broker.registration.start()

    async def stop(self) -> None:
        await self.broker.hand_off_leadership()  # a DLedger leader: writes move on at once
        await self.broker.registration.stop()  # UNREGISTER_BROKER: clients go elsewhere first
        if self.http is not None:
            await self.http.cleanup()
        await self.remoting.stop()
        await self.broker.stop()
