"""MQPullConsumer against real brokers: pull statuses, long polling, tags, assign/poll, offsets,
and suggestWhichBrokerId redirection between a master and its slave."""

from __future__ import annotations

import asyncio
import time

from habroker.client import (
    MessageQueue,
    MQAdmin,
    MQProducer,
    MQPullConsumer,
    OutgoingMessage,
    PullStatus,
)

from tests.habroker.client.conftest import wait_for


async def setup_topic(addr: str, topic: str, queues: int = 4) -> None:
    async with MQAdmin(addr) as admin:
        await admin.create_topic(topic, queues)


async def test_pull_statuses_follow_the_broker(broker):
    await setup_topic(broker.address, "p", 1)
    mq = MessageQueue("p", "broker-a", 0)
    async with MQProducer(broker.address) as producer:
        await producer.send_batch("p", [f"m{i}".encode() for i in range(5)], queue=0)
    async with MQPullConsumer(broker.address, "g") as consumer:
        found = await consumer.pull(mq, 0, 3)
        assert found.status is PullStatus.FOUND and found.broker_id == 0
        assert [m.body for m in found.messages] == [b"m0", b"m1", b"m2"]
        assert (found.next_begin_offset, found.min_offset, found.max_offset) == (3, 0, 5)
        assert found.broker_address == broker.address and found.raw
        end = await consumer.pull(mq, 5)
        assert end.status is PullStatus.NO_NEW_MSG and end.messages == []
        # far past the end: the broker moves the consumer to a valid offset
        moved = await consumer.pull(mq, 1000)
        assert moved.status is PullStatus.OFFSET_ILLEGAL and moved.next_begin_offset == 5
        assert consumer.served_by[mq] == 0


async def test_long_polling_answers_when_a_message_arrives(broker):
    await setup_topic(broker.address, "lp", 1)
    mq = MessageQueue("lp", "broker-a", 0)
    async with MQPullConsumer(broker.address, "g") as consumer, MQProducer(broker.address) as p:

        async def later() -> None:
            await asyncio.sleep(0.5)
            await p.send("lp", b"late", queue=0)

        started = time.monotonic()
        sender = asyncio.create_task(later())
        res = await consumer.pull(mq, 0, suspend=10.0)
        waited = time.monotonic() - started
        await sender
        assert res.status is PullStatus.FOUND and [m.body for m in res.messages] == [b"late"]
        assert 0.4 < waited < 5.0
        # nothing arrives: the broker holds the pull for the suspend time, then NO_NEW_MSG
        started = time.monotonic()
        res = await consumer.pull(mq, 1, suspend=0.6)
        assert res.status is PullStatus.NO_NEW_MSG and time.monotonic() - started >= 0.5


async def test_tag_expression_filters(broker):
    await setup_topic(broker.address, "tags", 1)
    mq = MessageQueue("tags", "broker-a", 0)
    tags = ["a", "b", "c", "a", "c", "b", "a"]
    async with MQProducer(broker.address) as producer:
        await producer.send_batch(
            "tags",
            [OutgoingMessage(f"{i}{t}".encode(), tags=t) for i, t in enumerate(tags)],
            queue=0,
        )
    async with MQPullConsumer(broker.address, "g") as consumer:
        res = await consumer.pull(mq, 0, 32, "a || c")
        assert [m.body for m in res.messages] == [b"0a", b"2c", b"3a", b"4c", b"6a"]
        only_b = await consumer.pull(mq, 0, 32, "b")
        assert [m.body for m in only_b.messages] == [b"1b", b"5b"]
        assert only_b.next_begin_offset == 7


async def test_assign_poll_commit_and_resume(broker):
    await setup_topic(broker.address, "ap", 4)
    async with MQProducer(broker.address) as producer:
        sent = [(await producer.send("ap", f"m{i}")).msg_id for i in range(40)]
    async with MQPullConsumer(broker.address, "grp", long_polling_timeout=1.0) as consumer:
        queues = await consumer.fetch_message_queues("ap")
        assert queues == [MessageQueue("ap", "broker-a", q) for q in range(4)]
        await consumer.assign(queues)
        got = []
        while len(got) < 40:
            batch = await consumer.poll_batch(timeout=5)
            assert batch is not None, f"only {len(got)} of 40 polled"
            assert all(m.queue_id == batch.message_queue.queue_id for m in batch.messages)
            assert batch.broker_id == 0
            got.extend(batch.messages)
        assert sorted(m.uniq_key for m in got) == sorted(sent)
        committed = await consumer.commit()
        assert sum(committed.values()) == 40
        assert all(consumer.position(mq) == 10 for mq in queues)
    # progress as admin tools see it: every queue consumed to its end
    async with MQAdmin(broker.address) as admin:
        progress = await admin.consumer_progress("grp", "ap")
        assert [(p.broker_offset, p.consumer_offset, p.lag) for p in progress] == [(10, 10, 0)] * 4
        async with MQProducer(broker.address) as producer:
            for _ in range(3):
                await producer.send("ap", b"more", queue=2)
        progress = await admin.consumer_progress("grp")
        assert sum(p.lag for p in progress) == 3
    # a new consumer of the group continues after what was committed
    async with MQPullConsumer(broker.address, "grp", long_polling_timeout=1.0) as again:
        await again.assign(queues)
        batch = await again.poll_batch(timeout=5)
        assert batch is not None and [m.body for m in batch.messages] == [b"more"] * 3
        assert await again.poll_batch(timeout=0.5) is None


