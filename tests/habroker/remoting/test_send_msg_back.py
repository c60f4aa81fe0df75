"""CONSUMER_SEND_MSG_BACK, %RETRY% and %DLQ% against a real broker over a real socket: what a
push consumer's RECONSUME_LATER leads to."""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from habroker.message import SCHEDULE_TOPIC, MessageExt
from habroker.remoting import ResponseCode

from tests.habroker.remoting.retry_support import PROBE_GROUP, RunningBroker

Factory = Callable[..., Awaitable[RunningBroker]]
# level 3 (the first retry's: 3 + reconsumeTimes, capped at the highest) is 1 s here
LEVELS = "1s 1s 1s"


@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[Factory]:
    started: list[RunningBroker] = []

    async def make(name: str = "b", **config: object) -> RunningBroker:
        running = RunningBroker(tmp_path / name, **{"messageDelayLevel": LEVELS, **config})
        started.append(running)
        return await running.start()

    yield make
    for running in started:
        await running.stop()


async def one(running: RunningBroker, topic: str, count: int = 1) -> MessageExt:
    found = await running.wait_for(topic, count=count, within=6)
    assert len(found) == count, f"{topic}: {len(found)} messages, expected {count}"
    return found[-1]


async def test_reconsume_later_until_the_dead_letter_queue(brokers: Factory) -> None:
    running = await brokers()
    await running.create_topic("T")
    body = zlib.compress(b"order 42 " * 50)
    sent = await running.send("T", body, sys_flag=0x1, KEYS="order-42")
    assert sent.code == ResponseCode.SUCCESS
    original = await one(running, "T")
    origin_id = original.msg_id  # the offset msgId RocketMQ records as ORIGIN_MESSAGE_ID
    assert sent.ext_fields["msgId"] == origin_id
    assert "WAIT" not in original.properties and "DELAY" not in original.properties

    current = original
    for attempt in (1, 2):
        t0 = time.monotonic()
        answer = await running.send_back(current, "G", max_reconsume_times=2)
        assert answer.code == ResponseCode.SUCCESS and answer.remark is None, answer
        retry_cfg = running.b.topics.get("%RETRY%G")
        assert retry_cfg is not None and retry_cfg.perm == 6
        # through the schedule topic: nothing in the retry topic before the delay
        assert len(await running.pull("%RETRY%G")) == attempt - 1
        current = await one(running, "%RETRY%G", count=attempt)
        assert time.monotonic() - t0 >= 0.9
        assert current.topic == "%RETRY%G"
        assert current.reconsume_times == attempt
        assert current.body == body and current.sys_flag & 0x1
        assert current.born_timestamp == original.born_timestamp
        assert current.properties["RETRY_TOPIC"] == "T"
        assert current.properties["ORIGIN_MESSAGE_ID"] == origin_id
        assert current.properties["REAL_TOPIC"] == "%RETRY%G"
        assert current.properties["DELAY"] == "3"  # 3 + reconsumeTimes, capped at level 3
        assert current.properties["WAIT"] == "false"
        assert current.keys == "order-42" and current.tags == "tagA"

    # reconsumeTimes (2) reached maxReconsumeTimes (2): dead letter, at once
    t0 = time.monotonic()
    answer = await running.send_back(current, "G", max_reconsume_times=2)
    assert answer.code == ResponseCode.SUCCESS, answer
    dead = await one(running, "%DLQ%G")
    assert time.monotonic() - t0 < 0.9
    dlq_cfg = running.b.topics.get("%DLQ%G")
    assert dlq_cfg is not None
    assert (dlq_cfg.readQueueNums, dlq_cfg.writeQueueNums, dlq_cfg.perm) == (1, 1, 6)
    assert dead.reconsume_times == 3
    assert dead.properties["DELAY"] == "0"
    assert dead.properties["RETRY_TOPIC"] == "T"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == origin_id
    assert zlib.decompress(dead.body) == b"order 42 " * 50
    assert len(await running.pull("%RETRY%G")) == 2


