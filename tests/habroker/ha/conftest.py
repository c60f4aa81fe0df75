from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from habroker.config import BrokerConfig
from habroker.ha import HAClient, HAService
from habroker.store.message_store import MessageStore

from tests.habroker.ha.ha_support import master_config, open_store, slave_config


class Node:
    """A store plus its HA side (HAService on a master, HAClient on a slave)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        service: HAService | None = None,
        client: HAClient | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.service = service
        self.client = client
        self.stopped = False

    @property
    def ha(self) -> HAService:
        assert self.service is not None
        return self.service

    @property
    def cl(self) -> HAClient:
        assert self.client is not None
        return self.client

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.client is not None:
            await self.client.stop()
        if self.service is not None:
            await self.service.stop()
        await self.store.shutdown()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    """Factory: ``await nodes("master", **config)`` / ``await nodes("slave", master_node, ...)``."""
    started: list[Node] = []
    counter = 0

    async def make(kind: str, master: Node | None = None, **overrides: Any) -> Node:
        nonlocal counter
        counter += 1
        root = tmp_path / f"{kind}{counter}"
        if kind == "master":
            config = master_config(root, **overrides)
            store = await open_store(config)
            service = HAService(config, store)
            await service.start()
            node = Node(config, store, service=service)
        else:
            config = slave_config(root, master.config if master else None, **overrides)
            store = await open_store(config)
            client = HAClient(config, store)
            await client.start()
            node = Node(config, store, client=client)
        started.append(node)
        return node

    yield make
    for node in reversed(started):
        await node.stop()
