"""A real ``habroker serve`` process against good and bad remoting traffic on its client port.

Every bad input closes only the connection that sent it, or is answered with an error code;
a client connected the whole time keeps being served, and the broker logs one line per bad peer.
"""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from habroker.remoting.command import FrameDecoder


class RawPeer:
    """A blocking socket speaking frames by hand: what a client (or an attacker) would send."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, cmd: RemotingCommand, opaque: int = 1) -> RemotingCommand:
        cmd.opaque = opaque
        self.send(cmd.encode_bytes())
        return self.read()

    def read(self) -> RemotingCommand:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def closed_by_broker(self, within: float = 5.0) -> bool:
        self.sock.settimeout(within)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def frame(kind: int, header: bytes, body: bytes = b"") -> bytes:
    return (
        struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body
    )


GARBAGE = {
    "length over the 16 MiB frame limit": struct.pack(">i", 16 * 1024 * 1024 + 100) + b"x" * 64,
    "negative length": struct.pack(">i", -1) + b"x" * 8,
    "unknown serialize type 7": frame(7, b"{}"),
    "header length past the frame": struct.pack(">ii", 8, 4000) + b"abcd",
    "JSON header that is not JSON": frame(0, b"{'code': 10"),
    "JSON header nested 100000 deep": frame(0, b"[" * 100_000 + b"]" * 100_000),
    "binary header cut short": frame(1, b"\x00\x0a\x00"),
    "binary extFields past the header": frame(
        1, struct.pack(">hbhii", 10, 0, 0, 1, 0) + struct.pack(">ii", 0, 1000)
    ),
    "HTTP request on the remoting port": b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n",
    "TLS client hello": bytes.fromhex("16030100a5010000a10303") + b"\x00" * 64,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from habroker.local import LocalBroker

    b = LocalBroker(tmp_path_factory.mktemp("remoting") / "b", mappedFileSizeCommitLog=1 << 20)
    b.start()
    yield b
    b.stop()


def create_topic(peer: RawPeer, topic: str) -> None:
    answer = peer.call(
        RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "readQueueNums": 2,
                "writeQueueNums": 2,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "defaultTopic": "TBW102",
                "order": False,
            },
        )
    )
    assert answer.code == ResponseCode.SUCCESS, answer


def send_header(topic: str, queue_id: int, queues: int = 4) -> dict[str, object]:
    """SEND_MESSAGE_V2's short keys: producer group, topic, queue, no flags or properties."""
    return {
        "a": "pg",
        "b": topic,
        "c": "TBW102",
        "d": queues,
        "e": queue_id,
        "f": 0,
        "g": 1,
        "h": 0,
        "i": "",
        "j": 0,
        "k": False,
        "m": False,
    }


def send(
    peer: RawPeer, topic: str, body: bytes, opaque: int, kind=SerializeType.JSON
) -> RemotingCommand:
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {
            "a": "pg",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": 0,
            "f": 0,
            "g": 1,
            "h": 0,
            "i": f"UNIQ_KEY\x01id-{opaque}\x02",
            "j": 0,
            "k": False,
            "m": False,
        },
        body,
        serialize_type=kind,
    )
    return peer.call(cmd, opaque)


def test_garbage_closes_only_its_connection(broker):
    steady = RawPeer(broker.address)
    create_topic(steady, "garbage")
    for i, (name, data) in enumerate(GARBAGE.items()):
        bad = RawPeer(broker.address)
        bad.send(data)
        assert bad.closed_by_broker(), f"{name}: the broker kept the connection open"
        bad.close()
        answer = send(steady, "garbage", b"still here %d" % i, opaque=100 + i)
        assert answer.code == ResponseCode.SUCCESS, f"after {name}: {answer}"
    log = broker.log_path.read_text()
    warnings = [line for line in log.splitlines() if "closing remoting connection from" in line]
    print(f"{len(GARBAGE)} garbage inputs, {len(warnings)} warning lines")
    assert len(warnings) == len(GARBAGE)
    assert "Traceback" not in log
    steady.close()


def test_truncated_frame_then_hang_up_leaves_the_broker_serving(broker):
    whole = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO).encode_bytes()
    for cut in (1, 3, 4, 7, len(whole) - 1):
        peer = RawPeer(broker.address)
        peer.send(whole[:cut])
        peer.close()
    peer = RawPeer(broker.address)
    assert peer.call(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)).code == 0
    peer.close()


def test_bad_requests_are_answered_not_dropped(broker):
    peer = RawPeer(broker.address)
    unknown = peer.call(RemotingCommand.request(9999))
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "9999" in (unknown.remark or "")
    missing = peer.call(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "x"}))
    assert missing.code == ResponseCode.SYSTEM_ERROR and "queueId" in (missing.remark or "")
    bad_number = peer.call(
        RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "x", "queueId": "9" * 30})
    )
    assert bad_number.code == ResponseCode.SYSTEM_ERROR and "queueId" in (bad_number.remark or "")
    huge = {f"k{i}": "v" * 1000 for i in range(2000)}  # 2 MB of extFields
    huge.update(topic="nosuchtopic")
    answer = peer.call(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, huge))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    bad_body = peer.call(RemotingCommand.request(RequestCode.HEART_BEAT, body=b"\xff\x00{"))
    assert bad_body.code == ResponseCode.SYSTEM_ERROR
    peer.close()


def test_both_serializations_and_oneway(broker):
    peer = RawPeer(broker.address)
    create_topic(peer, "kinds")
    for kind in SerializeType:
        answer = send(peer, "kinds", b"body", opaque=7, kind=kind)
        assert answer.serialize_type is kind and answer.opaque == 7
        assert answer.code == ResponseCode.SUCCESS and answer.ext_fields["queueId"] == "0"
    oneway = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "g", "topic": "kinds", "queueId": 0, "commitOffset": 1},
        oneway=True,
    )
    peer.send(oneway.encode_bytes())
    probe = peer.call(
        RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "g", "topic": "kinds", "queueId": 0},
        ),
        opaque=8,
    )
    assert probe.opaque == 8, "the one-way request must not have been answered"
    assert probe.ext_fields["offset"] == "1"
    peer.close()


def test_pipelined_requests_are_matched_by_opaque(broker):
    peer = RawPeer(broker.address)
    create_topic(peer, "pipe")
    stream = b""
    for i in range(50):
        cmd = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2,
            send_header("pipe", i % 2),
            json.dumps({"n": i}).encode(),
        )
        cmd.opaque = 1000 + i
        stream += cmd.encode_bytes()
    peer.send(stream)
    answers = [peer.read() for _ in range(50)]
    assert sorted(a.opaque for a in answers) == list(range(1000, 1050))
    assert all(a.code == ResponseCode.SUCCESS for a in answers)
    peer.close()


def test_long_poll_is_woken_by_a_new_message(broker):
    consumer = RawPeer(broker.address)
    producer = RawPeer(broker.address)
    create_topic(producer, "poll")
    pull = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "g",
            "topic": "poll",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 2 | 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 15000,
            "subscription": "*",
            "subVersion": 0,
            "expressionType": "TAG",
        },
    )
    pull.opaque = 5
    started = time.monotonic()
    consumer.send(pull.encode_bytes())
    time.sleep(0.5)
    assert send(producer, "poll", b"wake up", opaque=6).code == ResponseCode.SUCCESS
    answer = consumer.read()
    waited = time.monotonic() - started
    print(f"long poll answered after {waited:.2f}s")
    assert answer.code == ResponseCode.SUCCESS and answer.opaque == 5
    assert 0.4 < waited < 10
    assert b"wake up" in (answer.body or b"")
