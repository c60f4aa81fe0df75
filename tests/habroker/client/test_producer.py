"""MQProducer against a real broker over real sockets."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter

import pytest
from habroker.client import (
    BrokerUnreachableError,
    ClientInstance,
    MessageQueue,
    MessageRejectedError,
    MQAdmin,
    MQClientError,
    MQProducer,
    MQPullConsumer,
    NameServerUnreachableError,
    OutgoingMessage,
    SendStatus,
    TopicNotExistError,
)
from habroker.client.uniq_id import new_uniq_id, uniq_id_parts
from habroker.local import free_port
from habroker.message import decode_offset_msg_id
from habroker.remoting import SerializeType


async def create(addr: str, topic: str, queues: int = 4) -> None:
    async with MQAdmin(addr) as admin:
        await admin.create_topic(topic, queues)


async def read_all(addr: str, topic: str, group: str = "reader") -> list:
    out = []
    async with MQPullConsumer(addr, group) as consumer:
        for mq in await consumer.fetch_message_queues(topic):
            offset = 0
            while True:
                res = await consumer.pull(mq, offset, 100)
                if res.status != "FOUND":
                    break
                out.extend(res.messages)
                offset = res.next_begin_offset
    return out


async def test_send_one_message_with_tags_keys_and_properties(broker):
    await create(broker.address, "orders")
    async with MQProducer(broker.address, "pg") as producer:
        res = await producer.send(
            "orders", b"hello", tags="new", keys=["k1", "k2"], properties={"region": "eu"}
        )
    assert res.status is SendStatus.SEND_OK
    assert res.topic == "orders" and res.message_queue.broker_name == "broker-a"
    assert 0 <= res.queue_id < 4 and res.queue_offset == 0
    (host, port), commit_offset = decode_offset_msg_id(res.offset_msg_id)
    assert f"{host}:{port}" == broker.address
    (msg,) = await read_all(broker.address, "orders")
    assert msg.body == b"hello" and msg.queue_id == res.queue_id
    assert msg.commit_log_offset == commit_offset and msg.msg_id == res.offset_msg_id
    assert msg.tags == "new" and msg.keys == "k1 k2" and msg.properties["region"] == "eu"
    assert msg.uniq_key == res.msg_id


async def test_round_robin_over_write_queues(broker):
    await create(broker.address, "rr", 4)
    async with MQProducer(broker.address) as producer:
        results = [await producer.send("rr", f"m{i}") for i in range(12)]
    assert Counter(r.queue_id for r in results) == {0: 3, 1: 3, 2: 3, 3: 3}
    # consecutive sends take consecutive queues
    ids = [r.queue_id for r in results]
    assert all((b - a) % 4 == 1 for a, b in itertools.pairwise(ids))


async def test_batch_is_one_request_into_one_queue(broker):
    await create(broker.address, "batch", 2)
    msgs = [OutgoingMessage(f"b{i}".encode(), tags=f"t{i % 2}", keys=f"key{i}") for i in range(10)]
    async with MQProducer(broker.address) as producer:
        first = await producer.send_batch("batch", msgs, queue=1)
        second = await producer.send_batch("batch", [b"x", b"y"], queue=1)
    assert first.status is SendStatus.SEND_OK and first.count == 10
    assert first.queue_id == 1 and first.queue_offset == 0 and second.queue_offset == 10
    stored = await read_all(broker.address, "batch")
    assert [m.body for m in stored] == [m.body for m in msgs] + [b"x", b"y"]
    assert [m.queue_offset for m in stored] == list(range(12))
    assert [m.uniq_key for m in stored[:10]] == first.msg_id.split(",")
    assert [m.msg_id for m in stored[:10]] == first.offset_msg_id.split(",")
    assert [m.tags for m in stored[:10]] == [f"t{i % 2}" for i in range(10)]
    assert len(set(first.msg_id.split(","))) == 10


async def test_sync_master_without_slave_reports_slave_not_available(broker_thread):
    b = broker_thread("sync", brokerRole="SYNC_MASTER")
    await create(b.address, "s", 1)
    async with MQProducer(b.address) as producer:
        res = await producer.send("s", b"stored anyway")
    # stored on the master; the status says the slave copy could not be confirmed
    assert res.status is SendStatus.SLAVE_NOT_AVAILABLE
    assert [m.body for m in await read_all(b.address, "s")] == [b"stored anyway"]


async def test_missing_topic_is_one_clear_error(broker):
    async with MQProducer(broker.address) as producer:
        with pytest.raises(TopicNotExistError) as err:
            await producer.send("nope", b"x")
    assert err.value.topic == "nope"
    assert "'nope' does not exist" in str(err.value)
    assert "habroker topic create nope" in str(err.value)


async def test_bad_messages_are_refused_before_sending(broker):
    await create(broker.address, "v", 1)
    async with MQProducer(broker.address) as producer:
        with pytest.raises(MessageRejectedError, match="empty"):
            await producer.send("v", b"")
        with pytest.raises(MessageRejectedError, match="characters"):
            await producer.send("bad topic!", b"x")
        with pytest.raises(MessageRejectedError, match="maxMessageSize"):
            await producer.send("v", b"x" * (4 * 1024 * 1024 + 1))
        with pytest.raises(MQClientError, match="no write queue 7"):
            await producer.send("v", b"x", queue=7)
        # the broker refuses what it cannot store: a clear broker error, not a hang
        with pytest.raises(MQClientError, match="MESSAGE_ILLEGAL"):
            await producer.send("v", b"x" * (64 * 1024 + 1))
        ok = await producer.send("v", b"x", queue=MessageQueue("v", "broker-a", 0))
    assert ok.queue_id == 0


async def test_second_name_server_answers_when_the_first_is_down(broker):
    await create(broker.address, "ns", 1)
    dead = f"127.0.0.1:{free_port()}"
    async with MQProducer(f"{dead};{broker.address}") as producer:
        res = await producer.send("ns", b"x")
    assert res.status is SendStatus.SEND_OK


async def test_unreachable_name_server_and_broker(broker):
    dead = f"127.0.0.1:{free_port()}"
    async with MQProducer(dead) as producer:
        with pytest.raises(NameServerUnreachableError, match=dead):
            await producer.send("t", b"x")
    await create(broker.address, "gone", 1)
    producer = MQProducer(broker.address, retry_times=1)
    await producer.start()
    await producer.send("gone", b"x")
    broker.stop_remoting()
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match=broker.address):
        await producer.send("gone", b"y")
    assert time.monotonic() - started < 10
    await producer.close()


def test_uniq_id_has_rocketmq_layout():
    a, b = new_uniq_id(), new_uniq_id()
    assert len(a) == 32 and a.isupper() and a != b
    ip_a, pid_a, ms_a, counter_a = uniq_id_parts(a)
    assert ip_a.count(".") == 3
    _, pid_b, ms_b, counter_b = uniq_id_parts(b)
    assert pid_a == pid_b == os.getpid() & 0xFFFF
    assert counter_b == (counter_a + 1) & 0xFFFF
    assert 0 <= ms_b - ms_a < 1000
    assert a[:20] == b[:20]  # ip + pid + per-process part


async def test_binary_headers_and_a_shared_instance(broker):
    """The ROCKETMQ header serialization (what Java clients send with serializeType=ROCKETMQ)."""
    await create(broker.address, "bin", 1)
    async with ClientInstance(broker.address, serialize_type=SerializeType.ROCKETMQ) as shared:
        producer = MQProducer(instance=shared)
        consumer = MQPullConsumer(instance=shared, group="bin")
        sent = await producer.send("bin", "é body", tags="t", properties={"k": "vé"})
        (mq,) = await consumer.fetch_message_queues("bin")
        res = await consumer.pull(mq, 0)
        (msg,) = res.messages
        assert msg.body == "é body".encode() and msg.properties["k"] == "vé"
        assert msg.uniq_key == sent.msg_id
        await producer.close()
        await consumer.close()
        # the instance is the caller's: still usable after its users closed
        assert (await shared.routes.get("bin", refresh=True)).topic == "bin"


async def test_delayed_message_arrives_after_its_level(broker):
    await create(broker.address, "later", 1)
    async with MQProducer(broker.address) as producer:
        sent = await producer.send("later", b"in a second", delay_level=1)
        with pytest.raises(MessageRejectedError, match="delayed"):
            await producer.send_batch(
                "later", [OutgoingMessage(b"x", properties={"DELAY": "2"}), b"y"]
            )
    started = time.monotonic()
    assert await read_all(broker.address, "later") == []  # not yet in its topic
    found: list = []
    for _ in range(100):
        found = await read_all(broker.address, "later")
        if found:
            break
        await asyncio.sleep(0.1)
    (msg,) = found
    assert msg.body == b"in a second" and msg.uniq_key == sent.msg_id
    assert time.monotonic() - started >= 0.5
