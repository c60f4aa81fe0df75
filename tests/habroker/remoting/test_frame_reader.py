"""FrameReader: frames read straight into their final buffer, and the Channel that reads with it.

The unit half drives the reader as a transport does (``get_buffer``, fill at most that much,
``buffer_updated``); the other half runs a real RemotingServer and RemotingClient over
127.0.0.1 sockets, plain and TLS, on asyncio's loop and on uvloop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop
from habroker.remoting import BadFrame, FrameDecoder, RemotingCommand
from habroker.remoting.channel import Channel
from habroker.remoting.client import RemotingClient
from habroker.remoting.command import LONG_FRAME_KEEP, RECEIVE_BUFFER
from habroker.remoting.server import RemotingServer
from habroker.remoting.tls import TlsMode, client_context, server_context

from tests.habroker.ha.ha_support import free_port
from tests.tls_certs import CertAuthority

ECHO = 9001  # a request code the test server answers with the request's body


def command(i: int, size: int, opaque: int = 0) -> RemotingCommand:
    cmd = RemotingCommand.request(ECHO, {"i": str(i)}, bytes([i % 251]) * size)
    cmd.opaque = opaque
    return cmd


def stream_of(sizes: list[int]) -> bytes:
    return b"".join(command(i, n).encode_bytes() for i, n in enumerate(sizes))


def assert_commands(got: list[RemotingCommand], sizes: list[int]) -> None:
    assert [int(c.ext_fields["i"]) for c in got] == list(range(len(sizes)))
    assert [c.body_bytes for c in got] == [bytes([i % 251]) * n for i, n in enumerate(sizes)]


# -- the reader ------------------------------------------------------------------------------
# with a 64-byte receive buffer the frames over 64 bytes take the dedicated-buffer path
SMALL_BUFFER_SIZES = [0, 1, 150, 7, 300, 20]


@pytest.mark.parametrize("buffer_size", [64, RECEIVE_BUFFER])
def test_a_stream_split_at_every_byte_boundary_decodes_the_same(buffer_size: int) -> None:
    stream = stream_of(SMALL_BUFFER_SIZES)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder(buffer_size=buffer_size)
        got = decoder.feed(stream[:cut])
        assert decoder.buffered == (cut - sum(len(c.encode_bytes()) for c in got))
        got += decoder.feed(stream[cut:])
        assert_commands(got, SMALL_BUFFER_SIZES)
        assert decoder.buffered == 0


@pytest.mark.parametrize("buffer_size", [64, RECEIVE_BUFFER])
def test_a_stream_read_one_byte_at_a_time_decodes_the_same(buffer_size: int) -> None:
    stream = stream_of(SMALL_BUFFER_SIZES)
    decoder = FrameDecoder(buffer_size=buffer_size)
    got: list[RemotingCommand] = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
    assert_commands(got, SMALL_BUFFER_SIZES)


def test_many_small_frames_in_one_read_are_cut_from_the_shared_buffer() -> None:
    sizes = [i % 97 for i in range(3000)]
    stream = stream_of(sizes)
    decoder = FrameDecoder()
    shared = decoder.get_buffer().obj
    got: list[RemotingCommand] = []
    pos = 0
    while pos < len(stream):  # what the transport does: fill what get_buffer offers
        buf = decoder.get_buffer()
        assert buf.obj is shared  # never a buffer per frame, never a grown one
        n = min(len(buf), len(stream) - pos)
        buf[:n] = stream[pos : pos + n]
        got += decoder.buffer_updated(n)
        pos += n
    assert_commands(got, sizes)
    assert decoder.buffered == 0


def test_a_large_frame_is_read_into_a_buffer_of_its_final_size() -> None:
    size = 3 * 1024 * 1024
    data = command(0, size).encode_bytes()
    decoder = FrameDecoder()
    assert decoder.feed(data[:1000]) == []
    rest = decoder.get_buffer()
    assert len(rest.obj) == len(data) - 4  # the frame without its length prefix
    assert len(rest) == len(data) - 1000
    (cmd,) = decoder.feed(data[1000:])
    assert cmd.body_bytes == b"\x00" * size
    assert decoder.get_buffer().obj is not rest.obj  # back to the shared buffer


def test_long_frames_up_to_the_keep_size_reuse_one_buffer() -> None:
    sizes = [LONG_FRAME_KEEP - 300, 100_000, 5, 200_000, LONG_FRAME_KEEP + 1, 150_000]
    decoder = FrameDecoder()
    buffers = []
    got: list[RemotingCommand] = []
    for i, size in enumerate(sizes):
        data = command(i, size).encode_bytes()
        got += decoder.feed(data[: RECEIVE_BUFFER + 10])
        if len(data) > RECEIVE_BUFFER + 10:
            rest = decoder.get_buffer()
            assert len(rest) == len(data) - RECEIVE_BUFFER - 10  # a view of the frame's size
            buffers.append(rest.obj)
        got += decoder.feed(data[RECEIVE_BUFFER + 10 :])
    # the first buffer served every long frame it could hold; the one over the keep size got
    # its own (not kept), and the next one reused the first again
    first = buffers[0]
    assert [b is first for b in buffers] == [True, True, True, False, True]
    # bodies are copies: reusing the buffer did not change an earlier command
    assert_commands(got, sizes)


@pytest.mark.parametrize("frame_max", [1000, RECEIVE_BUFFER, 300_000])
def test_a_frame_exactly_at_the_limit_passes_and_one_byte_over_is_refused(frame_max: int) -> None:
    at = exact_frame(frame_max)
    assert len(at) == frame_max
    (cmd,) = FrameDecoder(max_length=frame_max).feed(at)
    assert cmd.ext_fields["i"] == "0"
    over = exact_frame(frame_max + 1)
    decoder = FrameDecoder(max_length=frame_max)
    with pytest.raises(
        BadFrame, match=f"frame length {frame_max - 3} is outside 4..{frame_max - 4}"
    ):
        decoder.feed(over[:4])  # refused on its length alone, before any of it is read
    with pytest.raises(BadFrame):  # and the stream stays refused
        decoder.feed(over[4:])


def exact_frame(total: int, opaque: int = 1) -> bytes:
    """An ECHO request of exactly ``total`` bytes on the wire."""
    empty = len(command(0, 0, opaque).encode_bytes())
    return command(0, total - empty, opaque).encode_bytes()


# -- the channel, over real sockets ------------------------------------------------------------
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    directory = tmp_path_factory.mktemp("frame-certs")
    ca = CertAuthority.create(directory, "frames-ca")
    server = ca.issue(directory, "server")
    return ca.cert, server.cert, server.key


def echo(request: RemotingCommand, channel: Channel) -> RemotingCommand:
    return request.response(header={"i": request.ext_fields["i"]}, body=request.body)


async def serve(frame_max: int, tls: ssl.SSLContext | None) -> tuple[RemotingServer, str]:
    server = RemotingServer(
        frame_max=frame_max,
        tls_mode=TlsMode.ENFORCING if tls is not None else TlsMode.DISABLED,
        tls_context=tls,
    )
    server.register(ECHO, echo)
    port = free_port()
    await server.start("127.0.0.1", port)
    return server, f"127.0.0.1:{port}"


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_small_and_large_frames_both_ways_over_a_channel(
    loop: str, tls: bool, tls_files: tuple[Path, Path, Path]
) -> None:
    ca, cert, key = tls_files
    sizes = [i * 37 % 5000 for i in range(300)] + [1_500_000, 0, 200_000, 2_500_000, 3]

    async def main() -> None:
        if loop == "uvloop":
            assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        server, address = await serve(
            8 * 1024 * 1024, server_context(str(cert), str(key)) if tls else None
        )
        client = RemotingClient(timeout=30, tls=client_context(ca_path=str(ca)) if tls else None)
        try:
            answers = await asyncio.gather(
                *(
                    client.invoke(address, ECHO, {"i": i}, bytes([i % 251]) * n)
                    for i, n in enumerate(sizes)
                )
            )
            assert_commands(list(answers), sizes)
            (channel,) = server.channels  # one connection carried them all
            assert channel.is_open
        finally:
            await client.close()
            await server.stop()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


async def closed_unanswered(reader: asyncio.StreamReader) -> bool:
    """The peer closed without answering (a reset: it closed with our bytes unread)."""
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_the_server_takes_a_frame_at_its_limit_and_closes_on_one_byte_over(
    loop: str, tls: bool, tls_files: tuple[Path, Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    ca, cert, key = tls_files
    frame_max = 300_000

    async def main() -> None:
        server, address = await serve(
            frame_max, server_context(str(cert), str(key)) if tls else None
        )
        host, _, port = address.rpartition(":")
        context = client_context(ca_path=str(ca)) if tls else None
        try:
            reader, writer = await asyncio.open_connection(host, int(port), ssl=context)
            writer.write(exact_frame(frame_max, opaque=5))
            (length,) = struct.unpack(">i", await reader.readexactly(4))
            (answer,) = FrameDecoder().feed(
                struct.pack(">i", length) + await reader.readexactly(length)
            )
            assert answer.opaque == 5
            assert len(answer.body_bytes) == frame_max - len(command(0, 0, 5).encode_bytes())
            writer.write(exact_frame(frame_max + 1, opaque=6))
            assert await closed_unanswered(reader)
            writer.close()
        finally:
            await server.stop()

    with (
        caplog.at_level(logging.WARNING, logger="habroker.remoting.channel"),
        asyncio.Runner(loop_factory=LOOPS[loop]) as runner,
    ):
        runner.run(main())
    refusals = [
        r.getMessage() for r in caplog.records if "closing remoting connection" in r.getMessage()
    ]
    assert len(refusals) == 1
    assert f"frame length {frame_max - 3} is outside 4..{frame_max - 4}" in refusals[0]
