"""Hostile and broken input on the broker's faces (issue 16): a real broker process, raw sockets.

Whatever a client sends — JSON nested 100,000 deep, bytes that are not UTF-8, a body cut off by
a hang-up, an offset beyond 64 bits — the broker answers a 4xx with a JSON error (or closes
that one connection), logs no traceback, counts no internal error and stores nothing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
import urllib.request

import pytest
from habroker import fastjson
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.command import decode_frame
from habroker.wire import BATCH_CONTENT_TYPE, encode_batch

from tests.habroker.metricsutil import scrape

DEEP = b"[" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000

# every route that reads a JSON body, with a method
JSON_ROUTES = [
    ("POST", "/v1/topics"),
    ("PUT", "/v1/subscription-groups/g1"),
    ("PUT", "/v1/consumer-offsets/g1/t/0"),
    ("PUT", "/v1/admin/master-address"),
    ("PUT", "/v1/admin/role"),
    ("POST", "/v1/admin/fence"),
    ("POST", "/v1/admin/dledger/leadership-transfer"),
    ("PUT", "/v1/admin/external-addresses"),
    ("PATCH", "/v1/admin/config"),
]


@pytest.fixture
def broker(broker_factory):
    b = broker_factory(maxMessageSize=4096, mappedFileSizeCommitLog=65536, defaultTopicQueueNums=2)
    assert b.request("POST", "/v1/topics", {"topic": "t"})[0] == 201
    return b


def send(broker, method, path, body, content_type="application/json"):
    req = urllib.request.Request(
        f"http://{broker.http_address}{path}",
        data=body,
        method=method,
        headers={"Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def healthy(broker) -> bool:
    with urllib.request.urlopen(f"http://{broker.http_address}/healthz", timeout=10) as resp:
        return bool(resp.status == 200)


def internal_errors(broker) -> float:
    values = scrape(broker.http_address).values("habroker_request_errors_total", error="internal")
    return sum(values)


def assert_log_clean(broker) -> None:
    text = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]
    assert " ERROR " not in text, text[-4000:]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_malformed_json_bodies_are_400_on_every_json_route(broker, method, path):
    cases = {
        "nested 100,000 arrays deep": DEEP,
        "nested 100,000 objects deep": DEEP_OBJECT,
        "not UTF-8": b'{"topic": "\xff\xfe"}',
        "cut off": b'{"topic": "t2", "readQueueNums":',
        "empty": b"",
        "NaN is not JSON": b'{"offset": NaN}',
        "a 5000-digit number": b'{"offset": ' + b"9" * 5000 + b"}",
    }
    for desc, body in cases.items():
        status, answer = send(broker, method, path, body)
        assert (status, answer["error"]) == (400, "bad_json"), (desc, answer)
        assert answer["message"].startswith("request body is not valid JSON"), (desc, answer)
    # a charset Python has no codec for is a malformed body too, not a crash
    status, answer = send(broker, method, path, b"{}", "application/json; charset=x-nonsense")
    assert (status, answer["error"]) == (400, "bad_json"), answer
    assert internal_errors(broker) == 0
    assert_log_clean(broker)
    assert healthy(broker)


def test_deep_json_in_a_remoting_header_closes_only_that_connection(broker):
    host, port = broker.address.split(":")
    for header in (DEEP, DEEP_OBJECT):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(struct.pack(">ii", 4 + len(header), len(header)) + header)
            sock.settimeout(10)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1024) == b""  # closed, no answer to a frame that is not one
    # deep JSON in a body (a heartbeat's, parsed in the fastjson dialect) is answered, not fatal
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        request = RemotingCommand.request(RequestCode.HEART_BEAT, body=DEEP)
        request.opaque = 7
        sock.sendall(request.encode_bytes())
        answer = read_frame(sock)
        assert answer.opaque == 7
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "nested too deeply" in (answer.remark or "")
    assert healthy(broker)
    text = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]
    assert "closing remoting connection" in text


@pytest.mark.parametrize(
    "heartbeat",
    [
        b'{"consumerDataSet": [1]}',
        b'{"producerDataSet": "x"}',
        b'{"producerDataSet": [1]}',
        b'{"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": 5}]}',
        b'{"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": '
        b'[{"topic": "t", "subString": [1]}]}]}',
        b'{"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": '
        b'[{"topic": "t", "subString": "*", "subVersion": "x"}]}]}',
    ],
)
def test_heartbeat_bodies_of_the_wrong_shape_are_refused_without_a_traceback(broker, heartbeat):
    host, port = broker.address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        request = RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat)
        request.opaque = 9
        sock.sendall(request.encode_bytes())
        answer = read_frame(sock)
        assert (answer.opaque, answer.code) == (9, ResponseCode.SYSTEM_ERROR), answer
        assert (answer.remark or "").startswith("heartbeat body: "), answer
    text = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in text and " ERROR " not in text, text[-4000:]


def read_frame(sock: socket.socket) -> RemotingCommand:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data

    (length,) = struct.unpack(">i", exactly(4))
    return decode_frame(memoryview(exactly(length)))


def test_hang_up_mid_produce_body_is_not_an_error_and_stores_nothing(broker):
    before = broker.status()["maxOffset"]
    assert internal_errors(broker) == 0
    batch = encode_batch([b"x" * 1000, b"y" * 1000])
    host, port = broker.http_address.split(":")
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            head = (
                f"POST /v1/topics/t/messages?queueId=0 HTTP/1.1\r\n"
                f"Host: {broker.http_address}\r\nContent-Type: {BATCH_CONTENT_TYPE}\r\n"
                f"Content-Length: {len(batch)}\r\n\r\n"
            ).encode()
            sock.sendall(head + batch[: len(batch) // 2])
            time.sleep(0.3)  # the handler is reading the body when the client goes
    deadline = time.monotonic() + 10
    while "hung up" not in broker.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, broker.tail_log()
        time.sleep(0.1)
    assert broker.status()["maxOffset"] == before
    _, offsets = broker.request("GET", "/v1/topics/t/offsets")
    assert offsets["queues"]["0"]["maxOffset"] == 0
    assert internal_errors(broker) == 0
    assert_log_clean(broker)
    hung_up = [line for line in broker.log_path.read_text().splitlines() if "hung up" in line]
    assert len(hung_up) == 3, hung_up
    for line in hung_up:  # one line each, naming the client (its port too) and the request
        assert " INFO " in line and "POST /v1/topics/t/messages" in line, line
        assert not line.split("client 127.0.0.1:")[1].startswith("0 "), line


def test_malformed_http_is_answered_400_and_logged_in_one_line(broker):
    host, port = broker.http_address.split(":")
    requests = [
        # a chunk size that is not hex
        b"POST /v1/topics/t/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"\r\nzz\r\nabc\r\n",
        # a Content-Length that is not a number
        b"PUT /v1/admin/role HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n{}",
        # a header line without a colon
        b"GET /v1/status HTTP/1.1\r\nHost x\r\n\r\n",
    ]
    for raw_request in requests:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(raw_request)
            assert sock.recv(4096).startswith(b"HTTP/1.0 400 Bad Request"), raw_request
    lines = [line for line in broker.log_path.read_text().splitlines() if "malformed HTTP" in line]
    assert len(lines) == 3 and all(" INFO " in line for line in lines), lines
    assert internal_errors(broker) == 0
    assert_log_clean(broker)
    assert healthy(broker)


@pytest.mark.parametrize(
    ("offset", "queue"),
    [(2**64, 0), (2**63, 0), (-1, 0), (-(2**63) - 1, 0), (5, 2**31), (5, -1), (5, 2**64)],
)
def test_consumer_offsets_out_of_range_are_refused_over_http(broker, offset, queue):
    status, answer = send(
        broker, "PUT", f"/v1/consumer-offsets/g1/t/{queue}", json.dumps({"offset": offset}).encode()
    )
    assert status == 400, answer
    assert answer["error"] == "bad_request"
    assert str(offset if queue in (0,) else queue) in answer["message"]
    assert broker.request("PUT", "/v1/consumer-offsets/g1/t/1", {"offset": 2**63 - 1})[0] == 200
    assert broker.stop() == 0
    text = (broker.root / "store" / "config" / "consumerOffset.json").read_text()
    table = fastjson.loads(text)["offsetTable"]
    assert table == {"t@g1": {1: 2**63 - 1}}, text


@pytest.mark.parametrize(
    ("method", "path", "payload", "named"),
    [
        ("PUT", "/v1/subscription-groups/g1", {"brokerId": 2**63}, "brokerId"),
        ("PUT", "/v1/subscription-groups/g1", {"whichBrokerWhenConsumeSlowly": 2**64}, "which"),
        ("PUT", "/v1/subscription-groups/g1", {"retryQueueNums": 2**31}, "retryQueueNums"),
        ("PUT", "/v1/subscription-groups/g1", {"retryQueueNums": -5}, "retryQueueNums"),
        ("PUT", "/v1/subscription-groups/g1", {"retryMaxTimes": -(2**31) - 1}, "retryMaxTimes"),
        ("POST", "/v1/admin/fence", {"epoch": 2**31}, "epoch"),
        ("PUT", "/v1/admin/role", {"role": "SYNC_MASTER", "epoch": 2**64, "brokerId": 0}, "epoch"),
        ("PUT", "/v1/admin/role", {"role": "SYNC_MASTER", "epoch": 2, "brokerId": 2**63}, "broker"),
        ("PUT", "/v1/admin/external-addresses", {"brokerAddrs": {str(2**63): "h:1"}}, "brokerId"),
        # a classic broker is told by brokerId; by DLedger peer only in a DLedger group
        ("PUT", "/v1/admin/external-addresses", {"peerAddrs": {"n0": "h:1"}}, "peerAddrs"),
    ],
)
def test_numbers_beyond_javas_types_are_refused_and_never_persisted(
    broker, method, path, payload, named
):
    """RocketMQ's Java side reads these files and answers (ints and longs): a value outside
    them is a 400 naming the field, and nothing is written."""
    status, answer = send(broker, method, path, json.dumps(payload).encode())
    assert status == 400 and answer["error"] in ("bad_group", "bad_request"), answer
    assert named in answer["message"], answer
    role = broker.request("GET", "/v1/admin/role")[1]
    assert (role["role"], role["epoch"], role["fenced"]) == ("ASYNC_MASTER", 1, False)
    assert broker.request("GET", "/v1/admin/external-addresses")[1] == {
        "brokerAddrs": {},
        "peerAddrs": {},
    }
    assert broker.stop() == 0
    store = broker.root / "store"
    groups = store / "config" / "subscriptionGroup.json"
    assert not groups.exists() or '"g1"' not in groups.read_text()
    for path in store.rglob("*"):
        if path.is_file() and path.stat().st_size < 65536 and path.parent.name != "commitlog":
            text = path.read_bytes()
            for big in (2**31, 2**63, 2**64):
                assert str(big).encode() not in text, path


@pytest.mark.parametrize("offset", [str(2**64), str(2**63), "-1", "-9223372036854775809"])
def test_consumer_offsets_out_of_range_are_refused_over_remoting(broker, offset):
    host, port = broker.address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for opaque, value in ((1, offset), (2, "42")):
            request = RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "g1", "topic": "t", "queueId": 0, "commitOffset": value},
            )
            request.opaque = opaque
            sock.sendall(request.encode_bytes())
            answer = read_frame(sock)
            if value == "42":
                assert answer.code == ResponseCode.SUCCESS, answer
            else:
                assert answer.code == ResponseCode.SYSTEM_ERROR, answer
                assert value.lstrip("-")[:6] in (answer.remark or ""), answer
    assert broker.stop() == 0
    text = (broker.root / "store" / "config" / "consumerOffset.json").read_text()
    assert fastjson.loads(text)["offsetTable"] == {"t@g1": {0: 42}}, text
    assert "Traceback" not in broker.log_path.read_text()


def test_integer_parameters_are_ascii_digits_of_any_length(broker):
    """openapi.yaml's integers: a long offset is a valid request (nothing is found there), while
    Python's other integer spellings (empty, '+5', '5_0', ' 5', other scripts' digits) are 400."""
    url = f"http://{broker.http_address}/v1/topics/t/queues/0/messages?offset=1106807920186389194"
    with urllib.request.urlopen(url + "30045696", timeout=30) as resp:
        assert resp.status == 200 and resp.headers["X-Pull-Status"] != "FOUND"
    for raw in ("", "%2B5", "5_0", "%205", "%D9%A3"):
        status, body = send(broker, "GET", f"/v1/topics/t/queues/0/messages?offset={raw}", None)
        assert (status, body["error"]) == (400, "bad_request"), (raw, body)
    status, body = send(broker, "GET", "/v1/consumer-offsets/g/t/0_0", None)
    assert (status, body["error"]) == (400, "bad_request"), body
