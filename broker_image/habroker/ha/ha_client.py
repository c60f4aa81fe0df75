"""HAClient: the slave side of classic replication (spec §3.6).

It connects to haMasterAddress, reports its commit-log max offset (on connect, after every
append, and as a heartbeat), and appends each frame's bytes at the end of its own log after
checking the frame continues it. Bodies are appended as they arrive, chunk by chunk, straight
from one preallocated receive buffer, so nothing is copied twice and no frame is buffered
whole; a record cut in half simply waits in the log for its rest (the store's dispatcher
indexes only complete records).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from habroker.config import BrokerConfig, parse_host_port
from habroker.ha.handshake import HAAuth, HandshakeError
from habroker.ha.protocol import (
    CONNECT_TIMEOUT,
    HEADER,
    MAX_BODY_SIZE,
    REPORT,
    SLAVE_READ_BUFFER_SIZE,
    PeerClosed,
    ProtocolError,
    Readable,
    check_header,
    send_all,
    tune_socket,
)

if TYPE_CHECKING:
    from habroker.store.message_store import MessageStore

log = logging.getLogger(__name__)

# A failed connection is retried after a delay that starts at RECONNECT_BACKOFF_MIN and doubles
# up to RECONNECT_BACKOFF_MAX, each delay drawn from [backoff/2, backoff] so that the slaves of
# a restarted master do not knock in step. A refused connect is cheap; SYNC producers get
# SLAVE_NOT_AVAILABLE until the slave is back, so the cap is short (RocketMQ waits 5 s).
RECONNECT_BACKOFF_MIN = 0.1
RECONNECT_BACKOFF_MAX = 1.0
_YIELD_EVERY = 1 << 20  # bytes received without suspending before letting others run
_REPORT_EVERY = 4 << 20  # bytes appended between reports while more data is queued


class HAClient:
    """Replicates from one master at a time; the master can be switched at runtime."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        history_check: Callable[[str], Awaitable[str | None]] | None = None,
        auth: HAAuth | None = None,
    ) -> None:
        self.config = config
        self.store = store
        #: haAuthSecretFile: replicate only from a master that passes the handshake
        self.auth = auth
        #: before each connection: None to go on, else why not (see ReplicasManager)
        self.history_check = history_check
        self.master_address = config.haMasterAddress
        self.connected = False
        self.local_address: str | None = None  # our end of the HA connection, as the master sees it
        self.reconnects = 0
        self.last_error: str | None = None
        self.master_max_offset_seen = 0
        self.received_bytes = 0
        self.backoff_min = RECONNECT_BACKOFF_MIN
        self.backoff_max = RECONNECT_BACKOFF_MAX
        self._buffer = bytearray(SLAVE_READ_BUFFER_SIZE)
        self._task: asyncio.Task[None] | None = None
        self._conn_task: asyncio.Task[bool] | None = None
        self._switch: asyncio.Event | None = None
        self._last_read_at: float | None = None
        self._last_report_at: float | None = None
        self._reported = -1
        self._report_lock: asyncio.Lock | None = None
        # frame parser state, kept across reads
        self._header = bytearray(HEADER.size)
        self._header_len = 0
        self._body_left = 0
        self._write_offset = 0
        self._appended = 0

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._switch = asyncio.Event()
        self._report_lock = asyncio.Lock()
        self._task = asyncio.create_task(self._run(), name="ha-client")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def set_master_address(self, address: str) -> None:
        """Switch to ``host:port`` (or disconnect with ``""``) now, dropping any current master."""
        address = address.strip()
        if address:
            parse_host_port(address, key="haMasterAddress")
        if address == self.master_address:
            return
        log.info("HA master address changed from %r to %r", self.master_address, address)
        self.master_address = address
        if self._conn_task is not None:
            self._conn_task.cancel()
        if self._switch is not None:
            self._switch.set()

    def reconnect(self) -> None:
        """Drop the current connection (if any) and connect again at once: the history is
        checked anew (a new epoch, a re-pointed slave)."""
        if self._conn_task is not None:
            self._conn_task.cancel()
        if self._switch is not None:
            self._switch.set()

    # -- connection loop ---------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._switch is not None
        backoff = self.backoff_min
        attempts = 0
        while True:
            address = self.master_address
            if not address:
                await self._switch.wait()
                self._switch.clear()
                continue
            self._switch.clear()
            if attempts:
                self.reconnects += 1
            attempts += 1
            self._conn_task = asyncio.create_task(
                self._connect_and_serve(address), name=f"ha-client {address}"
            )
            try:
                await asyncio.wait([self._conn_task])
            except asyncio.CancelledError:
                self._conn_task.cancel()
                await asyncio.gather(self._conn_task, return_exceptions=True)
                raise
            progressed = (
                not self._conn_task.cancelled()
                and self._conn_task.exception() is None
                and self._conn_task.result()
            )
            self._conn_task = None
            if self._switch.is_set():  # new master address: connect at once
                backoff = self.backoff_min
                continue
            if progressed:
                backoff = self.backoff_min
                continue  # e.g. an offset mismatch after good frames: re-report at once
            delay = random.uniform(backoff / 2, backoff)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # not wait_for: it can swallow a stop
                    await self._switch.wait()
            backoff = min(backoff * 2, self.backoff_max)

    async def _connect_and_serve(self, address: str) -> bool:
        """One connection's life; True if it appended anything (the master is usable)."""
        loop = asyncio.get_running_loop()
        host, port = parse_host_port(address, key="haMasterAddress")
        sock: socket.socket | None = None
        self._appended = 0
        if self.history_check is not None:
            refused = await self.history_check(address)
            if refused is not None:
                self.last_error = refused
                return False
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            family, kind, proto, _, sockaddr = infos[0]
            sock = socket.socket(family, kind, proto)
            tune_socket(sock)
            async with asyncio.timeout(CONNECT_TIMEOUT):  # wait_for could swallow a switch
                await loop.sock_connect(sock, sockaddr)
        except (OSError, TimeoutError) as exc:
            if sock is not None:
                sock.close()
            self.last_error = f"connect to {address} failed: {exc or 'timeout'}"
            log.warning("HA %s", self.last_error)
            return False
        except BaseException:  # cancelled mid-connect (new address, stop)
            if sock is not None:
                sock.close()
            raise
        if self.auth is not None:  # before the first report: nothing is read from a stranger
            try:
                await self.auth.authenticate_master(sock)
            except HandshakeError as exc:
                sock.close()
                self.last_error = f"master {address}: {exc}"
                log.warning("HA connection to master %s closed: %s", address, exc)
                return False
            except BaseException:  # cancelled mid-handshake (new address, stop)
                sock.close()
                raise
            log.info("HA master %s authenticated", address)
        self.connected = True
        local = sock.getsockname()
        self.local_address = f"{local[0]}:{local[1]}"
        self._last_read_at = time.monotonic()
        self._header_len = self._body_left = 0
        self._reported = -1
        log.info(
            "HA connected to master %s, local max offset %d", address, self.store.max_phy_offset
        )
        reader = asyncio.create_task(self._read_loop(sock), name="ha-client-read")
        keeper = asyncio.create_task(self._keep_alive(sock), name="ha-client-keepalive")
        reason = "stopped"
        try:
            await asyncio.wait([reader, keeper], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            reason = "disconnecting (master address changed or HA client stopping)"
            raise
        finally:
            for task in (reader, keeper):
                task.cancel()
            results = await asyncio.gather(reader, keeper, return_exceptions=True)
            sock.close()
            self.connected = False
            self.local_address = None
            level = logging.INFO
            for result in results:
                if isinstance(result, ProtocolError):
                    reason, level = str(result), logging.WARNING
                    break
                if isinstance(result, PeerClosed | OSError):
                    reason = str(result) or repr(result)
                    break
                if isinstance(result, Exception):
                    log.error("HA client failed unexpectedly", exc_info=result)
                    reason, level = f"internal error: {result!r}", logging.ERROR
                    break
            if reason != "stopped" and not reason.startswith("disconnecting"):
                self.last_error = reason
            log.log(
                level,
                "HA connection to master %s closed: %s (local max offset %d)",
                address,
                reason,
                self.store.max_phy_offset,
            )
        return self._appended > 0

    # -- reports -----------------------------------------------------------------------------
    async def _report(self, sock: socket.socket, offset: int) -> None:
        assert self._report_lock is not None
        async with self._report_lock:
            await send_all(asyncio.get_running_loop(), sock, REPORT.pack(offset))
        self._reported = offset
        self._last_report_at = time.monotonic()

    async def _keep_alive(self, sock: socket.socket) -> None:
        """Heartbeat reports when idle; give up on a master that has gone silent."""
        assert self._report_lock is not None
        while True:
            heartbeat = self.config.haSendHeartbeatInterval / 1000.0
            housekeeping = self.config.haHousekeepingInterval / 1000.0
            await asyncio.sleep(max(0.005, min(1.0, heartbeat / 4, housekeeping / 4)))
            now = time.monotonic()
            silent = now - (self._last_read_at or now)
            if silent > housekeeping:
                raise ProtocolError(
                    f"housekeeping: nothing read from master for {silent * 1000:.0f} ms "
                    f"(haHousekeepingInterval={self.config.haHousekeepingInterval})"
                )
            since_report = now - (self._last_report_at or 0.0)
            if since_report >= heartbeat and not self._report_lock.locked():
                await self._report(sock, self.store.max_phy_offset)

    # -- frames ------------------------------------------------------------------------------
    async def _read_loop(self, sock: socket.socket) -> None:
        """Read, append, report.

        The report goes out when the socket is drained (so a caught-up slave acks each frame
        at once, as SYNC_MASTER producers need) and otherwise every _REPORT_EVERY bytes: during
        a catch-up a report per read would cost the slave a loopback send per megabyte.
        """
        loop = asyncio.get_running_loop()
        store = self.store
        view = memoryview(self._buffer)
        await self._report(sock, store.max_phy_offset)
        unyielded = 0
        readable = Readable(loop, sock)
        try:
            while True:
                try:
                    n = sock.recv_into(view)
                except (BlockingIOError, InterruptedError):
                    top = store.max_phy_offset
                    if top > self._reported:
                        await self._report(sock, top)
                    await readable.wait()
                    continue
                if n == 0:
                    where = ""
                    if self._body_left:
                        where = f" mid-frame ({self._body_left} body bytes missing)"
                    elif self._header_len:
                        where = f" mid-header ({self._header_len} of {HEADER.size} bytes)"
                    raise PeerClosed(f"master closed the connection{where}")
                self._last_read_at = time.monotonic()
                self.received_bytes += n
                self._dispatch(view[:n])
                top = store.max_phy_offset
                if top - self._reported >= _REPORT_EVERY:
                    await self._report(sock, top)
                # recv_into returns without suspending while data is queued: during a
                # catch-up the HTTP server and the keep-alive task would starve without this
                unyielded += n
                if unyielded >= _YIELD_EVERY:
                    unyielded = 0
                    await asyncio.sleep(0)
        finally:
            readable.close()

    def _dispatch(self, data: memoryview) -> None:
        """Parse the frames in ``data`` and append their bodies to the log.

        Bodies are first compacted to the front of ``data``, over the headers already parsed,
        so one store append (and one dispatcher pass) covers everything a read brought, up to
        a file end. Per 32 KiB frame, an append costs more than moving the bytes. The loop
        keeps its state in locals: it runs once per frame, tens of thousands of times per GB.
        """
        store = self.store
        file_size = store.mapped_file_size
        unpack_header = HEADER.unpack_from
        pos, end = 0, len(data)
        body_left, write_offset = self._body_left, self._write_offset
        run = 0  # body bytes gathered at data[0:run], destined for run_start
        run_start = write_offset
        try:
            while pos < end:
                if body_left == 0:
                    if self._header_len == 0 and end - pos >= 12:
                        offset, size = unpack_header(data, pos)
                        pos += 12
                    else:
                        take = min(HEADER.size - self._header_len, end - pos)
                        hl = self._header_len
                        self._header[hl : hl + take] = data[pos : pos + take]
                        self._header_len += take
                        pos += take
                        if self._header_len < HEADER.size:
                            break
                        self._header_len = 0
                        offset, size = HEADER.unpack(self._header)
                    local = run_start + run if run else store.max_phy_offset
                    if not (
                        offset == local != 0
                        and 0 <= size <= MAX_BODY_SIZE
                        and offset % file_size + size <= file_size
                    ):
                        check_header(offset, size, local, file_size)  # raises unless ok
                    if run and offset % file_size == 0:  # the next file starts: append the run
                        gathered, run = run, 0
                        self._append(run_start, data[:gathered])
                    if not run:
                        run_start = offset
                    write_offset = offset
                    body_left = size
                    self.master_max_offset_seen = offset + size
                    continue
                take = body_left if body_left < end - pos else end - pos
                if run != pos:
                    data[run : run + take] = data[pos : pos + take]
                run += take
                pos += take
                body_left -= take
                write_offset += take
        finally:
            self._body_left, self._write_offset = body_left, write_offset
            if run:  # what arrived before a protocol error is still good
                gathered, run = run, 0
                self._append(run_start, data[:gathered])

    def _append(self, offset: int, chunk: memoryview) -> None:
        if not self.store.append_to_commit_log(offset, chunk):
            raise ProtocolError(
                f"store refused {len(chunk)} bytes at offset {offset} "
                f"(local max offset {self.store.max_phy_offset})"
            )
        self._appended += len(chunk)

    # -- status ------------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        """The HA fields of the ``slave`` part of ``/v1/status`` plus counters for ``/metrics``."""
        now = time.monotonic()

        def age(at: float | None) -> int | None:
            return None if at is None else round((now - at) * 1000)

        top = self.store.max_phy_offset
        return {
            "masterAddress": self.master_address or None,
            "connected": self.connected,
            "localAddress": self.local_address,
            "maxOffset": top,
            "lastReportAgeMs": age(self._last_report_at),
            "lastMasterContactAgeMs": age(self._last_read_at),
            "masterMaxOffsetSeen": self.master_max_offset_seen,
            "reconnects": self.reconnects,
            "lastError": self.last_error,
            "masterLagBytes": max(0, self.master_max_offset_seen - top),
            "receivedBytes": self.received_bytes,
            "authRequired": self.auth is not None,
        }
