"""autoCreateTopicEnable as RocketMQ has it: TBW102 is kept and routed; a send naming a topic
nobody created creates it with min(the sender's defaultTopicQueueNums, TBW102's write queues)
queues and perm RW.  The Java producer's side of it: tests/interop/test_java_oracle.py's
``test_a_send_to_a_topic_nobody_created_creates_it_from_tbw102``, run against both brokers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from habroker import fastjson
from habroker.local import LocalBroker
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode

from tests.habroker.remoting.test_remoting_server import RawPeer, send


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawPeer]:
    root: Path = tmp_path_factory.mktemp("auto") / "b"
    broker = LocalBroker(
        root, mappedFileSizeCommitLog=1 << 20, autoCreateTopicEnable=True, defaultTopicQueueNums=8
    )
    broker.start()
    client = RawPeer(broker.address)
    yield client
    client.close()
    broker.stop()


def route(peer: RawPeer, topic: str) -> dict[str, Any] | None:
    answer = peer.call(
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    )
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert answer.code == ResponseCode.SUCCESS, answer
    [queues] = fastjson.loads(answer.body_bytes)["queueDatas"]
    return {k: queues[k] for k in ("readQueueNums", "writeQueueNums", "perm")}


def send_with(
    peer: RawPeer, topic: str, queue_nums: int, default_topic: str = "TBW102"
) -> RemotingCommand:
    """A SEND_MESSAGE_V2 naming ``default_topic`` (header field c) with ``queue_nums`` (d)."""
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "pg", "b": topic, "c": default_topic, "d": queue_nums, "e": 0, "f": 0, "g": 1,
         "h": 0, "i": "", "j": 0, "k": False, "m": False},
        b"x",
    )  # fmt: skip
    return peer.call(cmd)


def test_tbw102_is_routed_with_the_inherit_permission(peer: RawPeer) -> None:
    assert route(peer, "TBW102") == {"readQueueNums": 8, "writeQueueNums": 8, "perm": 7}


def test_a_send_creates_the_topic_with_the_senders_queue_count(peer: RawPeer) -> None:
    assert route(peer, "auto-4") is None
    assert send(peer, "auto-4", b"body", 1).code == ResponseCode.SUCCESS  # d=4
    assert route(peer, "auto-4") == {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}


def test_the_senders_queue_count_is_capped_at_tbw102s(peer: RawPeer) -> None:
    assert send_with(peer, "auto-16", 16).code == ResponseCode.SUCCESS
    assert route(peer, "auto-16") == {"readQueueNums": 8, "writeQueueNums": 8, "perm": 6}


def test_without_auto_create_there_is_no_tbw102_and_no_new_topic(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "b", mappedFileSizeCommitLog=1 << 20)
    broker.start()
    client = RawPeer(broker.address)
    try:
        assert route(client, "TBW102") is None
        answer = send_with(client, "nobody", 4)
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST, answer
        assert route(client, "nobody") is None
    finally:
        client.close()
        broker.stop()


def test_an_inheritable_template_topic_creates_topics_without_auto_create(tmp_path: Path) -> None:
    """RocketMQ's rule: the send's defaultTopic is the template; TBW102 serves only while
    autoCreateTopicEnable is on, any other topic with perm 7 (inherit) always does."""
    broker = LocalBroker(tmp_path / "b", mappedFileSizeCommitLog=1 << 20)
    broker.start()
    client = RawPeer(broker.address)
    try:
        code, body = broker.request(
            "POST", "/v1/topics",
            {"topic": "TPL", "readQueueNums": 2, "writeQueueNums": 2, "perm": 7},
        )  # fmt: skip
        assert code in (200, 201), body
        assert send_with(client, "from-tpl", 4, "TPL").code == ResponseCode.SUCCESS
        assert route(client, "from-tpl") == {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        code, body = broker.request("POST", "/v1/topics", {"topic": "PLAIN", "perm": 6})
        assert code in (200, 201), body
        for template in ("PLAIN", "missing", "TBW102"):
            answer = send_with(client, f"from-{template}", 4, template)
            assert answer.code == ResponseCode.TOPIC_NOT_EXIST, (template, answer)
            assert route(client, f"from-{template}") is None
    finally:
        client.close()
        broker.stop()
