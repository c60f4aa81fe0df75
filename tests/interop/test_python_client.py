"""habroker's Python remoting client against Apache RocketMQ 4.9.7 (Java name server, SYNC_MASTER
and SLAVE in a private network namespace): the client is checked against an implementation we
did not write, in both directions — what it sends, a Java consumer reads; what a Java producer
sends (compressed bodies included), it reads; and its admin calls get Java's answers.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from habroker.client import (
    MessageQueue,
    MQAdmin,
    MQProducer,
    MQPullConsumer,
    OutgoingMessage,
    PullStatus,
    SendStatus,
    TopicNotExistError,
)

from tests.interop.rocketmq_java import (
    BrokerSpec,
    JavaBroker,
    JavaNameServer,
    NetNS,
    events_of,
    expected_body,
    run_driver,
    start_sync_group,
)

pytestmark = pytest.mark.timeout(300)

T = TypeVar("T")
V4 = "4.9.7"
V5 = "5.3.1"
NAMESRV = "127.0.0.1:9876"


@dataclass
class JavaGroup:
    ns: NetNS
    master: JavaBroker
    slave: JavaBroker


@pytest.fixture(scope="module")
def group(module_netns: NetNS) -> Iterator[JavaGroup]:
    """Java name server + SYNC_MASTER + SLAVE (4.9.7), booted once for the module."""
    ns = module_netns
    master, slave = start_sync_group(ns)
    yield JavaGroup(ns, master, slave)


def in_ns(ns: NetNS, scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run an asyncio scenario on a thread inside the namespace (its sockets live there)."""
    return ns.call(lambda: asyncio.run(scenario()), timeout=180)


def test_python_producer_to_java_lite_pull_consumer(group: JavaGroup) -> None:
    topic = "PyToJava"

    async def send() -> tuple[list[str], dict[str, Any]]:
        async with MQAdmin(NAMESRV) as admin:
            assert await admin.create_topic(topic, 4) == [group.master.address]
        sent: dict[str, Any] = {}
        async with MQProducer(NAMESRV, "py-producer") as producer:
            for i in range(8):
                res = await producer.send(
                    topic,
                    f"single {i} é".encode(),
                    tags="a" if i % 2 else "b",
                    keys=[f"k{i}", "shared"],
                    properties={"id": f"s{i}"},
                )
                assert res.status is SendStatus.SEND_OK, res
                sent[f"s{i}"] = res
            batch = [
                OutgoingMessage(f"batched {i}".encode(), tags="c", properties={"id": f"b{i}"})
                for i in range(8)
            ]
            res = await producer.send_batch(topic, batch, queue=2)
            assert res.status is SendStatus.SEND_OK and res.count == 8
            for i, (uniq, offset_id) in enumerate(
                zip(res.msg_id.split(","), res.offset_msg_id.split(","), strict=True)
            ):
                sent[f"b{i}"] = (uniq, offset_id, res.queue_offset + i)
            queues = [r.queue_id for k, r in sent.items() if k.startswith("s")]
        return sorted(set(queues)), sent

    queues, sent = in_ns(group.ns, send)
    assert queues == [0, 1, 2, 3]  # round robin over the master's write queues
    events = run_driver(
        group.ns, V4, "lite-pull", "--namesrv", NAMESRV, "--topic", topic, "--group", "java-reader",
        "--expect", "16", "--from", "first", "--timeout-s", "60",
    )  # fmt: skip
    # a send the broker answered late is sent again (as the Java producer does): at least once,
    # so an id may be read twice; the slot the SendResult names is always one of them
    got: dict[str, list[dict[str, Any]]] = {}
    for m in events_of(events, "message"):
        got.setdefault(m["id"], []).append(m)
    assert sorted(got) == sorted(sent)
    for i in range(8):
        copies, res = got[f"s{i}"], sent[f"s{i}"]
        body = f"single {i} é".encode()
        (m,) = [
            c
            for c in copies
            if (c["queueId"], c["queueOffset"]) == (res.queue_id, res.queue_offset)
        ]
        assert m["sha256"] == hashlib.sha256(body).hexdigest()
        assert m["tags"] == ("a" if i % 2 else "b") and m["keys"] == f"k{i} shared"
        assert m["msgId"] == res.msg_id  # our UNIQ_KEY is the Java client's msgId
        assert m["properties"].get("id") == f"s{i}"
        assert {c["msgId"] for c in copies} == {res.msg_id}  # a resend keeps its id
    for i in range(8):
        uniq, _, queue_offset = sent[f"b{i}"]
        (m,) = [c for c in got[f"b{i}"] if (c["queueId"], c["queueOffset"]) == (2, queue_offset)]
        assert m["msgId"] == uniq and m["tags"] == "c"
        assert m["sha256"] == hashlib.sha256(f"batched {i}".encode()).hexdigest()


