"""PULL_MESSAGE and HEART_BEAT against the subscription-group table, as RocketMQ's
PullMessageProcessor and ClientManageProcessor check it (both read in apache/rocketmq):

* with autoCreateSubscriptionGroup=false a pull naming a group nobody created answers
  SUBSCRIPTION_GROUP_NOT_EXIST, before the topic is looked at; the broker's own CID_RMQ_SYS_
  groups are always found;
* a group with consumeEnable=false answers NO_PERMISSION;
* a heartbeat of an unknown group registers the consumer but creates no %RETRY% topic.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from habroker.remoting import RequestCode, ResponseCode

from tests.habroker.remoting.retry_support import RunningBroker


@pytest.fixture
async def strict(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    running = await RunningBroker(tmp_path / "b", autoCreateSubscriptionGroup=False).start()
    await running.create_topic("T")
    assert (await running.send("T", b"x")).code == ResponseCode.SUCCESS
    yield running
    await running.stop()


async def test_a_pull_for_a_group_nobody_created_is_refused(strict: RunningBroker) -> None:
    answer = await strict.pull_answer("T", group="nobody")
    assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, answer
    assert "subscription group [nobody] does not exist" in (answer.remark or "")
    # the group is checked before the topic, as in RocketMQ
    answer = await strict.pull_answer("no-such-topic", group="nobody")
    assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, answer

    await strict.create_group("nobody")
    assert (await strict.pull_answer("T", group="nobody")).code == ResponseCode.SUCCESS
    assert (await strict.pull_answer("T", group="CID_RMQ_SYS_x")).code == ResponseCode.SUCCESS


async def test_a_group_that_may_not_consume_is_refused(strict: RunningBroker) -> None:
    await strict.create_group("paused", consumeEnable=False)
    answer = await strict.pull_answer("T", group="paused")
    assert answer.code == ResponseCode.NO_PERMISSION, answer
    assert answer.remark == "subscription group no permission, paused"
    await strict.create_group("paused", consumeEnable=True)
    assert (await strict.pull_answer("T", group="paused")).code == ResponseCode.SUCCESS


def _heartbeat(group: str) -> bytes:
    consumer = {
        "groupName": group,
        "consumeType": "CONSUME_PASSIVELY",
        "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet": [],
        "unitMode": False,
    }
    return json.dumps(
        {"clientID": "127.0.0.1@1", "producerDataSet": [], "consumerDataSet": [consumer]}
    ).encode()


@pytest.mark.parametrize("auto_create", [False, True])
async def test_a_heartbeat_creates_the_retry_topic_only_for_a_group_that_exists(
    tmp_path: Path, auto_create: bool
) -> None:
    running = await RunningBroker(tmp_path / "b", autoCreateSubscriptionGroup=auto_create).start()
    try:
        await running.create_group("known", retryQueueNums=2)
        for group in ("known", "unknown"):
            answer = await running.call(RequestCode.HEART_BEAT, {}, _heartbeat(group))
            assert answer.code == ResponseCode.SUCCESS, answer
        known = running.b.topics.get("%RETRY%known")
        assert known is not None and known.writeQueueNums == 2
        assert (running.b.topics.get("%RETRY%unknown") is not None) is auto_create
    finally:
        await running.stop()


async def test_an_auto_created_group_is_written_as_rocketmq_writes_it(tmp_path: Path) -> None:
    running = await RunningBroker(tmp_path / "b").start()
    try:
        await running.create_topic("T")
        assert "fresh" not in running.b.groups.table
        answer = await running.pull_answer("T", group="fresh")
        assert answer.code == ResponseCode.PULL_NOT_FOUND, answer  # an empty queue: served
        assert running.b.groups.table["fresh"].consumeEnable
        answer = await running.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        assert "fresh" in json.loads(answer.body_bytes)["subscriptionGroupTable"]
        bad = await running.pull_answer("T", group="bad name")
        assert bad.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, bad
        assert "bad name" not in running.b.groups.table
    finally:
        await running.stop()
    restarted = await RunningBroker(tmp_path / "b").start()  # written: still there
    try:
        assert "fresh" in restarted.b.groups.table
    finally:
        await restarted.stop()
