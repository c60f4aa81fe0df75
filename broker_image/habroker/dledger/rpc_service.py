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

#: a peer RPC's handler: the answer at once, or an awaitable of it
Handler = Callable[[Body], Body | Awaitable[Body]]

#: the Java service's invokeAsync timeout
RPC_TIMEOUT_S = 3.0
#: a PUSH_RAW field by which the leader asks for the DLedger code as the remoting code
ANSWER_FIELD, ANSWER_CODE = "answer", "code"


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
        """PUSH_RAW: the fields in extFields, the entries' bytes as the body.  A leader that
        asks for it (``answer=code``) is answered with the DLedger code as the remoting code
        and no body: all it reads, two answers per produce batch."""
        self._register(
            DLedgerRequestCode.PUSH_RAW,
            handler,
            lambda request: decode_raw_push(request.ext_fields, request.body_bytes),
            compact=lambda request: request.ext_fields.get(ANSWER_FIELD) == ANSWER_CODE,
        )

    def _register(
        self,
        code: DLedgerRequestCode,
        handler: Handler,
        decoder: Callable[[RemotingCommand], Body],
        compact: Callable[[RemotingCommand], bool] | None = None,
    ) -> None:
        def respond(request: RemotingCommand, reply: Body) -> RemotingCommand:
            if compact is not None and compact(request):
                return request.response(code=int(reply.get("code", DLedgerResponseCode.UNKNOWN)))
            # the remoting code is always DLedger's SUCCESS (200, as Java's DLedgerRpcNettyService
            # answers, not remoting's 0): the DLedger outcome is in the body
            return request.response(code=int(DLedgerResponseCode.SUCCESS), body=encode(reply))

        async def later(request: RemotingCommand, pending: Awaitable[Body]) -> RemotingCommand:
            return respond(request, await pending)

        def process(
            request: RemotingCommand, _channel: Channel
        ) -> RemotingCommand | Awaitable[RemotingCommand]:
            try:
                body = decoder(request)
            except ValueError as exc:
                log.warning("dledger %s: bad %s body: %s", self.self_id, code.name, exc)
                return respond(request, {"code": int(DLedgerResponseCode.UNEXPECTED_ARGUMENT)})
            reply = handler(body)
            if isinstance(reply, dict):  # answered at once: no task
                return respond(request, reply)
            return later(request, reply)

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

    def raw_push_now(
        self,
        peer_id: str,
        fields: dict[str, str],
        entries: bytes,
        on_answer: Callable[[Body], None],
    ) -> bool:
        """:meth:`call_raw_push` sent before this returns, ``on_answer`` called with the answer
        (no task between the leader's append and the socket); False, and nothing sent, when
        there is no open connection to the peer yet."""
        code = DLedgerRequestCode.PUSH_RAW

        def answered(answer: RemotingCommand | RemotingError) -> None:
            if isinstance(answer, RemotingError):
                on_answer(self._failure(peer_id, code, answer))
                return
            try:
                on_answer(self._raw_push_answer(peer_id, answer))
            except ValueError as bad:
                on_answer(self._failure(peer_id, code, bad))

        try:
            sent = self.client.invoke_callback_now(
                self.peers[peer_id],
                int(code),
                {**fields, ANSWER_FIELD: ANSWER_CODE},
                entries,
                answered,
                timeout=RPC_TIMEOUT_S,
            )
        except RemotingError:
            sent = False
        if sent:
            self.sent += 1
        return sent

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
            return self._body_of(peer_id, answer)
        except (RemotingError, TimeoutError, OSError, ValueError) as exc:
            return self._failure(peer_id, code, exc)

    @classmethod
    def _raw_push_answer(cls, peer_id: str, answer: RemotingCommand) -> Body:
        """A PUSH_RAW's answer: the code alone, or a JSON body from a peer that does not
        answer that way (a habroker before compact answers)."""
        if answer.body_bytes or answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return cls._body_of(peer_id, answer)
        return {"code": answer.code, "remoteId": peer_id}

    @staticmethod
    def _body_of(peer_id: str, answer: RemotingCommand) -> Body:
        if answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return {"code": int(DLedgerResponseCode.UNSUPPORTED), "remoteId": peer_id}
        return decode(answer.body_bytes)

    def _failure(self, peer_id: str, code: DLedgerRequestCode, why: object) -> Body:
        self.failed += 1
        log.debug("dledger %s → %s %s: %s", self.self_id, peer_id, code.name, why)
        return {"code": int(DLedgerResponseCode.NETWORK_ERROR), "remoteId": peer_id}
