"""RemotingServer: the listener on ``listenPort`` and the table of request processors.

A processor takes a request and its channel and returns the answer — directly, or as an
awaitable when it must wait (a SYNC put, a long-polling pull).  Unknown codes are answered with
REQUEST_CODE_NOT_SUPPORTED, an exception in a processor with SYSTEM_ERROR: a request never
drops its connection; only bytes that are not frames do.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from habroker.remoting.channel import Channel
from habroker.remoting.codes import ResponseCode, code_name
from habroker.remoting.command import FRAME_MAX_LENGTH, RemotingCommand

log = logging.getLogger(__name__)

Answer: TypeAlias = RemotingCommand | None
Processor: TypeAlias = Callable[[RemotingCommand, Channel], Answer | Awaitable[Answer]]
#: a check every request passes first (RocketMQ's server RPC hook); it raises
#: :class:`RequestRefused` to refuse (the ACL: :mod:`habroker.remoting.acl`)
RequestCheck: TypeAlias = Callable[[RemotingCommand, Channel], None]


class RequestRefused(Exception):
    """A processor's refusal: answered with ``code`` and the message as remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


class RemotingServer:
    def __init__(self, *, frame_max: int = FRAME_MAX_LENGTH, name: str = "remoting") -> None:
        self.processors: dict[int, Processor] = {}
        self.request_check: RequestCheck | None = None
        self.frame_max = frame_max
        self.name = name
        self.channels: set[Channel] = set()
        self.close_listeners: list[Callable[[Channel], None]] = []
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.errors = 0

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port``; call again for another port served by the same processors."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(self._new_channel, host, port, reuse_address=True)
        self._servers.append(server)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for channel in list(self.channels):
            channel.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    def _new_channel(self) -> Channel:
        channel = Channel(self, frame_max=self.frame_max, on_close=self._channel_closed)
        self.channels.add(channel)
        return channel

    def _channel_closed(self, channel: Channel) -> None:
        self.channels.discard(channel)
        for listener in self.close_listeners:
            try:
                listener(channel)
            except Exception:
                log.exception("close listener failed for %s", channel.remote_address)

    # -- dispatch ----------------------------------------------------------------------
    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        self.requests += 1
        if self.request_check is not None:
            # every request, known code or not: a Java broker's default processor takes unknown
            # codes, so its RPC hook sees them too (and an unsigned peer learns nothing)
            try:
                self.request_check(request, channel)
            except Exception as exc:
                self._answer(channel, request, self._failure(request, exc))
                return
        processor = self.processors.get(request.code)
        if processor is None:
            self._answer(
                channel,
                request,
                request.response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f"request code {request.code} ({code_name(request.code)}) is not "
                    "supported by habroker; see docs/remoting.md",
                ),
            )
            return
        try:
            result = processor(request, channel)
        except Exception as exc:
            self._answer(channel, request, self._failure(request, exc))
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(self._finish(channel, request, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._answer(channel, request, result)

    async def _finish(
        self, channel: Channel, request: RemotingCommand, pending: Awaitable[Answer]
    ) -> None:
        try:
            answer = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer = self._failure(request, exc)
        self._answer(channel, request, answer)

    def _failure(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, RequestRefused):
            return request.response(exc.code, str(exc))
        self.errors += 1
        log.exception(
            "%s request %s from %s failed", self.name, code_name(request.code), request.opaque
        )
        return request.response(
            ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}; see the broker log"
        )

    @staticmethod
    def _answer(channel: Channel, request: RemotingCommand, answer: Answer) -> None:
        if answer is None or request.is_oneway:
            return
        answer.opaque = request.opaque
        answer.flag |= 1
        answer.serialize_type = request.serialize_type
        channel.write(answer)
