"""HAConnection: the master's side of one slave connection (RocketMQ's read/write services).

The reader turns the slave's 8-byte reports into its ack offset; the writer streams the commit
log from the offset the first report asked for. Both run as tasks on the broker's loop; when
either ends, the connection is closed and one log line says why.

Reports are checked more strictly than RocketMQ does, because an ack releases SYNC_MASTER
producers: after the first report a slave can only acknowledge bytes this connection has put
on the wire, and its acks never go backwards. Anything else is garbage (or a misaligned
stream) and drops the connection.

The first report only says where the transfer starts. The plain protocol has no
authentication, so it proves nothing: a connection confirms replication (releases SYNC
producers) only for bytes it has sent itself, ``(transfer_start, in_flight_end]``. With
``haAuthSecretFile`` the reader first runs the handshake (handshake.py): until the peer has
proved it holds the group's secret nothing it sends is read as a report and nothing is
streamed to it; a failed handshake closes the connection like any protocol error.

A connection costs little until its peer speaks: one reader task with a small buffer; the
writer task starts with the first report. Once either task ends the connection is closed at
once (socket shut down, removed from the service) even before both tasks have finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING

from habroker.config import BrokerRole
from habroker.ha.handshake import HandshakeError
from habroker.ha.protocol import PeerClosed, ProtocolError, Readable, ReportReader, send_frame

if TYPE_CHECKING:
    from habroker.config import BrokerConfig
    from habroker.ha.ha_service import HAService

log = logging.getLogger(__name__)

_READ_BUFFER_SIZE = 32 * 8  # reports are 8 bytes, a few per second: 32 of them per read
_NO_DATA_RETRY = 0.1  # seconds; RocketMQ's data wait when an offset is not readable yet
_YIELD_EVERY = 1 << 20  # bytes sent without the socket blocking before letting others run


class HAConnection:
    """One connected slave: its reported offsets and the transfer position."""

    def __init__(self, service: HAService, sock: socket.socket, address: str) -> None:
        self.service = service
        self.sock = sock
        self.address = address
        now = time.monotonic()
        self.connected_at = now
        self.last_read_at = now
        self.last_report_at: float | None = None
        self.request_offset = -1  # the first report: where the slave wants to start
        self.ack_offset = -1  # the latest report (a claim: the first one is not checked)
        self.transfer_start = -1  # where this connection's first frame starts
        self.confirmed_offset = -1  # the latest report covering bytes this connection sent
        self.next_transfer_offset = -1  # where the next frame starts
        self.in_flight_end = -1  # end of the frame being sent (the most a slave can ack)
        self.sent_bytes = 0
        self.sent_frames = 0  # data frames (heartbeats not counted)
        self.lingers = 0  # waits of haAsyncTransferLingerMs before sending new data
        self.reports = 0
        self.authenticated = False  # passed the HA handshake (haAuthSecretFile)
        self.closed = False
        self._close_reason: str | None = None
        self._close_level = logging.INFO
        self._tasks: list[asyncio.Task[None]] = []
        self._ended: asyncio.Future[None] | None = None
        self._linger_wake: asyncio.Future[None] | None = None  # set while the writer lingers

    @property
    def has_reported(self) -> bool:
        return self.request_offset >= 0

    @property
    def is_slave(self) -> bool:
        """Open and has sent a valid first report: counts as a connected slave."""
        return self.has_reported and not self.closed

    def close(self, reason: str, level: int = logging.INFO) -> None:
        """Stop both sides; ``run`` logs ``reason`` and closes the socket."""
        if self._close_reason is None:
            self._close_reason = reason
            self._close_level = level
        self._end()

    def _end(self, _task: object = None) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    def _spawn(self, coro: Coroutine[None, None, None], name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name} {self.address}")
        task.add_done_callback(self._end)
        self._tasks.append(task)

    async def run(self) -> None:
        """Serve until the slave goes away, breaks the protocol, or ``close`` is called."""
        self._ended = asyncio.get_running_loop().create_future()
        if self._close_reason is None:
            self._spawn(self._read_loop(), "ha-read")
        else:  # closed before it ran (the master stopping)
            self._end()
        try:
            await self._ended
        finally:
            # Closed from here on, whatever the tasks do: the reason is logged, the service
            # forgets it (it no longer counts as a slave) and the peer sees the end of the
            # stream now. A task that swallowed its cancellation then fails on the socket.
            self.closed = True
            reason, level = self._close_reason, self._close_level
            outcomes = [None if t.cancelled() else t.exception() for t in self._tasks if t.done()]
            if reason is None:
                reason, level = _describe(outcomes)
            if any(isinstance(o, HandshakeError) for o in outcomes):
                self.service.log_auth_refusal(self.address, reason)  # rate-limited
            else:
                log.log(
                    level,
                    "HA connection from slave %s closed: %s (acked %d, sent %d bytes)",
                    self.address,
                    reason,
                    self.ack_offset,
                    self.sent_bytes,
                )
            self.service.forget(self)
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            while self._tasks:
                for task in self._tasks:
                    task.cancel()
                done, _ = await asyncio.wait(self._tasks, timeout=1.0)
                for task in done:
                    self._tasks.remove(task)
                    if not task.cancelled() and task.exception() is not None:
                        log.debug("HA connection %s: %r at close", self.address, task.exception())
            self.sock.close()

    # -- reader: offset reports --------------------------------------------------------------
    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        auth = self.service.auth
        if auth is not None:  # nothing is read as a report, nothing sent, before it passes
            await auth.authenticate_slave(self.sock)
            self.authenticated = True
            self.last_read_at = time.monotonic()
            log.info("HA connection from %s authenticated", self.address)
        buf = bytearray(_READ_BUFFER_SIZE)
        view = memoryview(buf)
        reader = ReportReader()
        confirmed = -1
        readable = Readable(loop, self.sock)
        try:
            while True:
                await readable.wait()
                try:
                    n = self.sock.recv_into(view)
                except (BlockingIOError, InterruptedError):
                    continue
                if n == 0:
                    if reader.partial:
                        raise ProtocolError(
                            f"slave closed mid-report ({reader.partial} of 8 bytes)"
                        )
                    raise PeerClosed("slave closed the connection")
                self.last_read_at = time.monotonic()
                reports = reader.feed(view[:n])
                for value in reports:
                    self._accept_report(value)
                if reports:
                    self.last_report_at = self.last_read_at
                    if self.confirmed_offset > confirmed:
                        confirmed = self.confirmed_offset
                        self.service.notify_transfer_some(confirmed, self.transfer_start)
        finally:
            readable.close()

    def _accept_report(self, value: int) -> None:
        if value < 0:
            raise ProtocolError(f"protocol error: negative offset report {value}")
        self.reports += 1
        if self.request_offset < 0:
            master_max = self.service.store.max_phy_offset
            if value > master_max:
                raise ProtocolError(
                    f"protocol error: slave reports offset {value} beyond the master's max "
                    f"offset {master_max}"
                )
            self.request_offset = value
            self.ack_offset = value
            start = self._start_offset()
            self.transfer_start = self.next_transfer_offset = self.in_flight_end = start
            log.info("HA slave %s reports offset %d", self.address, value)
            self._spawn(self._write_loop(), "ha-write")
            return
        if value < self.ack_offset:
            raise ProtocolError(
                f"protocol error: report {value} goes back from the previous report "
                f"{self.ack_offset}"
            )
        limit = max(self.in_flight_end, self.request_offset)
        if value > limit:
            raise ProtocolError(
                f"protocol error: report {value} acknowledges bytes never sent (sent up to {limit})"
            )
        self.ack_offset = value
        if value > self.transfer_start:  # covers bytes this connection sent
            self.confirmed_offset = value

    # -- writer: transfer frames -----------------------------------------------------------
    def _start_offset(self) -> int:
        store = self.service.store
        if self.request_offset != 0:
            return self.request_offset
        if self.service.config.haSyncFromLastFile:
            top = store.max_phy_offset
            return max(0, top - top % store.mapped_file_size)
        return store.min_phy_offset

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        service = self.service
        store = service.store
        offset = self.transfer_start  # started by the first report: a master sends nothing before
        log.info("HA slave %s: transfer starts at offset %d", self.address, offset)
        last_write = time.monotonic()
        sock = self.sock
        unyielded = 0
        while True:
            config = service.config  # replaced as a whole when runtime keys change
            heartbeat = config.haSendHeartbeatInterval / 1000.0
            idle = time.monotonic() - last_write
            if idle >= heartbeat:
                await send_frame(loop, sock, offset, -1, 0, 0)
                last_write = time.monotonic()
                idle = 0.0
            region = store.get_commit_log_data(offset)
            if region is None or region.size <= 0:
                if region is None and offset < store.min_phy_offset:
                    raise ProtocolError(
                        f"slave needs offset {offset}, below the master's min offset "
                        f"{store.min_phy_offset} (removed by retention); it must be reseeded"
                    )
                wait = max(0.0, heartbeat - idle)
                if store.max_phy_offset > offset:  # readable soon (e.g. next file being created)
                    await asyncio.sleep(min(wait, _NO_DATA_RETRY))
                else:
                    if await store.wait_for_new_data(offset, max(wait, 0.001)):
                        await self._linger(config)
                continue
            # the whole readable region of this file, in frames of at most the batch size
            batch = config.haTransferBatchSize
            file_fd, position, left = region.file.fileno(), region.position, region.size
            while left > 0:
                size = min(left, batch)
                self.in_flight_end = offset + size
                await send_frame(loop, sock, offset, file_fd, position, size)
                offset += size
                position += size
                left -= size
                self.next_transfer_offset = offset
                self.sent_bytes += size
                self.sent_frames += 1
                # sendfile into a socket with room never suspends: without this a fast slave
                # would starve the broker's other tasks (HTTP, other slaves) during a catch-up
                unyielded += size
                if unyielded >= _YIELD_EVERY:
                    unyielded = 0
                    await asyncio.sleep(0)
            last_write = time.monotonic()

    async def _linger(self, config: BrokerConfig) -> None:
        """An ASYNC master lets new data gather for ``haAsyncTransferLingerMs`` before sending.

        Without it every produce costs its own frame, a wake-up of the slave and a report back;
        with it one frame run carries all the produces of those milliseconds. Only ASYNC: a SYNC
        producer is waiting for exactly this frame. (RocketMQ 4.9's ASYNC_MASTER does the same
        with a 100 ms poll: nothing wakes its transfer thread on a put.) Not while a clean stop
        drains the slaves, which also ends a linger under way (:meth:`end_linger`).
        """
        linger = config.haAsyncTransferLingerMs
        if (
            linger > 0
            and config.brokerRole is BrokerRole.ASYNC_MASTER
            and not self.service.draining
        ):
            self.lingers += 1
            loop = asyncio.get_running_loop()
            wake = self._linger_wake = loop.create_future()
            timer = loop.call_later(linger / 1000.0, _set_unless_done, wake)
            try:
                await wake
            finally:
                timer.cancel()
                self._linger_wake = None

    def end_linger(self) -> None:
        """Send what a lingering writer holds now (a clean stop is draining the slaves)."""
        _set_unless_done(self._linger_wake)

    # -- status ----------------------------------------------------------------------------
    def status(
        self, master_max: int, max_gap: int, max_silence: float = float("inf")
    ) -> dict[str, object]:
        """``inSync``: within ``max_gap`` bytes and heard from within ``max_silence`` s."""
        now = time.monotonic()
        lag = max(0, master_max - self.ack_offset)
        silent = now - self.last_report_at if self.last_report_at is not None else float("inf")
        return {
            "address": self.address,
            "ackOffset": self.ack_offset,
            "lagBytes": lag,
            "lastReportAgeMs": None
            if self.last_report_at is None
            else round((now - self.last_report_at) * 1000),
            "inSync": lag < max_gap and silent <= max_silence,
            "connectedSeconds": round(now - self.connected_at, 3),
            "requestOffset": self.request_offset,
            "confirmedOffset": self.confirmed_offset,
            "transferStart": self.transfer_start,
            "nextTransferOffset": self.next_transfer_offset,
            "sentBytes": self.sent_bytes,
            "sentFrames": self.sent_frames,
            "lingers": self.lingers,
            "authenticated": self.authenticated,
        }


def _set_unless_done(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def _describe(results: list[BaseException | None]) -> tuple[str, int]:
    """The reason a connection ended, from its two tasks' outcomes, and how loud to log it."""
    for result in results:
        if isinstance(result, ProtocolError):
            return str(result), logging.WARNING
    for result in results:
        if isinstance(result, PeerClosed):
            return str(result), logging.INFO
        if isinstance(result, OSError):
            return f"I/O error: {result}", logging.INFO
    for result in results:
        if isinstance(result, Exception):
            log.error("HA connection failed unexpectedly", exc_info=result)
            return f"internal error: {result!r}", logging.ERROR
    return "closed", logging.INFO
