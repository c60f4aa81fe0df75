"""MQAdmin against real brokers, and the blocking facades from plain threads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from habroker.client import (
    MessageQueue,
    MQAdmin,
    MQClientError,
    MQProducer,
    MQPullConsumer,
    SyncMQAdmin,
    SyncMQProducer,
    SyncMQPullConsumer,
    TopicNotExistError,
)
from habroker.client.route import parse_namesrv_addr
from habroker.local import free_port


async def test_topics_route_stats_and_cluster(broker):
    async with MQAdmin(broker.address) as admin:
        assert await admin.create_topic("adm", 3) == [broker.address]
        assert "adm" in await admin.topic_list()
        route = await admin.topic_route("adm")
        (qd,) = route.queues
        assert (qd.read_queue_nums, qd.write_queue_nums, qd.perm) == (3, 3, 6)
        assert dict(route.brokers[0].addrs) == {0: broker.address}
        async with MQProducer(broker.address) as producer:
            for _ in range(4):
                await producer.send("adm", b"x", queue=1)
        stats = await admin.topic_stats("adm")
        assert [(s.message_queue.queue_id, s.min_offset, s.max_offset) for s in stats] == [
            (0, 0, 0),
            (1, 0, 4),
            (2, 0, 0),
        ]
        assert stats[1].last_update_timestamp > 0 and stats[0].last_update_timestamp == 0
        info = await admin.cluster_info()
        assert info.clusters == {"DefaultCluster": ("broker-a",)}
        assert info.masters() == {"broker-a": broker.address}
        runtime = await admin.broker_runtime_info(broker.address)
        assert runtime["brokerRole"] == "ASYNC_MASTER"
        assert int(runtime["msgPutTotalTodayNow"]) == 4


async def test_delete_topic(broker):
    async with MQAdmin(broker.address) as admin:
        await admin.create_topic("tmp", 1)
        async with MQProducer(broker.address) as producer:
            await producer.send("tmp", b"x")
            assert await admin.delete_topic("tmp") == [broker.address]
            assert "tmp" not in await admin.topic_list()
            with pytest.raises(TopicNotExistError):
                await admin.topic_route("tmp")
            # a producer whose cached route still names the topic gets the same clear error
            with pytest.raises(TopicNotExistError, match="'tmp' does not exist"):
                await producer.send("tmp", b"y")


async def test_reset_offsets(broker):
    async with MQAdmin(broker.address) as admin, MQProducer(broker.address) as producer:
        await admin.create_topic("rs", 2)
        for i in range(3):
            await producer.send_batch("rs", [b"a", b"b"], queue=i % 2)
        await asyncio.sleep(0.05)
        boundary = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await producer.send("rs", b"late", queue=0)
        # queue 0: 5 messages (the last after the boundary); queue 1: 2
        latest = await admin.reset_offsets("g", "rs", "latest")
        assert [(r.message_queue.queue_id, r.new_offset) for r in latest] == [(0, 5), (1, 2)]
        progress = await admin.consumer_progress("g", "rs")
        assert [p.lag for p in progress] == [0, 0]
        by_time = await admin.reset_offsets("g", "rs", boundary)
        assert [(r.old_offset, r.new_offset) for r in by_time] == [(5, 4), (2, 2)]
        earliest = await admin.reset_offsets("g", "rs", "earliest")
        assert [r.new_offset for r in earliest] == [0, 0]
        async with MQPullConsumer(broker.address, "g") as consumer:
            assert await consumer.committed(MessageQueue("rs", "broker-a", 0)) == 0
        with pytest.raises(ValueError):
            await admin.reset_offsets("g", "rs", "yesterday")


async def test_view_message_by_offset_msg_id(broker):
    async with MQAdmin(broker.address) as admin, MQProducer(broker.address) as producer:
        await admin.create_topic("vw", 1)
        await producer.send("vw", b"first")
        sent = await producer.send("vw", b"second", tags="t", keys="k")
        msg = await admin.view_message(sent.offset_msg_id)
        assert msg.body == b"second" and msg.tags == "t" and msg.keys == "k"
        assert msg.queue_offset == 1 and msg.uniq_key == sent.msg_id
        with pytest.raises(MQClientError, match="not an offsetMsgId"):
            await admin.view_message("zz")
        # a well-formed id whose offset holds no message: the broker says so
        bogus = sent.offset_msg_id[:16] + "0000000000FFFFFF"
        with pytest.raises(MQClientError, match="VIEW_MESSAGE_BY_ID"):
            await admin.view_message(bogus)


def test_blocking_facades_from_threads(broker):
    with SyncMQAdmin(broker.address) as admin:
        admin.create_topic("blk", 2)
    errors: list[BaseException] = []
    with SyncMQProducer(broker.address) as producer:

        def send(n: int) -> None:
            try:
                for i in range(20):
                    producer.send("blk", f"{n}-{i}", tags="t")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    with SyncMQPullConsumer(broker.address, "sync") as consumer:
        bodies = []
        for mq in consumer.fetch_message_queues("blk"):
            assert consumer.min_offset(mq) == 0
            res = consumer.pull(mq, 0, 100)
            bodies.extend(m.body for m in res.messages)
            consumer.commit_offset(mq, res.next_begin_offset)
            assert consumer.committed(mq) == consumer.max_offset(mq)
        assert sorted(bodies) == sorted(f"{n}-{i}".encode() for n in range(3) for i in range(20))
        assert set(consumer.served_by.values()) == {0}
    with SyncMQAdmin(broker.address) as admin:
        assert sum(p.consumer_offset for p in admin.consumer_progress("sync", "blk")) == 60
        with pytest.raises(TopicNotExistError):
            admin.topic_route("nothing")


def test_namesrv_addresses():
    assert parse_namesrv_addr("a:1; b:2;a:1") == ["a:1", "b:2"]
    assert parse_namesrv_addr(["h:9876"]) == ["h:9876"]
    for bad in ("", "host", "h:0", "h:x", ";"):
        with pytest.raises(ValueError):
            parse_namesrv_addr(bad)
    with pytest.raises(ValueError):
        SyncMQAdmin(f"127.0.0.1:{free_port()}:x")
