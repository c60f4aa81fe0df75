"""Loopback door to the local cluster's apiserver: 127.0.0.1:PORT -> NODE_IP:PORT.

The apiserver listens on the node address the bring-up creates, because pods must reach it
there. A kubeconfig naming that address is dangerous on the host: once the cluster is down the
address is gone, and a client still holding the kubeconfig would route its requests off the
machine. The kubeconfig the scripts export therefore names 127.0.0.1, served by this forwarder,
which lives only as long as the cluster and refuses to dial the node address once it has left
the machine. With the cluster down, host clients get "connection refused", locally.

TLS passes through untouched (the apiserver's certificate names 127.0.0.1 too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket

log = logging.getLogger("apiforward")


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def is_local(host: str) -> bool:
    """Is ``host`` assigned to an interface here? (Binding to it succeeds only then.)"""
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:
            return False
    return True


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if not is_local(target[0]):
            log.warning("node address %s is not on this machine: refusing to forward", target[0])
            client_w.close()
            return
        try:
            upstream_r, upstream_w = await asyncio.wait_for(asyncio.open_connection(*target), 10)
        except (OSError, TimeoutError) as exc:
            log.warning("cannot reach the apiserver at %s:%d: %s", *target, exc)
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, upstream_w), pipe(upstream_r, client_w))

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    log.info("forwarding %s:%d -> %s:%d", *listen, *target)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="127.0.0.1:PORT")
    parser.add_argument("--target", required=True, help="NODE_IP:PORT")
    parser.add_argument("--state-dir", required=True, help="the cluster's state dir (pid guard)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    listen = split(args.listen)
    if socket.inet_aton(listen[0])[0] != 127:
        parser.error("--listen must be a loopback address")
    asyncio.run(serve(listen, split(args.target)))


if __name__ == "__main__":
    main()
