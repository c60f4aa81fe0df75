"""The system topics RocketMQ 4.9.7's TopicConfigManager keeps in every broker's table (the
Java side: tests/interop/test_java_oracle.py ``test_system_topics_are_listed_and_routed``, run
against both brokers), the keys that shape them, and the topics no client may send to."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from habroker.remoting import RequestCode, ResponseCode

from tests.habroker.remoting.retry_support import RunningBroker
from tests.interop.test_java_oracle import SYSTEM_TOPIC_ROUTES


async def table(running: RunningBroker) -> dict[str, tuple[int, int, int]]:
    answer = await running.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert answer.code == ResponseCode.SUCCESS, answer
    topics = json.loads(answer.body_bytes)["topicConfigTable"]
    return {
        name: (cfg["readQueueNums"], cfg["writeQueueNums"], cfg["perm"])
        for name, cfg in topics.items()
    }


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    broker = await RunningBroker(tmp_path / "b").start()
    yield broker
    await broker.stop()


async def test_every_broker_keeps_rocketmqs_system_topics(running: RunningBroker) -> None:
    got = await table(running)
    assert {t: got.get(t) for t in SYSTEM_TOPIC_ROUTES} == SYSTEM_TOPIC_ROUTES
    assert "RMQ_SYS_TRACE_TOPIC" not in got  # traceTopicEnable is off by default
    names = await running.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
    assert set(SYSTEM_TOPIC_ROUTES) <= set(json.loads(names.body_bytes)["topicList"])


async def test_the_keys_shape_them_and_topics_json_wins(tmp_path: Path) -> None:
    root = tmp_path / "b"
    running = await RunningBroker(
        root,
        brokerClusterName="C1",
        brokerName="bg-7",
        clusterTopicEnable=False,
        brokerTopicEnable=False,
        traceTopicEnable=True,
        msgTraceTopicName="my-trace",
    ).start()
    try:
        got = await table(running)
        assert got["C1"] == (16, 16, 1) and got["bg-7"] == (1, 1, 1)  # inherit only
        assert got["C1_REPLY_TOPIC"] == (1, 1, 6) and got["my-trace"] == (1, 1, 6)
        assert "DefaultCluster" not in got and "broker-a" not in got
        await running.create_topic("T")  # the table is written: the system topics with it
        await running.stop()
        path = root / "config" / "topics.json"
        on_disk = json.loads(path.read_text())
        assert {"T", "BenchmarkTest", "SELF_TEST_TOPIC", "C1"} <= set(on_disk["topicConfigTable"])
        # what the file says is read over the defaults (an operator's edit survives a start)
        on_disk["topicConfigTable"]["BenchmarkTest"]["readQueueNums"] = 8
        path.write_text(json.dumps(on_disk))
        await running.start()
        got = await table(running)
        assert got["BenchmarkTest"] == (8, 1024, 6)
        assert got["SELF_TEST_TOPIC"] == (1, 1, 6)
    finally:
        await running.stop()


@pytest.mark.parametrize(
    "topic", ["BenchmarkTest", "TBW102", "rmq_sys_mine", "C1", "bg-7", "C1_REPLY_TOPIC", "my-trace"]
)
async def test_an_admin_may_not_create_or_change_a_system_topic(tmp_path: Path, topic: str) -> None:
    running = await RunningBroker(
        tmp_path / "b",
        brokerClusterName="C1",
        brokerName="bg-7",
        traceTopicEnable=True,
        msgTraceTopicName="my-trace",
    ).start()
    try:
        before = await table(running)
        answer = await running.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
             "topicFilterType": "SINGLE_TAG", "order": False, "defaultTopic": "TBW102"},
        )  # fmt: skip
        assert answer.code == ResponseCode.SYSTEM_ERROR, answer
        assert answer.remark == f"The topic[{topic}] is conflict with system topic."
        assert await table(running) == before
    finally:
        await running.stop()


@pytest.mark.parametrize("topic", ["SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX"])
async def test_no_client_sends_to_the_brokers_own_topics(
    running: RunningBroker, topic: str
) -> None:
    answer = await running.send(topic, b"x")
    assert answer.code == ResponseCode.NO_PERMISSION, answer
    assert answer.remark == f"Sending message to topic[{topic}] is forbidden."
    assert running.b.store.max_offset_in_queue(topic, 0) == 0


async def test_the_broker_groups_own_topic_takes_sends(running: RunningBroker) -> None:
    """mqadmin sendMsgStatus -b broker-a sends to the topic named after the broker group."""
    answer = await running.send("broker-a", b"status probe")
    assert answer.code == ResponseCode.SUCCESS, answer
    [message] = await running.pull("broker-a")
    assert message.body == b"status probe"
