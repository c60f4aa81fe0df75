"""Delayed delivery and consumer retries through a real ``habroker serve`` process: remoting on
its listenPort, a crash (SIGKILL) with delayed messages pending, and a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from habroker.local import LocalBroker
from habroker.remoting import ResponseCode

from tests.habroker.remoting.retry_support import BrokerRequests

# level 2 is long enough to crash the broker before it is due; level 3 is the first retry's
LEVELS = "1s 3s 1s"


async def test_a_crash_loses_no_delayed_message_and_redelivers_none_already_persisted(
    broker_factory: Callable[..., LocalBroker],
) -> None:
    process = broker_factory(
        "b",
        messageDelayLevel=LEVELS,
        flushDelayOffsetInterval=200,
        mappedFileSizeCommitLog=1 << 20,
        maxMessageSize=1 << 19,
    )
    broker = BrokerRequests(process.address)
    try:
        await broker.create_topic("T")
        assert (await broker.send("T", b"early", DELAY="1")).code == ResponseCode.SUCCESS
        assert [m.body for m in await broker.wait_for("T", within=5)] == [b"early"]
        saved = Path(process.config["storePathRootDir"]) / "config" / "delayOffset.json"
        for _ in range(40):  # written every flushDelayOffsetInterval
            if saved.exists():
                break
            await asyncio.sleep(0.05)
        assert saved.read_text() == '{\n\t"offsetTable":{1:1\n\t}\n}'

        assert (await broker.send("T", b"pending", DELAY="2")).code == ResponseCode.SUCCESS
        await broker.close()
        process.kill()  # SIGKILL while "pending" waits in SCHEDULE_TOPIC_XXXX

        process.start()
        found = await broker.wait_for("T", count=2, within=8)
        assert [m.body for m in found] == [b"early", b"pending"]
        await asyncio.sleep(0.5)
        assert len(await broker.pull("T")) == 2, "a delivered message came again"
        assert await broker.delay_offsets() == '{"offsetTable":{1:1,2:1}}'

        # a consumer's RECONSUME_LATER, through the process
        answer = await broker.send_back(found[1], "G", max_reconsume_times=1)
        assert answer.code == ResponseCode.SUCCESS, answer
        retry = await broker.wait_for("%RETRY%G", within=5)
        assert [(m.body, m.reconsume_times) for m in retry] == [(b"pending", 1)]
        assert retry[0].properties["RETRY_TOPIC"] == "T"
        answer = await broker.send_back(retry[0], "G", max_reconsume_times=1)
        assert answer.code == ResponseCode.SUCCESS, answer
        dead = await broker.wait_for("%DLQ%G", within=2)
        assert [(m.body, m.reconsume_times) for m in dead] == [(b"pending", 2)]
    finally:
        await broker.close()
