"""Loopback door into the local cluster: 127.0.0.1:PORT on the host -> TARGET inside a namespace.

The cluster lives in network namespaces of its own, with no address or route on the host. Host
clients (kubectl, helm, the suite, the demo) reach the apiserver, or a Service, through this
forwarder: it listens on the host's loopback, then moves itself into the cluster's namespace,
so every connection it opens starts there. It cannot reach anything outside the cluster's
namespaces, even by mistake, and it lives only as long as the cluster (`down` stops it first):
afterwards host clients get "connection refused", locally.

TLS passes through untouched (the apiserver's certificate names 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import socket

log = logging.getLogger("netforward")
CLONE_NEWNET = 0x40000000


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def enter_netns(path: str) -> None:
    """Move this (single-threaded) process into the network namespace at ``path``.

    Sockets made before keep the namespace they were made in: the listening socket stays on
    the host's loopback, every upstream connection starts inside the cluster."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Relay one direction until its source ends, then pass the end on as a half-close.

    The other direction stays open: a client that half-closes still gets its answer, and a
    server that closes after its last bytes leaves the client to read them and close in its own
    time. Closing the whole socket instead made the kernel reset it as soon as the client sent
    anything more (a websocket close or ping), throwing away what the client had not read yet:
    ``kubectl exec`` failed with "connection reset by peer" at the end of a long stream. If the
    destination is gone, the source is still read to its end (and dropped), for the same
    reason. A source that fails (reset) raises: the caller then drops both sides.
    """
    forwarding = True
    while data := await reader.read(65536):
        if forwarding and not writer.is_closing():
            try:
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                forwarding = False
        else:
            forwarding = False
    if forwarding and writer.can_write_eof():
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.write_eof()


async def relay(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Both directions until both have ended (or one side failed), then close both sockets."""
    tasks = [
        asyncio.ensure_future(pipe(client[0], upstream[1])),
        asyncio.ensure_future(pipe(upstream[0], client[1])),
    ]
    try:
        await asyncio.gather(*tasks)
    except (ConnectionError, OSError):
        pass  # one side reset the connection: nothing more can be relayed faithfully
    finally:
        for task in tasks:
            task.cancel()
        for _reader, writer in (client, upstream):
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()


async def serve(listener: socket.socket, target: tuple[str, int]) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.wait_for(asyncio.open_connection(*target), 10)
        except (OSError, TimeoutError) as exc:
            log.warning("cannot reach %s:%d: %s", *target, exc)
            client_w.close()
            return
        await relay((client_r, client_w), upstream)

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="127.0.0.1:PORT (on the host)")
    parser.add_argument("--netns", required=True, help="/run/netns/NAME of the cluster's side")
    parser.add_argument("--target", required=True, help="ADDRESS:PORT inside that namespace")
    parser.add_argument("--state-dir", required=True, help="the cluster's state dir (pid guard)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    host, port = split(args.listen)
    if socket.inet_aton(host)[0] != 127:
        parser.error("--listen must be a loopback address")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(128)
    listener.setblocking(False)
    enter_netns(args.netns)
    log.info("forwarding %s:%d (host) -> %s in %s", host, port, args.target, args.netns)
    asyncio.run(serve(listener, split(args.target)))


if __name__ == "__main__":
    main()
