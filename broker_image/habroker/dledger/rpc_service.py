"""DLedgerRpcService: the peers' RPCs over remoting frames, on the DLedger port.

A listener of its own (the peer's entry in ``dLegerPeers``), as RocketMQ runs DLedger's
NettyRemotingServer beside the broker's.  Outgoing requests reuse one connection per peer; a
peer that cannot be reached answers NETWORK_ERROR, like the Java service's failed future.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from habroker.dledger.protocol import (
    Body,
    DLedgerRequestCode,
    DLedgerResponseCode,
    decode,
    encode,
)
from habroker.remoting.channel import Channel, RemotingError
from habroker.remoting.client import RemotingClient
from habroker.remoting.command import RemotingCommand
from habroker.remoting.server import RemotingServer

log = logging.getLogger(__name__)

Handler = Callable[[Body], Awaitable[Body]]

#: the Java service's invokeAsync timeout
RPC_TIMEOUT_S = 3.0


class DLedgerRpcService:
    def __init__(self, peers: dict[str, str], self_id: str) -> None:
        self.peers = peers
        self.self_id = self_id
        self.server = RemotingServer(name=f"dledger-{self_id}")
        self.client = RemotingClient(timeout=RPC_TIMEOUT_S, connect_timeout=1.0)
        self.sent = 0
        self.failed = 0

    def register(
        self,
        code: DLedgerRequestCode,
        handler: Handler,
        decoder: Callable[[bytes | None], Body] = decode,
    ) -> None:
        async def process(request: RemotingCommand, _channel: Channel) -> RemotingCommand:
            try:
                body = decoder(request.body_bytes)
            except ValueError as exc:
                log.warning("dledger %s: bad %s body: %s", self.self_id, code.name, exc)
                reply: Body = {"code": int(DLedgerResponseCode.UNEXPECTED_ARGUMENT)}
            else:
                reply = await handler(body)
            # the remoting code is always DLedger's SUCCESS (200, as Java's DLedgerRpcNettyService
            # answers, not remoting's 0): the DLedger outcome is in the body
            return request.response(code=int(DLedgerResponseCode.SUCCESS), body=encode(reply))

        self.server.register(code, process)

    async def start(self, bind_host: str) -> None:
        _, _, port = self.peers[self.self_id].rpartition(":")
        await self.server.start(bind_host, int(port))

    async def stop(self) -> None:
        await self.server.stop()
        await self.client.close()

    async def call(
        self,
        peer_id: str,
        code: DLedgerRequestCode,
        body: Body,
        timeout: float = RPC_TIMEOUT_S,  # noqa: ASYNC109
    ) -> Body:
        """The peer's answer, or ``{"code": NETWORK_ERROR}`` when there is none in time."""
        self.sent += 1
        try:
            answer = await self.client.invoke(
                self.peers[peer_id], int(code), body=encode(body), timeout=timeout
            )
            return decode(answer.body_bytes)
        except (RemotingError, TimeoutError, OSError, ValueError) as exc:
            self.failed += 1
            log.debug("dledger %s → %s %s: %s", self.self_id, peer_id, code.name, exc)
            return {"code": int(DLedgerResponseCode.NETWORK_ERROR), "remoteId": peer_id}
