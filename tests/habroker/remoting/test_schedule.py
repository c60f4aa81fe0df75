"""Delayed delivery (DELAY property, messageDelayLevel, SCHEDULE_TOPIC_XXXX, delayOffset.json)
against a real broker over a real socket."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from habroker import fastjson
from habroker.config import BrokerConfig, ConfigError, parse_delay_levels
from habroker.message import (
    DELAY_LEVELS_MS,
    SCHEDULE_TOPIC,
    encode_record,
    parse_record,
    tags_code,
)
from habroker.metadata import MetadataError
from habroker.remoting import ResponseCode
from habroker.store import BatchEntry
from habroker.store.consume_queue import ConsumeQueue

from tests.habroker.remoting.retry_support import RunningBroker

Factory = Callable[..., Awaitable[RunningBroker]]


@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[Factory]:
    started: list[RunningBroker] = []

    async def make(name: str = "b", **config: object) -> RunningBroker:
        running = RunningBroker(tmp_path / name, **config)
        started.append(running)
        return await running.start()

    yield make
    for running in started:
        await running.stop()


def schedule_queue(running: RunningBroker, level: int) -> ConsumeQueue:
    cq = running.b.store.consume_queues.get((SCHEDULE_TOPIC, level - 1))
    assert cq is not None, f"no consume queue for delay level {level}"
    return cq


# -- configuration and the dispatcher's tagsCode ---------------------------------------------
def test_message_delay_level_default_is_rocketmqs_and_bad_values_are_refused() -> None:
    assert BrokerConfig().delay_levels_ms == DELAY_LEVELS_MS
    assert parse_delay_levels("1s 2m 3h 1d") == (1000, 120_000, 10_800_000, 86_400_000)
    for bad in ("", "1s 5x", "1.5s", "-1s", "s", "10"):
        with pytest.raises(ConfigError, match="messageDelayLevel"):
            BrokerConfig(messageDelayLevel=bad)
    with pytest.raises(ConfigError, match="flushDelayOffsetInterval"):
        BrokerConfig(flushDelayOffsetInterval=0)


def test_schedule_units_carry_the_delivery_time_of_the_configured_levels() -> None:
    stored_at = 1_700_000_000_000
    levels = (1000, 2000, 7000)

    def tags_of(topic: str, props: dict[str, str]) -> int:
        record = encode_record(
            topic=topic, queue_id=0, body=b"x", properties=props, store_timestamp=stored_at
        )
        parsed = parse_record(record, 0, True, levels)
        assert isinstance(parsed, tuple)
        return parsed[4]

    assert tags_of(SCHEDULE_TOPIC, {"TAGS": "a", "DELAY": "2"}) == stored_at + 2000
    assert tags_of(SCHEDULE_TOPIC, {"TAGS": "a", "DELAY": "9"}) == stored_at + 7000  # capped
    assert tags_of(SCHEDULE_TOPIC, {"TAGS": "a", "DELAY": "0"}) == tags_code("a")
    assert tags_of("T", {"TAGS": "a", "DELAY": "2"}) == tags_code("a")


# -- delivery ---------------------------------------------------------------------------------
async def test_a_delayed_message_arrives_after_its_level_and_not_before(
    brokers: Factory,
) -> None:
    running = await brokers(messageDelayLevel="1s 2s")
    await running.create_topic("T", queues=2)
    body = zlib.compress(b"delayed " * 100)
    sent_at = time.time() * 1000
    answer = await running.send("T", body, queue_id=1, sys_flag=0x1, DELAY="1", KEYS="k1")
    assert answer.code == ResponseCode.SUCCESS, answer
    assert answer.ext_fields["queueId"] == "1"  # the real queue, as RocketMQ answers

    # stored in the schedule topic, queue level-1, with its destination and due time
    cq = schedule_queue(running, 1)
    assert cq.max_offset_in_queue == 1
    unit = cq.get_unit(0)
    assert unit is not None
    scheduled = running.b.store.look_message_by_offset(unit[0], unit[1])
    assert scheduled is not None
    assert scheduled.topic == SCHEDULE_TOPIC and scheduled.queue_id == 0
    assert scheduled.properties["REAL_TOPIC"] == "T"
    assert scheduled.properties["REAL_QID"] == "1"
    assert scheduled.properties["WAIT"] == "true"  # RocketMQ 4.9.7 keeps it in delayed ones
    assert unit[2] == scheduled.store_timestamp + 1000

    await asyncio.sleep(0.6)
    assert await running.pull("T", 1) == [], "delivered before its delay"

    delivered = await running.wait_for("T", 1, within=5)
    arrived_at = time.time() * 1000
    assert len(delivered) == 1
    msg = delivered[0]
    assert msg.store_timestamp - scheduled.store_timestamp >= 1000
    assert arrived_at - sent_at < 1000 + 1500
    assert (msg.topic, msg.queue_id, msg.queue_offset) == ("T", 1, 0)
    assert msg.body == body and msg.sys_flag & 0x1  # compressed bytes and flag kept
    assert zlib.decompress(msg.body) == b"delayed " * 100
    assert msg.born_timestamp == scheduled.born_timestamp
    # RocketMQ 4.9.7 writes the stored properties back verbatim, bookkeeping included
    assert msg.properties == scheduled.properties
    assert msg.keys == "k1" and msg.tags == "tagA"
    # the delivered unit carries the tag's hash again: a tag-filtered pull finds it
    assert [m.body for m in await running.pull("T", 1, subscription="tagA")] == [body]
    assert await running.pull("T", 1, subscription="other") == []


async def test_levels_order_and_the_cap_at_the_highest_level(brokers: Factory) -> None:
    running = await brokers(messageDelayLevel="1s 2s")
    await running.create_topic("T")
    t0 = time.monotonic()
    for i in range(3):
        assert (await running.send("T", f"L2-{i}".encode(), DELAY="2")).code == 0
    assert (await running.send("T", b"L9", DELAY="9")).code == 0  # capped at level 2
    assert (await running.send("T", b"L1", DELAY="1")).code == 0
    assert (await running.send("T", b"now", DELAY="0")).code == 0

    assert schedule_queue(running, 2).max_offset_in_queue == 4
    unit = schedule_queue(running, 2).get_unit(3)
    assert unit is not None
    capped = running.b.store.look_message_by_offset(unit[0])
    assert capped is not None and capped.properties["DELAY"] == "2"

    first = await running.wait_for("T", count=2, within=5)
    assert [m.body for m in first[:2]] == [b"now", b"L1"]
    assert time.monotonic() - t0 < 2.0, "level 1 waited for level 2"
    everything = await running.wait_for("T", count=6, within=5)
    assert [m.body for m in everything] == [b"now", b"L1", b"L2-0", b"L2-1", b"L2-2", b"L9"]
    assert time.monotonic() - t0 >= 2.0
    assert await running.delay_offsets() == '{"offsetTable":{1:1,2:4}}'


async def test_get_all_delay_offset_is_rocketmqs_shape(brokers: Factory) -> None:
    running = await brokers(messageDelayLevel="1s 1s 1s")
    assert await running.delay_offsets() == '{"offsetTable":{}}'
    await running.create_topic("T")
    await running.send("T", b"a", DELAY="3")
    await running.send("T", b"b", DELAY="1")
    await running.wait_for("T", count=2, within=5)
    text = await running.delay_offsets()
    assert text == '{"offsetTable":{1:1,3:1}}'
    assert fastjson.loads(text) == {"offsetTable": {1: 1, 3: 1}}


async def test_restart_resumes_from_the_persisted_offsets(brokers: Factory) -> None:
    running = await brokers(messageDelayLevel="1s 3s")
    await running.create_topic("T")
    await running.send("T", b"early", DELAY="1")
    await running.wait_for("T", count=1, within=5)
    await running.send("T", b"late", DELAY="2")
    await running.stop()  # before "late" is due

    path = Path(running.config["storePathRootDir"]) / "config" / "delayOffset.json"
    # RocketMQ's file form: fastjson PrettyFormat, integer keys unquoted
    assert path.read_text() == '{\n\t"offsetTable":{1:1\n\t}\n}'

    await running.start()
    assert running.b.schedule.offsets == {1: 1}
    found = await running.wait_for("T", count=2, within=8)
    assert [m.body for m in found] == [b"early", b"late"]
    await asyncio.sleep(0.3)
    assert len(await running.pull("T")) == 2, "a message was delivered twice"
    assert await running.delay_offsets() == '{"offsetTable":{1:1,2:1}}'


async def test_progress_is_written_while_running(brokers: Factory) -> None:
    """flushDelayOffsetInterval: a crash loses at most that much progress (redelivery, not loss)."""
    running = await brokers(messageDelayLevel="1s", flushDelayOffsetInterval=200)
    await running.create_topic("T")
    path = Path(running.config["storePathRootDir"]) / "config" / "delayOffset.json"
    await running.send("T", b"x", DELAY="1")
    await running.wait_for("T", within=5)
    for _ in range(40):
        if path.exists():
            break
        await asyncio.sleep(0.05)
    assert path.read_text() == '{\n\t"offsetTable":{1:1\n\t}\n}'


async def test_a_table_written_by_rocketmq_is_read_and_fitted_to_the_queues(
    brokers: Factory,
) -> None:
    running = await brokers(messageDelayLevel="1s 1s")
    await running.create_topic("T")
    for body in (b"a", b"b", b"c"):
        await running.send("T", body, DELAY="1")
    await running.wait_for("T", count=3, within=5)
    await running.stop()
    path = Path(running.config["storePathRootDir"]) / "config" / "delayOffset.json"
    # a copied table past the queue's end (level 1 has 3 units) and a level with no queue
    path.write_text('{"offsetTable":{1:99,2:5}}')
    await running.start()
    assert running.b.schedule.offsets == {1: 3, 2: 5}
    await running.send("T", b"d", DELAY="1")
    assert [m.body for m in await running.wait_for("T", count=4, within=5)][-1] == b"d"
    assert len(await running.pull("T")) == 4

    await running.stop()
    path.write_text("{offsetTable: nonsense")
    with pytest.raises(MetadataError, match=r"delayOffset\.json"):
        await running.start()
    running.broker = None  # start failed; nothing to stop


async def test_refusals(brokers: Factory) -> None:
    running = await brokers(messageDelayLevel="1s")
    await running.create_topic("T")
    answer = await running.send("T", b"x", DELAY="soon")
    assert answer.code == ResponseCode.SYSTEM_ERROR and "DELAY='soon'" in (answer.remark or "")
    # RocketMQ refuses a batch whose own properties ask for a delay
    batch = await running.send("T", b"", batch=True, DELAY="1")
    assert batch.code == ResponseCode.MESSAGE_ILLEGAL, batch
    assert schedule_queue_missing(running)


def schedule_queue_missing(running: RunningBroker) -> bool:
    return (SCHEDULE_TOPIC, 0) not in running.b.store.consume_queues


async def test_a_slave_keeps_the_table_but_never_delivers(brokers: Factory) -> None:
    master = await brokers("m", messageDelayLevel="1s")
    slave = await brokers(
        "s",
        messageDelayLevel="1s",
        brokerRole="SLAVE",
        brokerId=1,
        haMasterAddress=f"127.0.0.1:{master.config['haListenPort']}",
        masterAddress=master.address,
        metaSyncInterval=300,
    )
    assert master.b.schedule.running and not slave.b.schedule.running
    await master.create_topic("T")
    await master.send("T", b"x", DELAY="1")
    await master.wait_for("T", within=5)

    # the slave's store has both records by replication, the delivered one exactly once
    for _ in range(200):
        if slave.b.store.max_offset_in_queue("T", 0) >= 1:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.5)  # a delivering slave would have put a second copy by now
    assert slave.b.store.max_offset_in_queue("T", 0) == 1
    assert slave.b.store.max_phy_offset == master.b.store.max_phy_offset

    # the slave's metadata copy (GET_ALL_DELAY_OFFSET over remoting) brings the progress over,
    # so a slave promoted later would resume where the master was
    assert await master.delay_offsets() == '{"offsetTable":{1:1}}'
    for _ in range(100):
        if slave.b.schedule.offsets == {1: 1}:
            break
        await asyncio.sleep(0.05)
    assert await slave.delay_offsets() == '{"offsetTable":{1:1}}'
    saved = Path(slave.config["storePathRootDir"]) / "config" / "delayOffset.json"
    assert saved.read_text() == '{\n\t"offsetTable":{1:1\n\t}\n}'


async def test_an_unreadable_destination_is_skipped_not_retried_forever(
    brokers: Factory,
) -> None:
    running = await brokers(messageDelayLevel="1s")
    await running.create_topic("T")
    # a schedule record without REAL_QID (not one this broker wrote), then a good one
    running.b.store.put_messages(
        SCHEDULE_TOPIC,
        0,
        [BatchEntry(0, b"bad", b"DELAY\x011\x02REAL_TOPIC\x01T\x02")],
        born_host=("127.0.0.1", 1),
    )
    assert (await running.send("T", b"good", DELAY="1")).code == 0
    found = await running.wait_for("T", within=5)
    assert [m.body for m in found] == [b"good"]
    assert running.b.schedule.offsets == {1: 2}
