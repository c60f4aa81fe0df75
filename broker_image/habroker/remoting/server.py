"""RemotingServer: the listener on ``listenPort`` and the table of request processors.

A processor takes a request and its channel and returns the answer — directly, as an
awaitable when it must wait (a long-polling pull), or as :class:`AnswerLater` when its only wait
is one future (a SYNC put waiting for the slave's ack): the answer is then built and written by
that future's done callback, with no task per request.  Unknown codes are answered with
REQUEST_CODE_NOT_SUPPORTED, an exception in a processor with SYSTEM_ERROR: a request never
drops its connection; only bytes that are not frames do.

TLS (:mod:`habroker.remoting.tls`): with a mode other than ``disabled`` the server accepts
connections itself and looks at each one's first byte without consuming it (``MSG_PEEK``): a
TLS handshake record (0x16) gets a TLS session, anything else is served plain in ``permissive``
mode and closed in ``enforcing`` mode, as RocketMQ's NettyRemotingServer decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeAlias, TypeVar

from habroker.remoting.channel import Channel
from habroker.remoting.codes import ResponseCode, code_name
from habroker.remoting.command import FRAME_MAX_LENGTH, RemotingCommand
from habroker.remoting.tls import TLS_HANDSHAKE_RECORD, TlsMode

log = logging.getLogger(__name__)

Answer: TypeAlias = RemotingCommand | None
T = TypeVar("T")


@dataclass(slots=True)
class AnswerLater(Generic[T]):
    """An answer ``build`` makes from ``future``'s result once it is done."""

    future: asyncio.Future[T]
    build: Callable[[T], Answer]


Processor: TypeAlias = Callable[
    [RemotingCommand, Channel], Answer | Awaitable[Answer] | AnswerLater[Any]
]
#: a check every request passes first (RocketMQ's server RPC hook); it raises
#: :class:`RequestRefused` to refuse (the ACL: :mod:`habroker.remoting.acl`)
RequestCheck: TypeAlias = Callable[[RemotingCommand, Channel], None]


class RequestRefused(Exception):
    """A processor's refusal: answered with ``code`` and the message as remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


#: how long a TLS handshake may take before the connection is dropped
TLS_HANDSHAKE_TIMEOUT = 10.0


class RemotingServer:
    def __init__(
        self,
        *,
        frame_max: int = FRAME_MAX_LENGTH,
        name: str = "remoting",
        tls_mode: TlsMode = TlsMode.DISABLED,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        if tls_mode is not TlsMode.DISABLED and tls_context is None:
            raise ValueError(f"TLS mode {tls_mode.value} needs a server SSLContext")
        self.processors: dict[int, Processor] = {}
        self.request_check: RequestCheck | None = None
        self.frame_max = frame_max
        self.name = name
        self.tls_mode = tls_mode
        self.tls_context = tls_context
        self.channels: set[Channel] = set()
        self.close_listeners: list[Callable[[Channel], None]] = []
        self._servers: list[asyncio.Server] = []
        self._listeners: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests = 0
        self.errors = 0

    def register(self, code: int, processor: Processor) -> None:
        self.processors[int(code)] = processor

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port``; call again for another port served by the same processors."""
        loop = asyncio.get_running_loop()
        if self.tls_mode is TlsMode.DISABLED:
            server = await loop.create_server(self._new_channel, host, port, reuse_address=True)
            self._servers.append(server)
            return
        listeners = await _listen(host, port)
        self._listeners.extend(listeners)
        for listener in listeners:
            self._acceptors.append(asyncio.ensure_future(self._accept(listener)))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: keep the listener, try again
                log.warning("%s: accept failed: %s", self.name, exc)
                await asyncio.sleep(0.1)
                continue
            self._spawn(self._serve_connection(conn))

    async def _serve_connection(self, conn: socket.socket) -> None:
        """Peek at the first byte and serve ``conn`` with TLS, plain, or not at all."""
        loop = asyncio.get_running_loop()
        peer = _peer(conn)
        served = False
        try:
            readable: asyncio.Future[None] = loop.create_future()

            def wake() -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(conn.fileno(), wake)
            try:
                await readable
            finally:
                loop.remove_reader(conn.fileno())
            try:
                first = conn.recv(1, socket.MSG_PEEK)
            except OSError:
                first = b""
            if not first:
                return  # closed before saying anything
            if first[0] == TLS_HANDSHAKE_RECORD:
                served = True  # the transport owns the socket now, and closes it on failure
                try:
                    await loop.connect_accepted_socket(
                        self._new_channel,
                        conn,
                        ssl=self.tls_context,
                        ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
                    )
                except (OSError, TimeoutError) as exc:
                    log.warning("%s: TLS handshake with %s failed: %s", self.name, peer, exc)
                    return
            elif self.tls_mode is TlsMode.PERMISSIVE:
                served = True
                await loop.connect_accepted_socket(self._new_channel, conn)
            else:
                log.warning(
                    "%s: closing plain connection from %s: tls.server.mode=enforcing accepts "
                    "TLS only (the client needs -Dtls.enable=true)",
                    self.name,
                    peer,
                )
                return
        finally:
            if not served:
                with contextlib.suppress(OSError):
                    conn.close()

    async def stop(self) -> None:
        for acceptor in self._acceptors:
            acceptor.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors.clear()
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
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
        if isinstance(result, AnswerLater):
            result.future.add_done_callback(
                partial(self._answer_later, channel, request, result.build)
            )
        elif inspect.isawaitable(result):
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

    def _answer_later(
        self,
        channel: Channel,
        request: RemotingCommand,
        build: Callable[[T], Answer],
        done: asyncio.Future[T],
    ) -> None:
        if done.cancelled():  # the server is stopping: nobody to answer
            return
        try:
            answer = build(done.result())
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


async def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for ``host:port`` as ``loop.create_server`` would open them (every
    address the host resolves to; SO_REUSEADDR; IPv6 sockets v6-only), for a server that
    accepts its connections itself."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    listeners: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"error while attempting to bind on address {address!r}: {exc.strerror}",
                ) from None
            sock.listen(100)
            sock.setblocking(False)
    except BaseException:
        for sock in listeners:
            sock.close()
        raise
    return listeners


def _peer(conn: socket.socket) -> str:
    try:
        host, port = conn.getpeername()[:2]
    except OSError:
        return "?"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
