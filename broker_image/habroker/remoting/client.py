"""RemotingClient: requests to brokers and name servers by address, one channel per address.

What habroker itself calls out with (a slave's metadata copy, registration with a name server)
and what :mod:`habroker.client` builds on.  Channels are opened on first use and reopened after
a close; concurrent requests share a channel (answers are matched by opaque).  With an
``ssl.SSLContext`` (:func:`habroker.remoting.tls.client_context`) every channel speaks TLS, as a
RocketMQ client started with ``-Dtls.enable=true`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from habroker.remoting.channel import AnswerCallback, Channel, RemotingError, RequestDispatcher
from habroker.remoting.codes import ResponseCode, code_name
from habroker.remoting.command import Body, RemotingCommand, SerializeType

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 3.0


class BrokerResponseError(Exception):
    """An answer with a non-SUCCESS code the caller did not expect."""

    def __init__(self, code: int, remark: str | None, address: str, request: int) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{address} answered {code_name(request)} with {name}: {remark or ''}")
        self.code = code
        self.remark = remark or ""
        self.address = address


class RemotingClient:
    def __init__(
        self,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = 3.0,
        serialize_type: SerializeType = SerializeType.JSON,
        dispatcher: RequestDispatcher | None = None,
        rpc_hook: Callable[[RemotingCommand], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``rpc_hook`` sees every request before it is sent (RocketMQ's RPCHook.doBeforeRequest):
        :func:`habroker.remoting.acl.rpc_hook` signs requests for an ACL-enabled broker."""
        self.timeout = timeout
        self.rpc_hook = rpc_hook
        self.tls = tls
        self.connect_timeout = connect_timeout
        self.serialize_type = serialize_type
        self.dispatcher = dispatcher
        self._channels: dict[str, Channel] = {}
        self._connecting: dict[str, asyncio.Future[Channel]] = {}

    async def channel(self, address: str) -> Channel:
        """The open channel to ``address``, connecting once however many callers ask at once.

        The attempt is a task of its own: a caller that is cancelled while it waits leaves the
        attempt (and every other caller waiting on it) alone.
        """
        found = self._channels.get(address)
        if found is not None and found.is_open:
            return found
        attempt = self._connecting.get(address)
        if attempt is None:
            attempt = asyncio.ensure_future(self._connect(address))
            self._connecting[address] = attempt
            attempt.add_done_callback(lambda done: self._connected(address, done))
        return await asyncio.shield(attempt)

    def _connected(self, address: str, attempt: asyncio.Future[Channel]) -> None:
        if self._connecting.get(address) is attempt:
            del self._connecting[address]
        if not attempt.cancelled() and attempt.exception() is None:
            self._channels[address] = attempt.result()

    async def _connect(self, address: str) -> Channel:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise RemotingError(f"not a host:port address: {address!r}")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(
                    lambda: Channel(self.dispatcher),
                    host.strip("[]"),
                    int(port),
                    ssl=self.tls,
                    server_hostname=host.strip("[]") if self.tls is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            raise RemotingError(f"cannot connect to {address}: {exc or 'timed out'}") from None
        return protocol

    async def invoke(
        self,
        address: str,
        code: int,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> RemotingCommand:
        """Send a request and return the answer, whatever its code."""
        request = RemotingCommand.request(code, header, body, serialize_type=self.serialize_type)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        channel = await self.channel(address)
        return await channel.invoke(request, timeout or self.timeout)

    def invoke_now(
        self,
        address: str,
        code: int,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
        *,
        timeout: float | None = None,
    ) -> asyncio.Future[RemotingCommand] | None:
        """:meth:`invoke` written before this returns, on a channel that is already open; None
        when there is none (then :meth:`invoke` connects)."""
        ready = self._ready_request(address, code, header, body)
        if ready is None:
            return None
        channel, request = ready
        return channel.invoke_future(request, timeout or self.timeout)

    def invoke_callback_now(
        self,
        address: str,
        code: int,
        header: Mapping[str, Any] | None,
        body: Body | None,
        callback: AnswerCallback,
        *,
        timeout: float | None = None,
    ) -> bool:
        """:meth:`invoke_now` with ``callback`` given the answer (or the
        :class:`~habroker.remoting.channel.RemotingError`) as
        :meth:`~habroker.remoting.channel.Channel.invoke_callback` does; False, and nothing
        sent, when no channel is open yet."""
        ready = self._ready_request(address, code, header, body)
        if ready is None:
            return False
        channel, request = ready
        channel.invoke_callback(request, timeout or self.timeout, callback)
        return True

    def _ready_request(
        self, address: str, code: int, header: Mapping[str, Any] | None, body: Body | None
    ) -> tuple[Channel, RemotingCommand] | None:
        """The open channel to ``address`` and the request for it (the RPC hook applied), or
        None when no channel is open yet."""
        channel = self._channels.get(address)
        if channel is None or not channel.is_open:
            return None
        request = RemotingCommand.request(code, header, body, serialize_type=self.serialize_type)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        return channel, request

    async def call(
        self,
        address: str,
        code: int,
        header: Mapping[str, Any] | None = None,
        body: Body | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """Like :meth:`invoke`, raising :class:`BrokerResponseError` unless the code is in ``ok``."""
        answer = await self.invoke(address, code, header, body, timeout=timeout)
        if answer.code not in ok:
            raise BrokerResponseError(answer.code, answer.remark, address, code)
        return answer

    async def oneway(
        self, address: str, code: int, header: Mapping[str, Any] | None = None
    ) -> None:
        channel = await self.channel(address)
        request = RemotingCommand.request(code, header, serialize_type=self.serialize_type)
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        channel.send_oneway(request)

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            channel.close()
        for channel in channels:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(channel.closed), 1.0)

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