async def test_delay_level_from_the_consumer_and_negative_means_dead_letter(
    brokers: Factory,
) -> None:
    running = await brokers(messageDelayLevel="1s 5s 10s")
    await running.create_topic("T")
    await running.send("T", b"a")
    await running.send("T", b"b")
    a, b = await running.wait_for("T", count=2)

    assert (await running.send_back(a, "G", delay_level=1)).code == ResponseCode.SUCCESS
    unit = running.b.store.consume_queues[(SCHEDULE_TOPIC, 0)].get_unit(0)
    assert unit is not None  # level 1: the consumer's choice, not 3 + reconsumeTimes
    assert [m.body for m in await running.wait_for("%RETRY%G", within=4)] == [b"a"]

    assert (await running.send_back(b, "G", delay_level=-1)).code == ResponseCode.SUCCESS
    assert [m.body for m in await running.wait_for("%DLQ%G", within=2)] == [b"b"]


async def test_the_groups_own_retry_settings(brokers: Factory) -> None:
    running = await brokers(autoCreateSubscriptionGroup=False)
    await running.create_group(PROBE_GROUP)  # the group the test's own pulls name
    await running.create_topic("T")
    await running.send("T", b"x")
    msg = await one(running, "T")

    answer = await running.send_back(msg, "NOPE")
    assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert "subscription group not exist, NOPE" in (answer.remark or "")

    # no maxReconsumeTimes in the request: the group's retryMaxTimes (0) sends it to DLQ
    await running.create_group("G0", retryMaxTimes=0, retryQueueNums=3)
    assert (await running.send_back(msg, "G0", max_reconsume_times=None)).code == 0
    assert len(await running.wait_for("%DLQ%G0", within=2)) == 1
    retry_cfg = running.b.topics.get("%RETRY%G0")
    assert retry_cfg is not None and retry_cfg.writeQueueNums == 3

    # retryQueueNums 0: the group wants no retries; SUCCESS and nothing stored
    await running.create_group("NORETRY", retryQueueNums=0)
    before = running.b.store.max_phy_offset
    assert (await running.send_back(msg, "NORETRY")).code == ResponseCode.SUCCESS
    assert running.b.store.max_phy_offset == before
    assert running.b.topics.get("%RETRY%NORETRY") is None


async def test_an_offset_that_is_no_message(brokers: Factory) -> None:
    running = await brokers()
    await running.create_topic("T")
    await running.send("T", b"x")
    msg = await one(running, "T")
    for offset in (msg.commit_log_offset + 7, 10**9, -1):
        msg.commit_log_offset = offset
        answer = await running.send_back(msg, "G")
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == f"look message by offset failed, {offset}"


async def test_the_clients_own_resend_to_the_retry_topic_follows_the_same_rules(
    brokers: Factory,
) -> None:
    """DefaultMQPushConsumer's fallback when send-back fails: a producer send to %RETRY%group
    with reconsumeTimes/maxReconsumeTimes in the header and DELAY = 3 + reconsumeTimes."""
    running = await brokers()
    answer = await running.send(
        "%RETRY%G", b"again", -1, reconsume_times=1, max_reconsume_times=3, DELAY="4"
    )
    assert answer.code == ResponseCode.SUCCESS, answer
    again = await one(running, "%RETRY%G")
    assert again.reconsume_times == 1 and again.properties["DELAY"] == "3"  # capped

    answer = await running.send(
        "%RETRY%G", b"dead", 0, reconsume_times=3, max_reconsume_times=3, DELAY="6"
    )
    assert answer.code == ResponseCode.SUCCESS, answer
    # RocketMQ 4.9.7 keeps the client's DELAY on this path: the DLQ copy is delayed too
    assert await running.pull("%DLQ%G") == []
    dead = await one(running, "%DLQ%G")
    assert dead.reconsume_times == 3 and dead.properties["REAL_TOPIC"] == "%DLQ%G"


async def test_a_slave_sends_consumers_to_the_master(brokers: Factory) -> None:
    master = await brokers("m")
    slave = await brokers(
        "s",
        brokerRole="SLAVE",
        brokerId=1,
        haMasterAddress=f"127.0.0.1:{master.config['haListenPort']}",
        masterAddress=master.address,
    )
    await master.create_topic("T")
    await master.send("T", b"x")
    msg = await one(master, "T")
    answer = await slave.send_back(msg, "G")
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "SLAVE" in (answer.remark or "")
    assert slave.b.topics.get("%RETRY%G") is None
