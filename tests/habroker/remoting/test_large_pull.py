"""Large pull answers: sent with ``sendfile`` from the commit log (Channel._send_direct), they
must reach the consumer whole and in order, however little the socket takes at a time."""

from __future__ import annotations

import asyncio
import mmap
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from habroker.local import LocalBroker
from habroker.message import decode_records
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.channel import SENDFILE_MIN_BODY, Channel
from habroker.remoting.client import RemotingClient
from habroker.remoting.command import FrameDecoder
from habroker.remoting.tls import client_context

from tests.habroker.remoting.test_remoting_server import RawPeer, create_topic, send_header
from tests.habroker.remoting.test_remoting_tls import BrokerFactory, Certs, tls_keys

TOPIC = "large"
MESSAGES = 2200
BODY = 1000


def body_of(i: int) -> bytes:
    return f"message {i} ".encode().ljust(BODY, b".")


SEND_HEADER = send_header(TOPIC, 0, queues=2)


def send_frame(i: int) -> bytes:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, SEND_HEADER, body_of(i))
    cmd.opaque = i + 1
    return cmd.encode_bytes()


def pull_header(offset: int, max_nums: int) -> dict[str, object]:
    return {
        "consumerGroup": "large_consumer",
        "topic": TOPIC,
        "queueId": 0,
        "queueOffset": offset,
        "maxMsgNums": max_nums,
        "sysFlag": 0x4,  # the subscription comes with the request
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }


def pull_frame(offset: int, max_nums: int, opaque: int) -> bytes:
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, pull_header(offset, max_nums))
    cmd.opaque = opaque
    return cmd.encode_bytes()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    # 1 MiB commit-log files: a pull of 1024 messages spans two or three of them
    b = LocalBroker(tmp_path_factory.mktemp("large") / "b", mappedFileSizeCommitLog=1 << 20)
    b.start()
    peer = RawPeer(b.address)
    create_topic(peer, TOPIC)
    for start in range(0, MESSAGES, 100):
        peer.send(b"".join(send_frame(i) for i in range(start, min(start + 100, MESSAGES))))
        for _ in range(start, min(start + 100, MESSAGES)):
            assert peer.read().code == ResponseCode.SUCCESS
    peer.close()
    yield b
    b.stop()


def check_answer(answer: RemotingCommand, offset: int, max_nums: int) -> None:
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    messages = decode_records(answer.body_bytes)
    expected = range(offset, min(offset + max_nums, MESSAGES))
    assert [m.queue_offset for m in messages] == list(expected)
    assert [bytes(m.body) for m in messages] == [body_of(i) for i in expected]
    assert int(answer.ext_fields["nextBeginOffset"]) == expected.stop


def test_large_pulls_to_a_slow_reader_arrive_whole_and_in_order(broker: LocalBroker) -> None:
    """Pipelined pulls, large (sendfile) and small (the transport) mixed, to a consumer with a
    tiny receive buffer that reads nothing for a second: the broker sends what the socket
    takes and queues the rest, and every answer arrives intact, in the order asked."""
    pulls = [(0, 1024), (1024, 5), (1030, 1024), (2054, 1024), (100, 1024), (7, 3)]
    assert (1024 - 1) * BODY > SENDFILE_MIN_BODY  # the large ones take the sendfile path
    host, _, port = broker.address.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    with sock:
        sock.sendall(b"".join(pull_frame(o, n, k + 1) for k, (o, n) in enumerate(pulls)))
        time.sleep(1.0)
        decoder, answers = FrameDecoder(), []
        while len(answers) < len(pulls):
            data = sock.recv(65536)
            assert data, "the broker closed the connection"
            answers.extend(decoder.feed(data))
    assert [a.opaque for a in answers] == list(range(1, len(pulls) + 1))
    for answer, (offset, max_nums) in zip(answers, pulls, strict=True):
        check_answer(answer, offset, max_nums)
    assert "Traceback" not in broker.tail_log(200)


async def test_a_body_part_whose_file_was_closed_goes_from_its_view(tmp_path: Path) -> None:
    """Retention may close a commit-log file between the pull and its answer: that part is
    sent from the mapping its view keeps alive, the parts before it with sendfile."""
    data = os.urandom(3 * SENDFILE_MIN_BODY)
    path = tmp_path / "00000000000000000000"
    path.write_bytes(data)
    third = len(data) // 3
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:  # noqa: ASYNC230
        closed = open(path, "rb")  # noqa: SIM115, ASYNC230 - closed at once, as retention would
        closed.close()
        view = memoryview(mm)
        answer = RemotingCommand(ResponseCode.SUCCESS, opaque=7, flag=1)
        answer.body_parts = [view[:third], view[third : 2 * third], view[2 * third :]]
        answer.body_files = [(f, 0), (closed, third), (f, 2 * third)]
        loop = asyncio.get_running_loop()
        with socket.create_server(("127.0.0.1", 0)) as srv:
            reader = socket.create_connection(srv.getsockname())
            accepted, _ = srv.accept()
        transport, channel = await loop.connect_accepted_socket(Channel, accepted)
        assert channel._raw is not None  # plain TCP: the direct path is open to it
        reader.setblocking(False)
        channel.write(answer)
        decoder, got = FrameDecoder(), []
        while not got:
            got = decoder.feed(await loop.sock_recv(reader, 1 << 20))
        transport.close()
        reader.close()
        assert got[0].opaque == 7
        assert got[0].body_bytes == data
        del view, answer, got


async def test_a_large_pull_over_tls_is_encrypted_like_any_answer(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """TLS connections never take the direct path (it would put plain bytes into the TLS
    stream): a large pull over TLS decodes like any other answer."""
    certs = Certs(tmp_path / "certs")
    srv = broker_factory(**tls_keys("enforcing", certs.server))
    count = 400  # 400 KB of bodies: past SENDFILE_MIN_BODY
    async with RemotingClient(tls=client_context(ca_path=str(certs.ca.cert))) as client:
        await client.call(
            srv.address,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
        )
        for i in range(count):
            await client.call(srv.address, RequestCode.SEND_MESSAGE_V2, SEND_HEADER, body_of(i))
        answer = await client.call(srv.address, RequestCode.PULL_MESSAGE, pull_header(0, 1024))
    assert len(answer.body_bytes) > SENDFILE_MIN_BODY
    messages = decode_records(answer.body_bytes)
    assert [bytes(m.body) for m in messages] == [body_of(i) for i in range(count)]
