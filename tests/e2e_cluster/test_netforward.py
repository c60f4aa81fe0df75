"""e2e/cluster/netforward.py, the loopback door to the cluster's apiserver, relays TCP the way
TCP works: an end passes on as a half-close and the other direction goes on, so a client that
reads late still gets every byte a server sent before closing. (Closing the whole socket made
`kubectl exec` streams end with "connection reset by peer" under load.) The forwarder's relay
runs here in-process between real sockets on 127.0.0.1; its namespace hop is not part of it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("netforward", ROOT / "e2e/cluster/netforward.py")
assert _spec is not None and _spec.loader is not None
netforward = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netforward)

Upstream = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
ANSWER = bytes(range(256)) * 8192  # 2 MiB


def forwarder(upstream: Upstream) -> Iterator[int]:
    """A running forwarder (its port) to an upstream server with the given handler."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port: list[int] = []
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        target = server.sockets[0].getsockname()[:2]
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port.append(listener.getsockname()[1])
        task = asyncio.ensure_future(netforward.serve(listener, target))
        ready.set()
        await stop[0].wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        server.close()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(10)
        loop.close()


def read_to_end(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(1 << 16):
        out += chunk
    return bytes(out)


@pytest.fixture
def answer_after_eof() -> Iterator[int]:
    async def upstream(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        request = await r.read()  # to the client's end
        w.write(request.upper() + ANSWER)
        await w.drain()
        w.close()

    yield from forwarder(upstream)


@pytest.fixture
def answer_then_end() -> Iterator[int]:
    """A server that sends its answer and its end at once (FIN), then reads what the client
    still says until the client ends too, like a websocket server's close."""

    async def upstream(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(ANSWER)
        w.write_eof()
        await r.read()
        w.close()

    yield from forwarder(upstream)


def test_a_client_that_half_closes_still_gets_the_answer(answer_after_eof: int) -> None:
    with socket.create_connection(("127.0.0.1", answer_after_eof), timeout=10) as sock:
        sock.sendall(b"request")
        sock.shutdown(socket.SHUT_WR)
        got = read_to_end(sock)
    assert got == b"REQUEST" + ANSWER


def test_a_late_reader_gets_every_byte_a_server_sent_before_its_end(answer_then_end: int) -> None:
    """The server ends at once; the client keeps sending for a while (a websocket ping, a close
    frame) and reads only afterwards: no reset, nothing lost."""
    with socket.create_connection(("127.0.0.1", answer_then_end), timeout=10) as sock:
        for _ in range(20):
            sock.sendall(b"ping")
            time.sleep(0.01)
        time.sleep(0.3)
        got = read_to_end(sock)
    assert len(got) == len(ANSWER) and got == ANSWER
