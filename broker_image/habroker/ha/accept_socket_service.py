"""AcceptSocketService: the master's HA listener; every accepted socket becomes an HAConnection."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from habroker.ha.protocol import tune_socket

log = logging.getLogger(__name__)


class AcceptSocketService:
    """Listens on ``host:port`` and hands each new slave socket to ``on_accept``."""

    def __init__(
        self, host: str, port: int, on_accept: Callable[[socket.socket, str], None]
    ) -> None:
        self.host = host
        self.port = port
        self._on_accept = on_accept
        self._sock: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.accepted_total = 0

    @property
    def address(self) -> tuple[str, int]:
        """The bound address (the real port when 0 was asked for)."""
        if self._sock is None:
            return self.host, self.port
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, backlog=128)
        sock.setblocking(False)
        self._sock = sock
        self._task = asyncio.create_task(self._run(sock), name="ha-accept")
        log.info("HA service listening on %s:%d", *self.address)

    async def _run(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except OSError as exc:  # EMFILE and friends: keep the listener, back off a little
                log.warning("HA accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            try:
                tune_socket(conn)
            except OSError as exc:  # reset before we got to it
                log.info("HA connection from %s:%s lost at accept: %s", addr[0], addr[1], exc)
                conn.close()
                continue
            self.accepted_total += 1
            self._on_accept(conn, f"{addr[0]}:{addr[1]}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