def test_java_producer_to_python_consumer_and_admin(group: JavaGroup) -> None:
    topic = "JavaToPy"

    async def create() -> None:
        async with MQAdmin(NAMESRV) as admin:
            await admin.create_topic(topic, 4)

    in_ns(group.ns, create)
    events = run_driver(
        group.ns, V4, "produce", "--namesrv", NAMESRV, "--topic", topic, "--count", "12", "--mode", "sync", "--size", "6000", "--body", "text",
        "--tags", "x,y", "--keys-prefix", "key", "--id-prefix", "j",
    )  # fmt: skip
    sends = events_of(events, "send")
    assert {s["status"] for s in sends} == {"SEND_OK"}
    by_id = {s["ids"][0]: s for s in sends}

    async def consume() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with MQPullConsumer(NAMESRV, "py-reader") as consumer:
            queues = await consumer.fetch_message_queues(topic)
            assert queues == [MessageQueue(topic, "broker-a", q) for q in range(4)]
            messages = []
            for mq in queues:
                offset = 0
                while True:
                    res = await consumer.pull(mq, offset, 32)
                    if res.status is not PullStatus.FOUND:
                        assert res.status is PullStatus.NO_NEW_MSG
                        break
                    assert res.broker_id == 0
                    messages.extend(res.messages)
                    offset = res.next_begin_offset
            out["messages"] = messages
            tagged = []
            for mq in queues:
                tagged.extend((await consumer.pull(mq, 0, 32, "x")).messages)
            out["x"] = sorted(m.properties["id"] for m in tagged)
            # assign mode, long polling against the Java broker, offsets committed to it
            await consumer.assign(queues)
            polled = 0
            while polled < 12:
                batch = await consumer.poll_batch(timeout=20)
                assert batch is not None, f"{polled} of 12 polled"
                polled += len(batch.messages)
            await consumer.commit()
        async with MQAdmin(NAMESRV) as admin:
            out["progress"] = await admin.consumer_progress("py-reader", topic)
            out["stats"] = await admin.topic_stats(topic)
            out["cluster"] = await admin.cluster_info()
            out["runtime"] = await admin.broker_runtime_info(group.master.address)
            out["topics"] = await admin.topic_list()
            out["route"] = await admin.topic_route(topic)
            first = by_id["j0"]
            out["viewed"] = await admin.view_message(first["offsetMsgId"])
            out["reset"] = await admin.reset_offsets("py-reader", topic, "earliest")
            async with MQPullConsumer(NAMESRV, "py-reader") as check:
                out["committed"] = [
                    await check.committed(mq) for mq in out["route"].subscribe_queues()
                ]
            async with MQProducer(NAMESRV) as producer:
                try:
                    await producer.send("NoSuchTopicHere", b"x")
                except TopicNotExistError as exc:
                    out["missing"] = str(exc)
            await admin.delete_topic(topic)
            try:
                await admin.topic_route(topic)
            except TopicNotExistError:
                out["deleted"] = True
        return out

    out = in_ns(group.ns, consume)
    messages = out["messages"]
    assert sorted(m.properties["id"] for m in messages) == sorted(by_id)
    for m in messages:
        sent = by_id[m.properties["id"]]
        assert m.body == expected_body(m.properties["id"], 6000, "text")
        assert m.sys_flag & 0x1  # the Java producer compressed it; the body is the original
        assert m.uniq_key == sent["msgId"] and m.msg_id == sent["offsetMsgId"]
        assert (m.queue_id, m.queue_offset) == (sent["queueId"], sent["queueOffset"])
        assert m.tags in ("x", "y") and m.keys is not None and m.keys.startswith("key")
    assert out["x"] == sorted(m.properties["id"] for m in messages if m.tags == "x")
    progress = out["progress"]
    assert sum(p.broker_offset for p in progress) == 12 and sum(p.lag for p in progress) == 0
    assert sum(s.max_offset for s in out["stats"]) == 12
    assert dict(out["cluster"].brokers["broker-a"].addrs) == {
        0: group.master.address,
        1: group.slave.address,
    }
    assert out["runtime"]["brokerVersionDesc"] == "V4_9_7"
    assert int(out["runtime"]["msgPutTotalTodayNow"]) >= 12
    assert topic in out["topics"]
    assert out["viewed"].body == expected_body("j0", 6000, "text")
    assert [r.new_offset for r in out["reset"]] == [0, 0, 0, 0]
    assert out["committed"] == [0, 0, 0, 0]
    assert "'NoSuchTopicHere' does not exist" in out["missing"]
    assert out.get("deleted") is True


