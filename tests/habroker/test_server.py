"""The HTTP API against a real broker process: happy paths, refusals, and nothing half-written."""

from __future__ import annotations

import struct
import urllib.request

import pytest
import yaml
from habroker.client import BrokerAPIError, BrokerGroupReader, OutgoingMessage, Producer
from habroker.client.sync import BrokerConnection
from habroker.wire import BATCH_CONTENT_TYPE, encode_batch, encode_entry

from tests.habroker.metricsutil import scrape

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture
def broker(broker_factory):
    b = broker_factory(maxMessageSize=4096, mappedFileSizeCommitLog=65536, defaultTopicQueueNums=2)
    assert (
        b.request("POST", "/v1/topics", {"topic": "t", "readQueueNums": 2, "writeQueueNums": 2})[0]
        == 201
    )
    return b


def raw(broker, method, path, body=b"", headers=None):
    req = urllib.request.Request(
        f"http://{broker.http_address}{path}",
        data=body or None,
        method=method,
        headers=headers or {},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_produce_and_pull_round_trip(broker):
    with Producer(broker.http_address) as producer:
        first = producer.send("t", b"one", queue_id=1, tags="A", keys=["k1", "k2"])
        batch = producer.send_batch(
            "t", [OutgoingMessage(f"m{i}".encode(), tags="B") for i in range(40)], queue_id=1
        )
    assert first.status == "PUT_OK" and first.queue_offset == 0 and first.count == 1
    assert batch.queue_offset == 1 and batch.count == 40
    assert batch.commit_log_offset > first.commit_log_offset
    with BrokerGroupReader(broker.http_address) as reader:
        res = reader.pull("t", 1, 0, max_msgs=100)
    assert res.status == "FOUND" and res.next_begin_offset == 41 and res.max_offset == 41
    bodies = [m.body for m in res.messages]
    assert bodies == [b"one"] + [f"m{i}".encode() for i in range(40)]
    m0 = res.messages[0]
    assert m0.tags == "A" and m0.keys == "k1 k2" and m0.queue_id == 1 and m0.msg_id == first.msg_id
    assert [m.queue_offset for m in res.messages] == list(range(41))


def test_topic_offsets(broker):
    with Producer(broker.http_address) as producer:
        producer.send_batch("t", [b"a", b"b", b"c"], queue_id=1)
    code, body = broker.request("GET", "/v1/topics/t/offsets")
    assert code == 200 and body["queues"] == {
        "0": {"minOffset": 0, "maxOffset": 0},
        "1": {"minOffset": 0, "maxOffset": 3},
    }
    assert broker.request("GET", "/v1/topics/nope/offsets")[0] == 404


def test_round_robin_when_no_queue_given(broker):
    with Producer(broker.http_address) as producer:
        queues = [producer.send("t", b"x").queue_id for _ in range(4)]
    assert sorted(queues) == [0, 0, 1, 1]


def test_pull_statuses_and_json_view(broker):
    with Producer(broker.http_address) as producer:
        producer.send_batch("t", [b"a", b"b"], queue_id=0)
    with BrokerGroupReader(broker.http_address) as reader:
        assert reader.pull("t", 0, 2).status == "OFFSET_OVERFLOW_ONE"
        over = reader.pull("t", 0, 9)
        assert over.status == "OFFSET_OVERFLOW_BADLY" and over.next_begin_offset == 2
        assert reader.pull("t", 1, 0).status == "NO_MESSAGE_IN_QUEUE"
    code, headers, body = raw(
        broker,
        "GET",
        "/v1/topics/t/queues/0/messages?offset=0",
        headers={"Accept": "application/json"},
    )
    assert code == 200 and headers["X-Pull-Status"] == "FOUND"
    data = yaml.safe_load(body)
    assert [m["body"] for m in data["messages"]] == ["YQ==", "Yg=="]


BAD_REQUESTS = [
    # (description, path, body, content type, status, error code)
    (
        "malformed batch",
        "/v1/topics/t/messages",
        b"\x00\x00\x00",
        BATCH_CONTENT_TYPE,
        400,
        "bad_batch",
    ),
    (
        "lying total size",
        "/v1/topics/t/messages",
        struct.pack(">iiiii", 999, 0, 0, 0, 1) + b"x\x00\x00",
        BATCH_CONTENT_TYPE,
        400,
        "bad_batch",
    ),
    (
        "body over maxMessageSize",
        "/v1/topics/t/messages",
        encode_batch([b"ok", b"x" * 5000]),
        BATCH_CONTENT_TYPE,
        413,
        "message_too_large",
    ),
    (
        "unknown topic",
        "/v1/topics/nope/messages",
        encode_batch([b"x"]),
        BATCH_CONTENT_TYPE,
        404,
        "unknown_topic",
    ),
    (
        "unknown queue",
        "/v1/topics/t/messages?queueId=7",
        encode_batch([b"x"]),
        BATCH_CONTENT_TYPE,
        400,
        "unknown_queue",
    ),
    (
        "bad queueId",
        "/v1/topics/t/messages?queueId=abc",
        encode_batch([b"x"]),
        BATCH_CONTENT_TYPE,
        400,
        "bad_request",
    ),
    (
        "wrong content type",
        "/v1/topics/t/messages",
        b'{"body": "x"}',
        "application/json",
        415,
        "unsupported_media_type",
    ),
    ("empty batch", "/v1/topics/t/messages", b"", BATCH_CONTENT_TYPE, 400, "bad_batch"),
]


@pytest.mark.parametrize(
    ("desc", "path", "body", "ctype", "status", "code"),
    BAD_REQUESTS,
    ids=[r[0] for r in BAD_REQUESTS],
)
def test_bad_produce_writes_nothing(broker, desc, path, body, ctype, status, code):
    before = broker.status()["maxOffset"]
    got, _, data = raw(broker, "POST", path, body, {"Content-Type": ctype})
    err = yaml.safe_load(data)
    assert (got, err["error"]) == (status, code), data
    assert err["message"]
    assert broker.status()["maxOffset"] == before
    with Producer(broker.http_address) as producer:  # still serving
        assert producer.send("t", b"after", queue_id=0).status == "PUT_OK"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/v1/topics/t/queues/0/messages?offset=-1", 400, "bad_request"),
        ("/v1/topics/t/queues/0/messages", 400, "bad_request"),
        ("/v1/topics/t/queues/0/messages?offset=0&max=5000", 400, "bad_request"),
        ("/v1/topics/t/queues/9/messages?offset=0", 400, "unknown_queue"),
        ("/v1/topics/zz/queues/0/messages?offset=0", 404, "unknown_topic"),
        ("/v1/consumer-offsets/g/t/0", 404, "no_offset"),
        ("/v1/nothing-here", 404, "not_found"),
    ],
)
def test_bad_reads(broker, path, status, code):
    got, _, data = raw(broker, "GET", path)
    assert (got, yaml.safe_load(data)["error"]) == (status, code)


