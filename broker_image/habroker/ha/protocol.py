"""Classic HA wire format (spec §3.2, §3.3) and the socket primitives both sides share.

The protocol has no handshake, version or type field: the slave only ever sends 8-byte offset
reports and the master only ever sends 12-byte headers followed by raw commit-log bytes. Every
integer is big-endian and signed, as Java's ``ByteBuffer`` writes it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

REPORT = struct.Struct(">q")
"""Slave → master: int64 slave max physical offset (the next byte it needs)."""

HEADER = struct.Struct(">qi")
"""Master → slave: int64 physical offset of the first body byte, int32 body size."""

SLAVE_READ_BUFFER_SIZE = 4 * 1024 * 1024
"""A Java slave's receive buffer; a frame larger than this (header included) deadlocks it."""

MAX_BODY_SIZE = SLAVE_READ_BUFFER_SIZE - HEADER.size

CONNECT_TIMEOUT = 5.0
"""Seconds a slave waits for the TCP connect, as RocketMQ's HAClient does."""

# Linux: hold the header back so it leaves in the same segment as the sendfile'd body.
_MSG_MORE: int = getattr(socket, "MSG_MORE", 0)


class ProtocolError(Exception):
    """The peer broke the protocol; the message is the reason logged when dropping it."""


class PeerClosed(Exception):
    """The peer closed the connection (EOF), possibly in the middle of a frame."""


def check_header(offset: int, size: int, local: int, file_size: int) -> None:
    """A slave's check of the master's transfer header ``(offset, size)``; ProtocolError unless
    the body fits: ``local`` is the slave's next offset (0 for an empty log), ``file_size`` its
    ``mappedFileSizeCommitLog``."""
    if size < 0 or size > MAX_BODY_SIZE:
        raise ProtocolError(
            f"frame at offset {offset} claims body size {size} (allowed 0..{MAX_BODY_SIZE})"
        )
    if offset < 0:
        raise ProtocolError(f"frame claims negative offset {offset}")
    if local != 0 and offset != local:
        raise ProtocolError(
            f"offset mismatch: master pushed offset {offset}, slave max offset is {local}"
        )
    if size and local == 0 and offset % file_size:
        raise ProtocolError(
            f"first frame for an empty log starts at {offset}, not at a commit-log file "
            f"start (mappedFileSizeCommitLog={file_size})"
        )
    if offset % file_size + size > file_size:
        raise ProtocolError(
            f"frame [{offset}, {offset + size}) crosses a commit-log file boundary "
            f"(mappedFileSizeCommitLog={file_size}; both sides must use the same size)"
        )


class ReportReader:
    """The master's side: cuts what a slave sends into its 8-byte offset reports, keeping a
    report split across reads for the next one."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    @property
    def partial(self) -> int:
        """Bytes of a report still waiting for the rest."""
        return len(self._partial)

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        """The whole reports ``data`` completes (any int64: the connection judges them)."""
        if self._partial:
            data = self._partial + bytes(data)
        whole = len(data) - len(data) % REPORT.size
        values = [value for (value,) in REPORT.iter_unpack(data[:whole])]
        self._partial = bytes(data[whole:])
        return values


def tune_socket(sock: socket.socket) -> None:
    """Non-blocking with TCP_NODELAY: both Java sides set it, reports and acks are latency bound."""
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


class Readable:
    """A socket's readability, its fd registered with the loop once for the connection's life.

    ``loop.sock_recv_into`` adds and removes the reader around every wait: on a SYNC pair that
    is several ``epoll_ctl`` calls per message at both ends of the HA connection. The loop's
    polling is level-triggered, so a wait that starts after the data came still wakes at once.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self._loop = loop
        self._fd = sock.fileno()
        self._waiter: asyncio.Future[None] | None = None
        loop.add_reader(self._fd, self._ready)

    def _ready(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        self._waiter = waiter = self._loop.create_future()
        await waiter

    def close(self) -> None:
        self._loop.remove_reader(self._fd)


async def _wait_writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await fut
    finally:
        loop.remove_writer(fd)


async def send_all(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, data: bytes, flags: int = 0
) -> None:
    """Write all of ``data``, trying the syscall first and waiting only when the socket is full."""
    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view, flags)
        except (BlockingIOError, InterruptedError):
            await _wait_writable(loop, sock)
            continue
        view = view[sent:]


async def send_frame(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    offset: int,
    file_fd: int,
    position: int,
    size: int,
) -> None:
    """Header, then ``size`` bytes of the file at ``position`` via zero-copy ``os.sendfile``.

    The direct syscall loop (waiting for writability only on EAGAIN) avoids the per-call future
    and ``seek`` that ``loop.sock_sendfile`` adds, which matters at 32 KiB per frame.
    """
    await send_all(loop, sock, HEADER.pack(offset, size), _MSG_MORE if size else 0)
    out_fd = sock.fileno()
    while size > 0:
        try:
            sent = os.sendfile(out_fd, file_fd, position, size)
        except (BlockingIOError, InterruptedError):
            await _wait_writable(loop, sock)
            continue
        if sent == 0:
            raise OSError(f"commit-log file ended {size} bytes early at file position {position}")
        position += sent
        size -= sent
