"""Real brokers for the remoting client's tests: BrokerController + BrokerRemoting on 127.0.0.1.

Each broker runs on its own event loop in its own thread, so a client under test (asyncio in
the test's loop, blocking facades, or a CLI subprocess) talks to it only through sockets, as it
would to a broker process.  A master + slave pair replicates over the real HA port; the slave
copies metadata from the master's HTTP API and registers with the master over REGISTER_BROKER
(what a RocketMQ slave does with its name server), so the master's route names both.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web
from habroker.broker import BrokerController
from habroker.config import BrokerConfig
from habroker.local import free_port
from habroker.processor import BrokerRemoting
from habroker.remoting import RequestCode
from habroker.remoting.client import RemotingClient
from habroker.server import create_app

T = TypeVar("T")

SMALL = {
    "mappedFileSizeCommitLog": 256 * 1024,
    "maxMessageSize": 64 * 1024,
    "metaSyncInterval": 200,
}


class BrokerThread:
    """One broker (and optionally its HTTP API) on a private event loop in a daemon thread."""

    def __init__(self, root: Path, *, http: bool = False, **config: Any) -> None:
        values: dict[str, Any] = {
            "brokerName": "broker-a",
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "listenPort": free_port(),
            "haListenPort": free_port(),
            "httpListenPort": free_port(),
            "storePathRootDir": str(root / "store"),
            **SMALL,
        }
        values.update(config)
        self.config = BrokerConfig.load(environ={}, overrides=values)
        self.http_port = self.config.httpListenPort if http else 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.controller: BrokerController | None = None
        self.remoting: BrokerRemoting | None = None
        self.runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.config.listenPort}"

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{self.config.haListenPort}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def broker(self) -> BrokerController:
        assert self.controller is not None
        return self.controller

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        async def wrapped() -> T:
            return fn()

        return self.run(wrapped())

    def start(self) -> BrokerThread:
        self.run(self._start())
        return self

    async def _start(self) -> None:
        self.controller = BrokerController(self.config)
        await self.controller.start()
        await self.start_remoting_async()
        if self.http_port:
            self.runner = web.AppRunner(create_app(self.controller), access_log=None)
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.http_port).start()

    async def start_remoting_async(self) -> None:
        self.remoting = BrokerRemoting(self.broker)
        await self.remoting.start("127.0.0.1", self.config.listenPort)

    def stop_remoting(self) -> None:
        """The client port goes away (a broker that stopped answering); the store stays."""
        if self.remoting is not None:
            self.run(self.remoting.stop())
            self.remoting = None

    def start_remoting(self) -> None:
        self.run(self.start_remoting_async())

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    async def _stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.remoting is not None:
            await self.remoting.stop()
        if self.controller is not None:
            await self.controller.stop()

    def register_with(self, master: BrokerThread) -> None:
        """REGISTER_BROKER with the master (as a RocketMQ slave does with its name server)."""

        async def register() -> None:
            cfg = self.config
            async with RemotingClient() as client:
                await client.call(
                    master.address,
                    RequestCode.REGISTER_BROKER,
                    {
                        "brokerName": cfg.brokerName,
                        "brokerAddr": self.address,
                        "clusterName": cfg.brokerClusterName,
                        "haServerAddr": self.ha_address,
                        "brokerId": cfg.brokerId,
                        "compressed": False,
                        "bodyCrc32": 0,
                    },
                    b'{"topicConfigTable":{},"dataVersion":{"counter":0,"timestamp":0}}',
                )

        self.run(register())


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} not reached after {timeout}s")


@pytest.fixture
def broker_thread(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    started: list[BrokerThread] = []

    def make(name: str = "broker", **config: Any) -> BrokerThread:
        b = BrokerThread(tmp_path / name, **config)
        started.append(b)
        return b.start()

    yield make
    for b in reversed(started):
        b.stop()


@pytest.fixture
def broker(broker_thread: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_thread()


class Group:
    def __init__(self, master: BrokerThread, slave: BrokerThread) -> None:
        self.master = master
        self.slave = slave

    def wait_replicated(self) -> None:
        target = self.master.call(lambda: self.master.broker.store.max_phy_offset)
        wait_for(
            lambda: self.slave.call(lambda: self.slave.broker.store.dispatched_offset) >= target,
            what="slave caught up and dispatched",
        )

    def wait_topic_on_slave(self, topic: str) -> None:
        wait_for(
            lambda: self.slave.call(lambda: self.slave.broker.topics.get(topic) is not None),
            what=f"topic {topic} copied to the slave",
        )


@pytest.fixture
def group(broker_thread: Callable[..., BrokerThread]) -> Group:
    """ASYNC master + slave; the master sends consumers with > 10% of 1 MiB unread to the slave."""
    policy = {
        "slaveReadEnable": True,
        "totalPhysicalMemorySize": 1 << 20,
        "accessMessageInMemoryMaxRatio": 10,
    }
    master = broker_thread("master", http=True, brokerId=0, **policy)
    slave = broker_thread(
        "slave",
        brokerId=1,
        brokerRole="SLAVE",
        haMasterAddress=master.ha_address,
        masterHttpAddress=master.http_address,
        **policy,
    )
    slave.register_with(master)
    return Group(master, slave)
