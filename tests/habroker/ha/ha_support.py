"""Helpers for the HA tests: configs on free ports, stores in tmp_path, protocol test peers."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from habroker.config import BrokerConfig, BrokerRole
from habroker.local import free_port
from habroker.store.message_store import MessageStore
from habroker.store.values import BatchEntry

FILE_SIZE = 64 * 1024
REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")


def master_config(root: Path, **overrides: Any) -> BrokerConfig:
    values: dict[str, Any] = dict(
        storePathRootDir=str(root),
        brokerRole=BrokerRole.ASYNC_MASTER,
        brokerId=0,
        listenPort=free_port(),
        haListenPort=free_port(),
        mappedFileSizeCommitLog=FILE_SIZE,
        mappedFileSizeConsumeQueue=20 * 1024,
        maxMessageSize=16 * 1024,
        haSendHeartbeatInterval=200,
        haHousekeepingInterval=3000,
        syncFlushTimeout=2000,
    )
    values.update(overrides)
    return BrokerConfig(**values)


def slave_config(root: Path, master: BrokerConfig | None, **overrides: Any) -> BrokerConfig:
    address = f"127.0.0.1:{master.haListenPort}" if master else ""
    values: dict[str, Any] = dict(brokerRole=BrokerRole.SLAVE, brokerId=1, haMasterAddress=address)
    values.update(overrides)
    return master_config(root, **values)


async def open_store(config: BrokerConfig) -> MessageStore:
    store = MessageStore(config)
    await store.start()
    return store


def produce(
    store: MessageStore,
    total_bytes: int,
    body_size: int = 1000,
    topic: str = "TopicA",
    batch: int = 8,
) -> int:
    """Append messages until at least ``total_bytes`` more are in the log; returns the new max."""
    target = store.max_phy_offset + total_bytes
    n = 0
    while store.max_phy_offset < target:
        entries = [
            BatchEntry(flag=0, body=_body(n + i, body_size), properties=b"") for i in range(batch)
        ]
        store.put_messages(topic, n % 4, entries, born_host=("127.0.0.1", 40000))
        n += batch
    return store.max_phy_offset


def _body(i: int, size: int) -> bytes:
    seed = i.to_bytes(4, "big")
    return (seed * (size // 4 + 1))[:size]


async def wait_until(predicate: Callable[[], bool], within: float = 20.0, what: str = "") -> None:
    """Poll ``predicate`` (10 ms) until true; fail naming ``what`` after ``within`` s."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what or predicate}")
        await asyncio.sleep(0.01)


def commit_log_files(config: BrokerConfig) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(config.commit_log_dir.iterdir())}


class JavaSlaveStandIn:
    """A raw-socket slave that speaks the classic protocol exactly as a Java slave does.

    It sends 8-byte reports only when told and hands back every frame as read off the wire,
    so tests see the master's framing (offsets, sizes, heartbeats) without our HAClient.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.address = "{}:{}".format(*writer.get_extra_info("sockname")[:2])

    @classmethod
    async def connect(cls, port: int) -> JavaSlaveStandIn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def report(self, offset: int) -> None:
        await self.send_raw(REPORT.pack(offset))

    async def read_frame(self, within: float = 10.0) -> tuple[int, bytes]:
        header = await asyncio.wait_for(self.reader.readexactly(HEADER.size), within)
        offset, size = HEADER.unpack(header)
        body = await asyncio.wait_for(self.reader.readexactly(size), within) if size else b""
        return offset, body

    async def closed_by_peer(self, within: float = 10.0) -> bool:
        """True once the master closes the connection (reading and discarding anything sent)."""
        try:
            async with asyncio.timeout(within):
                while await self.reader.read(1 << 16):
                    pass
        except TimeoutError:
            return False
        except ConnectionError:
            pass
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


class JavaMasterStandIn:
    """A raw-socket master: accepts slaves and lets a test send any frame bytes it likes."""

    def __init__(self) -> None:
        self.port = free_port()
        self.connections: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self.connections.put((reader, writer))

        self._server = await asyncio.start_server(accept, "127.0.0.1", self.port)

    async def accept(
        self, within: float = 10.0
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(self.connections.get(), within)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


async def read_report(reader: asyncio.StreamReader, within: float = 10.0) -> int:
    data = await asyncio.wait_for(reader.readexactly(REPORT.size), within)
    return int(REPORT.unpack(data)[0])


def frame(offset: int, body: bytes, size: int | None = None) -> bytes:
    return HEADER.pack(offset, len(body) if size is None else size) + body
