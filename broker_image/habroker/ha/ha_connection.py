"""HAConnection: the master's side of one slave connection (RocketMQ's read/write services).

The reader turns the slave's 8-byte reports into its ack offset; the writer streams the commit
log from the offset the first report asked for. Both run as tasks on the broker's loop; when
either ends, the connection is closed and one log line says why.

Reports are checked more strictly than RocketMQ does, because an ack releases SYNC_MASTER
producers: after the first report a slave can only acknowledge bytes this connection has put
on the wire, and its acks never go backwards. Anything else is garbage (or a misaligned
stream) and drops the connection.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import TYPE_CHECKING

from habroker.ha.protocol import REPORT, PeerClosed, ProtocolError, send_frame

if TYPE_CHECKING:
    from habroker.ha.ha_service import HAService

log = logging.getLogger(__name__)

_READ_BUFFER_SIZE = 64 * 1024
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
        self.ack_offset = -1  # the latest report
        self.next_transfer_offset = -1  # where the next frame starts
        self.in_flight_end = -1  # end of the frame being sent (the most a slave can ack)
        self.sent_bytes = 0
        self.reports = 0
        self._reported = asyncio.Event()
        self._close_reason: str | None = None
        self._close_level = logging.INFO
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def has_reported(self) -> bool:
        return self.request_offset >= 0

    def close(self, reason: str, level: int = logging.INFO) -> None:
        """Stop both sides; ``run`` logs ``reason`` and closes the socket."""
        if self._close_reason is None:
            self._close_reason = reason
            self._close_level = level
        for task in self._tasks:
            task.cancel()

    async def run(self) -> None:
        """Serve until the slave goes away, breaks the protocol, or ``close`` is called."""
        reader = asyncio.create_task(self._read_loop(), name=f"ha-read {self.address}")
        writer = asyncio.create_task(self._write_loop(), name=f"ha-write {self.address}")
        self._tasks = [reader, writer]
        try:
            await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in self._tasks:
                task.cancel()
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
            self.sock.close()
            reason, level = self._close_reason, self._close_level
            if reason is None:
                reason, level = _describe(results)
            log.log(
                level,
                "HA connection from slave %s closed: %s (acked %d, sent %d bytes)",
                self.address,
                reason,
                self.ack_offset,
                self.sent_bytes,
            )

    # -- reader: offset reports --------------------------------------------------------------
    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        buf = bytearray(_READ_BUFFER_SIZE)
        view = memoryview(buf)
        partial = b""
        while True:
            n = await loop.sock_recv_into(self.sock, view)
            if n == 0:
                if partial:
                    raise ProtocolError(f"slave closed mid-report ({len(partial)} of 8 bytes)")
                raise PeerClosed("slave closed the connection")
            self.last_read_at = time.monotonic()
            data = partial + view[:n] if partial else view[:n]
            whole = len(data) - len(data) % REPORT.size
            for (value,) in REPORT.iter_unpack(data[:whole]):
                self._accept_report(value)
            partial = bytes(data[whole:])
            if whole:
                self.last_report_at = self.last_read_at
                self.service.notify_transfer_some(self.ack_offset)

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
            self._reported.set()
            log.info("HA slave %s reports offset %d", self.address, value)
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
        await self._reported.wait()  # a master sends nothing before the first report
        offset = self._start_offset()
        self.next_transfer_offset = self.in_flight_end = offset
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
                    await store.wait_for_new_data(offset, max(wait, 0.001))
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
                # sendfile into a socket with room never suspends: without this a fast slave
                # would starve the broker's other tasks (HTTP, other slaves) during a catch-up
                unyielded += size
                if unyielded >= _YIELD_EVERY:
                    unyielded = 0
                    await asyncio.sleep(0)
            last_write = time.monotonic()

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
            "nextTransferOffset": self.next_transfer_offset,
            "sentBytes": self.sent_bytes,
        }


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