@pytest.mark.slow
def test_python_client_with_a_531_broker(netns: NetNS) -> None:
    """A 5.3.1 broker (registered with the 4.9.7 name server): the same client, unchanged."""
    JavaNameServer(netns, netns.root / "namesrv").start()
    broker = JavaBroker(netns, V5, netns.root / "broker", BrokerSpec(role="ASYNC_MASTER")).start()
    topic = "Py5"

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with MQAdmin(NAMESRV) as admin:
            for _ in range(50):  # the broker's first registration may still be on its way
                if (await admin.cluster_info()).masters():
                    break
                await asyncio.sleep(0.2)
            assert await admin.create_topic(topic, 2) == [broker.address]
            async with MQProducer(NAMESRV, send_timeout=10) as producer:
                singles = [
                    await producer.send(topic, f"five {i}", tags="t5", properties={"id": f"s{i}"})
                    for i in range(6)
                ]
                batch = await producer.send_batch(
                    topic, [OutgoingMessage(b"b", properties={"id": f"b{i}"}) for i in range(4)]
                )
            out["statuses"] = {r.status for r in [*singles, batch]}
            async with MQPullConsumer(NAMESRV, "py5", long_polling_timeout=2) as consumer:
                queues = await consumer.fetch_message_queues(topic)
                await consumer.assign(queues)
                got = []
                while len(got) < 10:
                    polled = await consumer.poll_batch(timeout=20)
                    assert polled is not None, f"{len(got)} of 10 polled"
                    got.extend(polled.messages)
                await consumer.commit()
                out["ids"] = sorted(m.properties["id"] for m in got)
                out["uniq"] = {m.properties["id"]: m.uniq_key for m in got}
                out["committed"] = [await consumer.committed(mq) for mq in queues]
            out["progress"] = await admin.consumer_progress("py5", topic)
            out["viewed"] = await admin.view_message(singles[0].offset_msg_id)
            out["reset"] = await admin.reset_offsets("py5", topic, "earliest")
            out["singles"] = singles
        return out

    out = in_ns(netns, scenario)
    assert out["statuses"] == {SendStatus.SEND_OK}
    assert out["ids"] == sorted([f"s{i}" for i in range(6)] + [f"b{i}" for i in range(4)])
    assert all(out["uniq"][f"s{i}"] == r.msg_id for i, r in enumerate(out["singles"]))
    assert sum(out["committed"]) == 10 and sum(p.lag for p in out["progress"]) == 0
    assert out["viewed"].body == b"five 0" and out["viewed"].tags == "t5"
    assert [r.new_offset for r in out["reset"]] == [0, 0]
    # and the 5.3.1 Java consumer reads what we sent
    events = run_driver(
        netns, V5, "lite-pull", "--namesrv", NAMESRV, "--topic", topic, "--group", "java5",
        "--expect", "10", "--timeout-s", "60", "--from", "first",
    )  # fmt: skip
    assert sorted({m["id"] for m in events_of(events, "message")}) == out["ids"]