def test_offsets_topics_groups_and_admin(broker):
    conn = BrokerConnection(broker.http_address)
    assert conn.json("PUT", "/v1/consumer-offsets/g1/t/1", {"offset": 5}) == {"offset": 5}
    assert conn.json("GET", "/v1/consumer-offsets/g1/t/1") == {"offset": 5}
    assert conn.json("GET", "/v1/consumer-offsets")["offsetTable"] == {"t@g1": {"1": 5}}
    with pytest.raises(BrokerAPIError) as exc:
        conn.json("PUT", "/v1/consumer-offsets/g1/t/1", {"offset": "x"})
    assert exc.value.code == "bad_request"
    assert (
        conn.json("PUT", "/v1/subscription-groups/g1", {"whichBrokerWhenConsumeSlowly": 2})[
            "whichBrokerWhenConsumeSlowly"
        ]
        == 2
    )
    assert "g1" in conn.json("GET", "/v1/subscription-groups")["subscriptionGroupTable"]
    with pytest.raises(BrokerAPIError) as exc:
        conn.json("POST", "/v1/topics", {"topic": "bad name"})
    assert exc.value.code == "bad_topic"
    assert conn.json("PATCH", "/v1/admin/config", {"slaveReadEnable": True}) == {
        "slaveReadEnable": "true"
    }
    assert broker.status()["readPolicy"]["slaveReadEnable"] is True
    with pytest.raises(BrokerAPIError) as exc:
        conn.json("PATCH", "/v1/admin/config", {"listenPort": 1})
    assert exc.value.code == "not_runtime_key"
    role = conn.json("GET", "/v1/admin/role")
    assert role == {
        "role": "ASYNC_MASTER",
        "brokerId": 0,
        "brokerName": "broker-a",
        "maxOffset": role["maxOffset"],
        # a classic master starts epoch 1 at its max offset when its log has no epochs yet
        "epoch": 1,
        "fenced": False,
        "fenceReason": None,
        "controllerMode": False,
        "epochEntries": [{"epoch": 1, "startOffset": 0, "endOffset": role["maxOffset"]}],
    }
    with pytest.raises(BrokerAPIError) as exc:
        conn.json("PUT", "/v1/admin/master-address", {"haMasterAddress": "127.0.0.1:1"})
    assert exc.value.code == "not_slave"
    conn.close()


