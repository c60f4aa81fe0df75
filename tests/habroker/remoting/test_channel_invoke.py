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


# -- invoke_callback: the answer handed over from the read itself ---------------------------------
class Answers:
    """What callbacks got, with when; :meth:`wait` until ``n`` have come (5 s at most)."""

    def __init__(self) -> None:
        self.got: list[tuple[float, RemotingCommand | RemotingError]] = []
        self._more = asyncio.Event()

    def __call__(self, answer: RemotingCommand | RemotingError) -> None:
        self.got.append((asyncio.get_running_loop().time(), answer))
        self._more.set()

    async def wait(self, n: int) -> list[RemotingCommand | RemotingError]:
        async with asyncio.timeout(5):
            while len(self.got) < n:
                self._more.clear()
                await self._more.wait()
        return [answer for _, answer in self.got]


async def test_a_callback_gets_its_answer_from_the_read_and_leaves_nothing_behind(
    address: str,
) -> None:
    async with RemotingClient(timeout=2) as client:
        answers = Answers()
        assert not client.invoke_callback_now(address, ANSWER, None, b"x", answers)
        channel = await _channel(client, address)
        for i in range(3):
            sent = client.invoke_callback_now(address, ANSWER, None, bytes([i]), answers)
            assert sent and channel.callbacks, "written before invoke_callback_now returned"
        got = await answers.wait(3)
        assert [a.body_bytes for a in got if isinstance(a, RemotingCommand)] == [
            b"\0",
            b"\1",
            b"\2",
        ]
        assert not channel.callbacks and not channel.pending


async def test_a_callback_without_an_answer_gets_an_error_after_the_timeout(address: str) -> None:
    async with RemotingClient() as client:
        channel = await _channel(client, address)
        answers = Answers()
        started = asyncio.get_running_loop().time()
        channel.invoke_callback(RemotingCommand.request(SILENT), 0.3, answers)
        await answers.wait(1)
        when, answer = answers.got[0]
        assert isinstance(answer, RemotingError) and "no answer" in str(answer)
        assert 0.25 < when - started < 0.3 + 0.5 + 0.5, when - started  # timeout + one sweep
        assert not channel.callbacks


async def test_a_closed_connection_fails_every_callback_and_a_raising_one_spoils_nothing(
    address: str,
) -> None:
    async with RemotingClient() as client:
        channel = await _channel(client, address)
        answers = Answers()

        def raising(answer: RemotingCommand | RemotingError) -> None:
            raise RuntimeError("a caller's bug")

        channel.invoke_callback(RemotingCommand.request(SILENT), 30, raising)
        channel.invoke_callback(RemotingCommand.request(SILENT), 30, answers)
        channel.invoke_callback(RemotingCommand.request(HANG_UP), 30, answers)
        got = await answers.wait(2)
        assert len(got) == 2 and all(isinstance(a, RemotingError) for a in got), got
        assert all("closed" in str(a) for a in got)
        assert not channel.callbacks
        with pytest.raises(RemotingError, match="closed"):
            channel.invoke_callback(RemotingCommand.request(ANSWER), 1, answers)