async def test_poll_with_tags_commits_past_filtered_messages(broker):
    await setup_topic(broker.address, "pt", 1)
    mq = MessageQueue("pt", "broker-a", 0)
    async with MQProducer(broker.address) as producer:
        await producer.send_batch(
            "pt", [OutgoingMessage(b"x%d" % i, tags="a" if i == 3 else "z") for i in range(10)]
        )
    async with MQPullConsumer(broker.address, "tg", long_polling_timeout=0.5) as consumer:
        await consumer.assign([mq], "a")
        batch = await consumer.poll_batch(timeout=5)
        assert batch is not None and [m.body for m in batch.messages] == [b"x3"]
        wait_for_position = time.monotonic() + 5
        while consumer.position(mq) != 10 and time.monotonic() < wait_for_position:
            await consumer.poll_batch(timeout=0.2)
        assert consumer.position(mq) == 10
        await consumer.commit()
        assert await consumer.committed(mq) == 10


async def test_seek_and_offset_lookups(broker):
    await setup_topic(broker.address, "sk", 1)
    mq = MessageQueue("sk", "broker-a", 0)
    async with MQProducer(broker.address) as producer:
        for i in range(5):
            await producer.send("sk", f"early{i}", queue=0)
        await asyncio.sleep(0.05)
        boundary = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        for i in range(5):
            await producer.send("sk", f"late{i}", queue=0)
    async with MQPullConsumer(broker.address, "sg", long_polling_timeout=0.5) as consumer:
        assert await consumer.min_offset(mq) == 0 and await consumer.max_offset(mq) == 10
        assert await consumer.search_offset(mq, boundary) == 5
        assert await consumer.earliest_msg_store_time(mq) <= boundary
        assert await consumer.committed(mq) == 0  # a new group on a queue that starts at 0
        await consumer.assign([mq])
        await consumer.seek_to_timestamp(mq, boundary)
        batch = await consumer.poll_batch(timeout=5)
        assert batch is not None and batch.messages[0].body == b"late0"
        await consumer.seek_to_end(mq)
        assert await consumer.poll_batch(timeout=0.3) is None and consumer.position(mq) == 10
        await consumer.seek_to_begin(mq)
        batch = await consumer.poll_batch(timeout=5)
        assert batch is not None and batch.messages[0].body == b"early0"


async def test_backlog_is_read_from_the_slave_then_the_master(group):
    async with MQAdmin(group.master.address) as admin:
        await admin.create_topic("rd", 1)
        route = await admin.topic_route("rd")
    assert dict(route.brokers[0].addrs) == {0: group.master.address, 1: group.slave.address}
    group.wait_topic_on_slave("rd")
    bodies = [f"msg-{i:05d}".encode() * 20 for i in range(3000)]  # ~700 KB of log
    async with MQProducer(group.master.address) as producer:
        for start in range(0, len(bodies), 100):
            await producer.send_batch("rd", bodies[start : start + 100], queue=0)
    group.wait_replicated()
    mq = MessageQueue("rd", "broker-a", 0)
    got: list[bytes] = []
    served: list[int] = []
    async with MQPullConsumer(group.master.address, "readers") as consumer:
        offset = 0
        while True:
            res = await consumer.pull(mq, offset, 100)
            if res.status is not PullStatus.FOUND:
                break
            got.extend(m.body for m in res.messages)
            served.extend([res.broker_id] * len(res.messages))
            offset = res.next_begin_offset
        assert got == bodies
        # the master answered first and sent the cold backlog to broker 1, which served it
        # until the consumer was within 10% of 1 MiB of the end; then back to the master
        assert served[0] == 0 and served.count(1) > 2000
        assert res.suggest_which_broker_id == 0 and consumer.pull_from[mq] == 0
        # a slave that stops answering: the pull goes to the master instead
        consumer.pull_from[mq] = 1
        group.slave.stop_remoting()
        res = await consumer.pull(mq, 0, 10)
        assert res.status is PullStatus.FOUND and res.broker_id == 0
        assert [m.body for m in res.messages] == bodies[:10]


