"""Channel: one TCP connection speaking RemotingCommands, for the server and the client alike.

Both ends of RocketMQ's protocol may send requests (the broker notifies consumers, asks them
for running info) and match answers by ``opaque``, so one class carries requests, responses and
one-way messages in both directions.  Garbage from a peer closes only that peer's channel.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import BinaryIO, Protocol, cast

from habroker.remoting.command import (
    FRAME_MAX_LENGTH,
    BadFrame,
    Body,
    FrameReader,
    RemotingCommand,
)

log = logging.getLogger(__name__)

_opaques = itertools.count(1)
# pause reading from a peer while this much of our answers to it is still unsent
HIGH_WATER = 8 * 1024 * 1024
#: a body at least this large that lies in files (a pull of many messages) is sent with
#: ``sendfile`` when nothing of ours is queued: the kernel takes the page-cache pages without a
#: copy through this process (bench/analysis.md, "large pulls"). Smaller ones cost less as the
#: transport's one ``writev``.
SENDFILE_MIN_BODY = 256 * 1024


class RemotingError(Exception):
    """A request that got no answer: the channel closed or the time ran out."""


#: :meth:`Channel.invoke_callback`'s: the answer, or why there is none
AnswerCallback = Callable[[RemotingCommand | RemotingError], None]
#: how often a channel looks for :meth:`Channel.invoke_callback` answers overdue
SWEEP_S = 0.5


class RequestDispatcher(Protocol):
    def dispatch(self, channel: Channel, request: RemotingCommand) -> None: ...


class Channel(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatcher: RequestDispatcher | None = None,
        *,
        frame_max: int = FRAME_MAX_LENGTH,
        on_close: Callable[[Channel], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.reader = FrameReader(frame_max)
        self.on_close = on_close
        self.transport: asyncio.Transport | None = None
        self.remote_address = "?"
        self.local_address = "?"
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        #: :meth:`invoke_callback`'s waiters: opaque → (deadline on the loop clock, callback)
        self.callbacks: dict[int, tuple[float, AnswerCallback]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._raw: tuple[int, int] | None = None  # the socket's family and descriptor

    # -- asyncio.BufferedProtocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (uvloop's are not subclasses of asyncio.Transport: no isinstance)
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=HIGH_WATER)
        raw = transport.get_extra_info("socket")
        if raw is not None and transport.get_extra_info("ssl_object") is None:
            # plain TCP: large file-backed bodies may bypass the transport (_send_direct)
            self._raw = (raw.family, raw.fileno())
        self.remote_address = _address(transport.get_extra_info("peername"))
        self.local_address = _address(transport.get_extra_info("sockname"))

    def get_buffer(self, sizehint: int) -> memoryview:
        # frames are read straight into their final place (FrameReader), whatever the hint
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.reader.refused is not None:
            return  # bytes a TLS transport still hands over while the refused peer is closed
        try:
            commands = self.reader.buffer_updated(nbytes)
        except BadFrame as exc:
            log.warning("closing remoting connection from %s: %s", self.remote_address, exc)
            self.close()
            return
        for cmd in commands:
            if cmd.is_response:
                waiter = self.pending.pop(cmd.opaque, None)
                if waiter is not None:
                    if not waiter.done():
                        waiter.set_result(cmd)
                    continue
                called = self.callbacks.pop(cmd.opaque, None)
                if called is not None:
                    self._call(called[1], cmd)
            elif self.dispatcher is not None:
                self.dispatcher.dispatch(self, cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        for waiter in self.pending.values():
            if not waiter.done():
                waiter.set_exception(RemotingError(f"connection to {self.remote_address} closed"))
        self.pending.clear()
        self._fail_callbacks(lambda _deadline: True, f"connection to {self.remote_address} closed")
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if not self.closed.done():
            self.closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- sending ---------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def write(self, cmd: RemotingCommand) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        frames = cmd.encode()
        if (
            cmd.body_files is not None
            and self._raw is not None
            and transport.get_write_buffer_size() == 0
            and sum(len(part) for part in frames) >= SENDFILE_MIN_BODY
        ):
            frames = self._send_direct(frames, cmd.body_files)
            if not frames:
                return
        transport.writelines(frames)

    def _send_direct(self, frames: list[Body], files: Sequence[tuple[BinaryIO, int]]) -> list[Body]:
        """Writes the frame's header (held back with MSG_MORE) and then its body parts with
        ``os.sendfile`` from their files, straight to the socket, as far as it takes them now;
        returns what is left, for the transport to queue behind. Only called with the
        transport's queue empty, so nothing it holds can be overtaken. A part whose file
        retention has closed meanwhile goes from its view (which keeps the bytes mapped)."""
        assert self._raw is not None
        family, fd = self._raw
        head, parts = frames[0], frames[1:]
        sock = socket.socket(family, socket.SOCK_STREAM, 0, fd)  # borrows fd: detached below
        try:
            try:
                sent = sock.send(head, socket.MSG_MORE)
            except OSError:  # EAGAIN, or a broken connection the transport will report
                sent = 0
            if sent < len(head):
                return [memoryview(head)[sent:], *parts]
            for i, (part, (file, position)) in enumerate(zip(parts, files, strict=True)):
                if file.closed:
                    return parts[i:]
                size, done, in_fd = len(part), 0, file.fileno()
                while done < size:
                    try:
                        n = os.sendfile(fd, in_fd, position + done, size - done)
                    except OSError:
                        n = 0
                    if n <= 0:
                        return [memoryview(part)[done:], *parts[i + 1 :]]
                    done += n
            return []
        finally:
            sock.detach()

    async def drain(self) -> None:
        if self._write_paused:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:  # noqa: ASYNC109
        """Send a request and wait for its answer (matched by opaque)."""
        return await self.invoke_future(request, timeout)

    def invoke_future(
        self, request: RemotingCommand, timeout: float
    ) -> asyncio.Future[RemotingCommand]:
        """Send a request now; the future of its answer fails with :class:`RemotingError` when
        the channel closes or ``timeout`` passes first.  For callers that must not wait a loop
        pass for a task to start (a DLedger leader's pushes)."""
        if not self.is_open:
            raise RemotingError(f"connection to {self.remote_address} is closed")
        opaque = request.opaque = next(_opaques) & 0x7FFFFFFF
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[RemotingCommand] = loop.create_future()
        self.pending[opaque] = waiter
        self.write(request)
        code = request.code

        def expire() -> None:
            if not waiter.done():
                waiter.set_exception(
                    RemotingError(
                        f"no answer from {self.remote_address} to request code {code} "
                        f"within {timeout:.3g}s"
                    )
                )

        timer = loop.call_later(timeout, expire)

        def settled(_: asyncio.Future[RemotingCommand]) -> None:
            timer.cancel()
            self.pending.pop(opaque, None)

        waiter.add_done_callback(settled)
        return waiter

    def invoke_callback(
        self, request: RemotingCommand, timeout: float, callback: AnswerCallback
    ) -> None:
        """Send a request now; ``callback`` gets its answer straight from the read that brings
        it (no future, no loop pass), or a :class:`RemotingError` when the channel closes or
        ``timeout`` passes first (checked every :data:`SWEEP_S`, so up to that much later).
        For a DLedger leader's pushes, two per produce batch: the follower's answer completes
        the producers it commits without waiting for a task or a timer of its own."""
        if not self.is_open:
            raise RemotingError(f"connection to {self.remote_address} is closed")
        opaque = request.opaque = next(_opaques) & 0x7FFFFFFF
        loop = asyncio.get_running_loop()
        self.callbacks[opaque] = (loop.time() + timeout, callback)
        self.write(request)
        if self._sweeper is None:
            self._sweeper = loop.call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        now = asyncio.get_running_loop().time()
        self._fail_callbacks(
            lambda deadline: deadline <= now,
            f"no answer from {self.remote_address} in time",
        )
        self._sweeper = (
            asyncio.get_running_loop().call_later(SWEEP_S, self._sweep) if self.callbacks else None
        )

    def _fail_callbacks(self, expired: Callable[[float], bool], why: str) -> None:
        gone = [opaque for opaque, (deadline, _) in self.callbacks.items() if expired(deadline)]
        for opaque in gone:
            _, callback = self.callbacks.pop(opaque)
            self._call(callback, RemotingError(why))

    def _call(self, callback: AnswerCallback, answer: RemotingCommand | RemotingError) -> None:
        try:
            callback(answer)
        except Exception:  # the caller's bug must not close the channel nor skip the others
            log.exception("answer callback on the channel to %s", self.remote_address)

    def send_oneway(self, request: RemotingCommand) -> None:
        request.opaque = next(_opaques) & 0x7FFFFFFF
        request.flag |= 2
        self.write(request)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _address(info: object) -> str:
    if isinstance(info, tuple) and len(info) >= 2:
        host = str(info[0])
        return f"[{host}]:{info[1]}" if ":" in host else f"{host}:{info[1]}"
    return "?"
