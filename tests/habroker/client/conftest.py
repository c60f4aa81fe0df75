"""Real brokers for the remoting client's tests: what ``habroker serve`` runs (BrokerStartup:
the broker, its remoting server on listenPort and HTTP API on httpListenPort) on 127.0.0.1.

Each broker runs on its own event loop in its own thread, so a client under test (asyncio in
the test's loop, or the blocking facades) talks to it only through sockets, as it would to a
broker process, while a test can still reach into the broker (stop its client port, read its
tables).  A master + slave pair replicates over the real HA port; the slave registers with the
master and copies its metadata over remoting, so the master's route names both.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from habroker.broker import BrokerController
from habroker.config import BrokerConfig
from habroker.local import free_port
from habroker.processor import BrokerRemoting
from habroker.startup import BrokerStartup

T = TypeVar("T")

SMALL = {
    "mappedFileSizeCommitLog": 256 * 1024,
    "maxMessageSize": 64 * 1024,
    "metaSyncInterval": 200,
}


class BrokerThread:
    """One broker process's parts on a private event loop in a daemon thread."""

    def __init__(self, root: Path, **config: Any) -> None:
        values: dict[str, Any] = {
            "brokerName": "broker-a",
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "listenPort": free_port(),
            "haListenPort": free_port(),
            "httpListenPort": free_port(),
            # no VIP channel at listenPort - 2: that port was not reserved and could be one of the
            # ports above or another broker's (a CI run failed to bind one); tests of it set it
            "fastListenPort": 0,
            "storePathRootDir": str(root / "store"),
            **SMALL,
        }
        values.update(config)
        self.config = BrokerConfig.load(environ={}, overrides=values)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.startup: BrokerStartup | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.config.listenPort}"

    @property
    def ha_address(self) -> str:
        return f"127.0.0.1:{self.config.haListenPort}"

    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.config.httpListenPort}"

    @property
    def broker(self) -> BrokerController:
        assert self.startup is not None
        return self.startup.broker

    @property
    def remoting(self) -> BrokerRemoting:
        assert self.startup is not None
        return self.startup.remoting

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        async def wrapped() -> T:
            return fn()

        return self.run(wrapped())

    def start(self) -> BrokerThread:
        async def start() -> None:
            self.startup = BrokerStartup(self.config)
            await self.startup.start()

        self.run(start())
        return self

    def stop_remoting(self) -> None:
        """The client port goes away (a broker that stopped answering); the store stays."""
        self.run(self.remoting.stop())

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            if self.startup is not None:
                self.run(self.startup.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


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
    master = broker_thread("master", brokerId=0, **policy)
    slave = broker_thread(
        "slave",
        brokerId=1,
        brokerRole="SLAVE",
        haMasterAddress=master.ha_address,
        masterAddress=master.address,
        **policy,
    )
    group = Group(master, slave)
    wait_for(
        lambda: master.call(lambda: 1 in master.broker.routes.broker_addrs()),
        what="the slave registered with the master",
    )
    return group
