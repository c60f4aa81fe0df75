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
    decode_raw_push,
    encode,
)
from habroker.remoting.channel import Channel, RemotingError
from habroker.remoting.client import RemotingClient
from habroker.remoting.codes import ResponseCode
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
        self._register(code, handler, lambda request: decoder(request.body_bytes))

    def register_raw_push(self, handler: Handler) -> None:
        """PUSH_RAW: the fields in extFields, the entries' bytes as the body."""
        self._register(
            DLedgerRequestCode.PUSH_RAW,
            handler,
            lambda request: decode_raw_push(request.ext_fields, request.body_bytes),
        )

    def _register(
        self,
        code: DLedgerRequestCode,
        handler: Handler,
        decoder: Callable[[RemotingCommand], Body],
    ) -> None:
        async def process(request: RemotingCommand, _channel: Channel) -> RemotingCommand:
            try:
                body = decoder(request)
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
        return await self._invoke(peer_id, code, None, encode(body), timeout)

    async def call_raw_push(self, peer_id: str, fields: dict[str, str], entries: bytes) -> Body:
        """A PUSH_RAW's answer; ``{"code": UNSUPPORTED}`` from a peer that does not know the
        code (a Java peer answers REQUEST_CODE_NOT_SUPPORTED), NETWORK_ERROR as :meth:`call`."""
        return await self._invoke(peer_id, DLedgerRequestCode.PUSH_RAW, fields, entries)

    async def _invoke(
        self,
        peer_id: str,
        code: DLedgerRequestCode,
        fields: dict[str, str] | None,
        body: bytes,
        timeout: float = RPC_TIMEOUT_S,  # noqa: ASYNC109
    ) -> Body:
        self.sent += 1
        try:
            answer = await self.client.invoke(
                self.peers[peer_id], int(code), fields, body, timeout=timeout
            )
            if answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return {"code": int(DLedgerResponseCode.UNSUPPORTED), "remoteId": peer_id}
            return decode(answer.body_bytes)
        except (RemotingError, TimeoutError, OSError, ValueError) as exc:
            self.failed += 1
            log.debug("dledger %s → %s %s: %s", self.self_id, peer_id, code.name, exc)
            return {"code": int(DLedgerResponseCode.NETWORK_ERROR), "remoteId": peer_id}
