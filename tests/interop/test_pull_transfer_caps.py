"""How much one PULL_MESSAGE answers, held against a real RocketMQ 4.9.7 broker given the same keys.

Both brokers get the same small ``maxTransfer*`` caps and the same 60 messages of mixed sizes (one
larger than the bytes cap). Each is then read from offset 0 to its end, pull after pull, and the
number of messages in every answer is compared with what RocketMQ's rule (DefaultMessageStore's
isTheBatchFull) says for those record sizes: the Java broker shows the rule is RocketMQ's,
habroker that it follows it. Hot data gets the ``…InMemory`` pair; after ``mqadmin
updateBrokerConfig accessMessageInMemoryMaxRatio=0`` everything is "on disk" and gets the
``…InDisk`` pair; a cap changed the same way at runtime takes effect on the next pull.
"""

from __future__ import annotations

import struct
from functools import partial

import pytest
from habroker.client import MessageQueue, MQAdmin, MQProducer, MQPullConsumer, PullStatus

from tests.interop.rocketmq_java import (
    BrokerSpec,
    JavaBroker,
    JavaNameServer,
    NetNS,
    run_mqadmin,
)
from tests.interop.test_python_client import in_ns

pytestmark = pytest.mark.timeout(300)

V4 = "4.9.7"
JAVA_NAMESRV = "127.0.0.1:9876"
TOPIC = "T-caps"
CAPS = {
    "maxTransferCountOnMessageInMemory": 12,
    "maxTransferBytesOnMessageInMemory": 9000,
    "maxTransferCountOnMessageInDisk": 5,
    "maxTransferBytesOnMessageInDisk": 4000,
}
#: body sizes: small ones with a large one every 9th, so the count cap binds in some answers and
#: the bytes cap in others, and one record larger than any cap
BODY_SIZES = [2500 if i % 9 == 0 else 50 + (i * 131) % 500 for i in range(60)]
BODY_SIZES[30] = 12_000


def record_sizes(raw: bytes) -> list[int]:
    """The stored sizes of the records of one answer (each record starts with its total size)."""
    sizes, pos = [], 0
    while pos < len(raw):
        (size,) = struct.unpack_from(">i", raw, pos)
        sizes.append(size)
        pos += size
    return sizes


def rocketmq_answers(sizes: list[int], max_nums: int, count: int, max_bytes: int) -> list[int]:
    """Messages per answer by isTheBatchFull, reading ``sizes`` from the first to the last."""
    answers, start = [], 0
    while start < len(sizes):
        taken, total = 0, 0
        for size in sizes[start:]:
            if taken and (taken >= min(max_nums, count) or total + size > max_bytes):
                break
            taken, total = taken + 1, total + size
        answers.append(taken)
        start += taken
    return answers


async def read_through(
    namesrv: str, broker_name: str, max_nums: int
) -> tuple[list[int], list[int]]:
    """Pull queue 0 from offset 0 to its end: messages per answer, and every record's size."""
    answers: list[int] = []
    sizes: list[int] = []
    async with MQPullConsumer(namesrv, "g-caps") as consumer:
        mq = MessageQueue(TOPIC, broker_name, 0)
        offset = 0
        while offset < len(BODY_SIZES):
            result = await consumer.pull(mq, offset, max_nums)
            assert result.status == PullStatus.FOUND, (offset, result)
            got = record_sizes(result.raw)
            assert [m.queue_offset for m in result.messages] == list(
                range(offset, offset + len(got))
            )
            assert result.next_begin_offset == offset + len(got)
            answers.append(len(got))
            sizes += got
            offset += len(got)
    return answers, sizes


async def produce(namesrv: str) -> str:
    """Create the one-queue topic, send the messages in order; the broker's name."""
    async with MQAdmin(namesrv) as admin:
        await admin.create_topic(TOPIC, 1)
    async with MQProducer(namesrv, "p-caps") as producer:
        for i, size in enumerate(BODY_SIZES):
            result = await producer.send(TOPIC, bytes([65 + i % 26]) * size, queue=0)
            assert result.queue_offset == i
    return result.message_queue.broker_name


def update_config(ns: NetNS, namesrv: str, address: str, key: str, value: int) -> None:
    out = run_mqadmin(ns, V4, "updateBrokerConfig", "-n", namesrv, "-b", address,
                      "-k", key, "-v", str(value))  # fmt: skip
    assert "success" in out, out


def test_pull_answers_are_capped_as_a_java_broker_caps_them(netns: NetNS) -> None:
    JavaNameServer(netns, netns.root / "namesrv").start()
    java = JavaBroker(
        netns, V4, netns.root / "java", BrokerSpec(role="ASYNC_MASTER", extra=dict(CAPS))
    )
    java.start()
    ours = netns.local_broker(netns.root / "habroker", brokerRole="ASYNC_MASTER", **CAPS)
    ours.start()
    brokers = {
        "java": (JAVA_NAMESRV, java.address),
        "habroker": (ours.address, ours.address),
    }
    names = {
        system: in_ns(netns, partial(produce, namesrv)) for system, (namesrv, _) in brokers.items()
    }

    def read(system: str, max_nums: int) -> tuple[list[int], list[int]]:
        return in_ns(netns, partial(read_through, brokers[system][0], names[system], max_nums))

    hot = (CAPS["maxTransferCountOnMessageInMemory"], CAPS["maxTransferBytesOnMessageInMemory"])
    cold = (CAPS["maxTransferCountOnMessageInDisk"], CAPS["maxTransferBytesOnMessageInDisk"])
    seen: dict[str, dict[str, list[int]]] = {}
    for system, (namesrv, address) in brokers.items():
        runs: dict[str, list[int]] = {}
        for label, max_nums, caps in (("hot, 64 asked", 64, hot), ("hot, 5 asked", 5, hot)):
            answers, sizes = read(system, max_nums)
            assert len(sizes) == len(BODY_SIZES)
            assert answers == rocketmq_answers(sizes, max_nums, *caps), (system, label, sizes)
            runs[label] = answers
        update_config(netns, namesrv, address, "accessMessageInMemoryMaxRatio", 0)
        answers, sizes = read(system, 64)
        assert answers == rocketmq_answers(sizes, 64, *cold), (system, "cold", sizes)
        runs["cold, 64 asked"] = answers
        update_config(netns, namesrv, address, "maxTransferCountOnMessageInDisk", 3)
        answers, sizes = read(system, 64)
        assert answers == rocketmq_answers(sizes, 64, 3, cold[1]), (system, "cold, 3", sizes)
        runs["cold, count cap 3 at runtime"] = answers
        seen[system] = runs
    for label in seen["java"]:
        print(f"{label}: java {seen['java'][label]}")
        print(f"{label}: habroker {seen['habroker'][label]}")
    # the rule binds both ways in every reading: by count and by bytes, and the big record alone
    for runs in seen.values():
        assert max(runs["hot, 64 asked"]) == hot[0] and min(runs["hot, 64 asked"]) == 1
        assert set(runs["hot, 5 asked"]) <= {1, 2, 3, 4, 5} and max(runs["hot, 5 asked"]) == 5
        assert max(runs["cold, 64 asked"]) == cold[0]
        assert max(runs["cold, count cap 3 at runtime"]) == 3