async def test_poll_reports_the_slave_that_served(group):
    async with MQAdmin(group.master.address) as admin:
        await admin.create_topic("pr", 1)
    group.wait_topic_on_slave("pr")
    bodies = [b"y" * 300] * 2000
    async with MQProducer(group.master.address) as producer:
        for start in range(0, len(bodies), 100):
            await producer.send_batch("pr", bodies[start : start + 100], queue=0)
    group.wait_replicated()
    mq = MessageQueue("pr", "broker-a", 0)
    seen: set[int] = set()
    count = 0
    async with MQPullConsumer(group.master.address, "pollers", long_polling_timeout=0.5) as c:
        await c.assign([mq])
        while count < len(bodies):
            batch = await c.poll_batch(timeout=5)
            assert batch is not None
            count += len(batch.messages)
            seen.add(batch.broker_id)
        await c.commit()
    assert seen == {0, 1}
    # offsets were committed to the master, whichever member served the reads
    wait_for(
        lambda: (
            group.master.call(lambda: group.master.broker.offsets.query("pollers", "pr", 0)) == 2000
        ),
        what="offset on the master",
    )


async def test_heartbeat_registers_the_group_and_close_unregisters(broker):
    await setup_topic(broker.address, "hb", 2)

    def members() -> dict:
        groups = broker.remoting.consumers.groups
        return {g: sorted(info.subscriptions) for g, info in groups.items()}

    consumer = MQPullConsumer(broker.address, "hbgroup", long_polling_timeout=0.5)
    await consumer.assign(await consumer.fetch_message_queues("hb"), "a || b")
    assert broker.call(members) == {"hbgroup": ["hb"]}
    sub = broker.call(lambda: broker.remoting.consumers.groups["hbgroup"].subscriptions["hb"])
    assert sub.tags == ["a", "b"]
    # the broker made the group's retry topic, as it does for a Java consumer's heartbeat
    assert broker.call(lambda: broker.broker.topics.get("%RETRY%hbgroup") is not None)
    await consumer.close()
    assert broker.call(members) == {}


async def test_slave_without_slave_reads_sends_the_pull_to_the_master(group):
    async with MQAdmin(group.master.address) as admin:
        await admin.create_topic("ri", 1)
    group.wait_topic_on_slave("ri")
    async with MQProducer(group.master.address) as producer:
        await producer.send_batch("ri", [b"a", b"b"], queue=0)
    group.wait_replicated()
    group.slave.call(lambda: group.slave.broker.update_config({"slaveReadEnable": False}))
    mq = MessageQueue("ri", "broker-a", 0)
    async with MQPullConsumer(group.master.address, "ri") as consumer:
        await consumer.fetch_message_queues("ri")
        consumer.pull_from[mq] = 1
        res = await consumer.pull(mq, 0)
        # PULL_RETRY_IMMEDIATELY from the slave, suggesting the master; nothing consumed
        assert res.status is PullStatus.NO_MATCHED_MSG and res.broker_id == 1
        assert res.suggest_which_broker_id == 0 and res.next_begin_offset == 0
        res = await consumer.pull(mq, res.next_begin_offset)
        assert res.status is PullStatus.FOUND and res.broker_id == 0
        assert [m.body for m in res.messages] == [b"a", b"b"]


async def test_a_master_that_skips_units_moves_the_offset_even_when_it_suggests_a_slave(group):
    # a cold backlog of one tag, pulled for another: the master answers PULL_RETRY_IMMEDIATELY
    # (nothing matched in the 16000 units it examined) and, the rest of the backlog being cold
    # (~800 KB > 10% of 1 MiB), suggests the slave. Its nextBeginOffset stands: holding the
    # offset would ask for the same units forever.
    async with MQAdmin(group.master.address) as admin:
        await admin.create_topic("skip", 1)
    async with MQProducer(group.master.address) as producer:
        for _ in range(40):
            batch = [OutgoingMessage(b"x" * 50, tags="a") for _ in range(500)]
            await producer.send_batch("skip", batch, queue=0)
    mq = MessageQueue("skip", "broker-a", 0)
    async with MQPullConsumer(group.master.address, "skippers") as consumer:
        res = await consumer.pull(mq, 0, 32, "b")
    assert res.status is PullStatus.NO_MATCHED_MSG and res.broker_id == 0
    assert res.suggest_which_broker_id == 1
    assert res.next_begin_offset > 0