def test_health_metrics_and_openapi(broker):
    assert raw(broker, "GET", "/healthz")[0] == 200
    assert raw(broker, "GET", "/readyz")[0] == 200
    with Producer(broker.http_address) as producer:
        producer.send_batch("t", [b"x"] * 3, queue_id=0)
    m = scrape(broker.http_address)
    assert m.content_type.startswith("text/plain")
    labels = {"broker": "broker-a", "brokerId": "0"}
    assert m.value("habroker_put_messages_total", **labels) == 3
    assert m.value("habroker_put_status_total", status="PUT_OK", **labels) == 1
    # a scraper asking for OpenMetrics gets it
    _, headers, body = raw(broker, "GET", "/metrics", headers={"Accept": OPENMETRICS})
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    code, _, body = raw(broker, "GET", "/v1/openapi.yaml")
    spec = yaml.safe_load(body)
    assert code == 200 and spec["openapi"].startswith("3.")
    # every route the broker serves is documented, and nothing documented is missing
    from aiohttp import web
    from habroker.server import add_routes

    app = web.Application()
    add_routes(app.router)
    served = {res.canonical for res in app.router.resources()}
    assert served == set(spec["paths"])


def test_entry_with_oversized_properties_is_refused(broker):
    props = b"K\x01" + b"v" * 33000 + b"\x02"
    # totalSize cannot even describe it with an int16 length: the batch itself is malformed
    body = (
        struct.pack(">iiiii", 22 + 1 + len(props), 0, 0, 0, 1)
        + b"x"
        + struct.pack(">h", -1)
        + props
    )
    code, _, data = raw(
        broker, "POST", "/v1/topics/t/messages", body, {"Content-Type": BATCH_CONTENT_TYPE}
    )
    assert code == 400 and yaml.safe_load(data)["error"] == "bad_batch"
    assert encode_entry(b"x")  # the good path still encodes


def test_bad_config_stops_startup_with_the_key_named(broker_factory):
    b = broker_factory("bad", start=False, brokerRol="SLAVE")
    b.start(wait=False)
    assert b.proc is not None and b.proc.wait(30) == 2
    assert "unknown key 'brokerRol' (did you mean brokerRole?)" in b.log_path.read_text()


def test_http_api_listens_on_http_listen_port_only(broker_factory):
    """HTTP is served on httpListenPort; listenPort is RocketMQ's client port and never HTTP."""
    import http.client

    from habroker.local import free_port

    ports = {"listenPort": free_port(), "haListenPort": free_port(), "httpListenPort": free_port()}
    assert len(set(ports.values())) == 3
    b = broker_factory("ports", **ports)
    assert b.http_address == f"127.0.0.1:{ports['httpListenPort']}"
    with urllib.request.urlopen(f"http://{b.http_address}/healthz", timeout=5) as resp:
        assert resp.status == 200
    st = b.status()
    assert st["httpAddress"] == b.http_address
    assert st["listenAddress"] == b.address == f"127.0.0.1:{ports['listenPort']}"
    assert st["haListenAddress"] == b.ha_address
    # whatever listens on listenPort (nothing yet, or the remoting protocol), it is not HTTP
    conn = http.client.HTTPConnection("127.0.0.1", ports["listenPort"], timeout=5)
    with pytest.raises((OSError, http.client.HTTPException)):
        conn.request("GET", "/healthz")
        conn.getresponse()
    conn.close()
    # the start line names all three ports
    log = b.log_path.read_text()
    assert f"127.0.0.1:{ports['listenPort']}" in log
    assert f"http 127.0.0.1:{ports['httpListenPort']}" in log
    assert f"ha 127.0.0.1:{ports['haListenPort']}" in log


@pytest.mark.parametrize("clash", ["listenPort", "haListenPort"])
def test_colliding_ports_are_refused_at_start(broker_factory, clash):
    b = broker_factory("clash", start=False)
    b.config["httpListenPort"] = b.config[clash]
    with pytest.raises(RuntimeError, match="broker exited with 2") as exc:
        b.start(timeout=30)
    assert f"{clash}={b.config[clash]}: the same port as httpListenPort" in str(exc.value)
    assert "configuration error" in str(exc.value)
