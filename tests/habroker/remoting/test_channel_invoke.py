"""A request's answer future (``Channel.invoke_future``, what ``invoke`` and a DLedger leader's
pushes wait on): answered, timed out, failed by a closed connection or given up by its caller,
it never stays in the channel's table of pending requests.

The peer is a real socket server in the test's loop that reads frames and, per request code,
answers, stays silent or hangs up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from habroker.remoting import RemotingCommand
from habroker.remoting.channel import Channel, RemotingError
from habroker.remoting.client import RemotingClient
from habroker.remoting.command import FrameDecoder

ANSWER, SILENT, HANG_UP = 1, 2, 3


async def _peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    decoder = FrameDecoder()
    try:
        while data := await reader.read(65536):
            for cmd in decoder.feed(data):
                if cmd.code == HANG_UP:
                    writer.close()
                    return
                if cmd.code == ANSWER:
                    answer = cmd.response(remark="answered", body=cmd.body_bytes)
                    answer.opaque = cmd.opaque
                    answer.flag |= 1
                    writer.write(answer.encode_bytes())
    finally:
        writer.close()


@pytest.fixture
async def address() -> AsyncIterator[str]:
    server = await asyncio.start_server(_peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def _channel(client: RemotingClient, address: str) -> Channel:
    await client.invoke(address, ANSWER, body=b"hello")
    return await client.channel(address)


async def test_an_answer_completes_the_future_and_leaves_nothing_pending(address: str) -> None:
    async with RemotingClient(timeout=2) as client:
        assert client.invoke_now(address, ANSWER) is None, "no channel yet: nothing is sent"
        channel = await _channel(client, address)
        waiter = client.invoke_now(address, ANSWER, body=b"ping")
        assert waiter is not None and channel.pending, "written before invoke_now returned"
        answer = await asyncio.wait_for(waiter, 2)
        assert (answer.remark, answer.body_bytes) == ("answered", b"ping")
        assert not channel.pending


async def test_no_answer_fails_after_the_timeout(address: str) -> None:
    async with RemotingClient() as client:
        channel = await _channel(client, address)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(RemotingError, match=r"no answer .* within 0\.3s"):
            await channel.invoke(RemotingCommand.request(SILENT), 0.3)
        waited = loop.time() - started
        assert 0.25 < waited < 2, waited
        assert not channel.pending
        answer = await channel.invoke(RemotingCommand.request(ANSWER), 2)
        assert answer.remark == "answered", "the channel still serves after a timeout"


async def test_a_closed_connection_fails_the_waiting_request_at_once(address: str) -> None:
    async with RemotingClient() as client:
        channel = await _channel(client, address)
        silent = channel.invoke_future(RemotingCommand.request(SILENT), 30)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(RemotingError, match="closed"):
            await channel.invoke(RemotingCommand.request(HANG_UP), 30)
        with pytest.raises(RemotingError, match="closed"):
            await silent
        assert loop.time() - started < 5, "failed by the close, not by the 30 s timeout"
        assert not channel.pending
        with pytest.raises(RemotingError, match="closed"):
            channel.invoke_future(RemotingCommand.request(ANSWER), 1)


async def test_a_caller_that_gives_up_leaves_nothing_pending(address: str) -> None:
    async with RemotingClient() as client:
        channel = await _channel(client, address)
        task = asyncio.ensure_future(channel.invoke(RemotingCommand.request(SILENT), 30))
        await asyncio.sleep(0.05)
        assert len(channel.pending) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the future's done callbacks run
        assert not channel.pending
        answer = await channel.invoke(RemotingCommand.request(ANSWER), 2)
        assert answer.remark == "answered"
