"""A real broker in this process, served over a real socket, and the requests a RocketMQ client
makes for delayed messages and consumer retries (SEND_MESSAGE_V2, PULL_MESSAGE,
CONSUMER_SEND_MSG_BACK), made with habroker's RemotingClient."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from habroker.broker import BrokerController
from habroker.config import BrokerConfig
from habroker.local import free_port
from habroker.message import MessageExt, decode_records, encode_properties
from habroker.processor import BrokerRemoting
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.client import RemotingClient

# PullSysFlag: FLAG_SUBSCRIPTION only (no suspend: an empty queue answers at once)
PULL_SYS_FLAG = 0x4
PROBE_GROUP = "probe"  # the consumer group the tests' pulls name


class BrokerRequests:
    """The requests, to any broker's client port (an in-process broker or ``habroker serve``)."""

    def __init__(self, address: str) -> None:
        self._address = address
        self.client = RemotingClient(timeout=5.0)

    @property
    def address(self) -> str:
        return self._address

    async def close(self) -> None:
        await self.client.close()
        self.client = RemotingClient(timeout=5.0)

    # -- requests --------------------------------------------------------------------------
    async def call(
        self, code: int, header: dict[str, Any], body: bytes | None = None
    ) -> RemotingCommand:
        return await self.client.invoke(self.address, code, header, body)

    async def create_topic(self, topic: str, queues: int = 1) -> None:
        answer = await self.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "order": False,
                "defaultTopic": "TBW102",
            },
        )
        assert answer.code == ResponseCode.SUCCESS, answer

    async def send(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        *,
        tags: str = "tagA",
        sys_flag: int = 0,
        reconsume_times: int | None = None,
        max_reconsume_times: int | None = None,
        batch: bool = False,
        **props: str,
    ) -> RemotingCommand:
        """SEND_MESSAGE_V2 as a Java producer sends it (WAIT=true, UNIQ_KEY, TAGS)."""
        properties = {"TAGS": tags, "UNIQ_KEY": f"U{time.time_ns():X}", "WAIT": "true", **props}
        header: dict[str, Any] = {
            "a": "pg",
            "b": topic,
            "c": "TBW102",
            "d": 4,
            "e": queue_id,
            "f": sys_flag,
            "g": int(time.time() * 1000),
            "h": 0,
            "i": encode_properties(properties).decode(),
            "j": reconsume_times if reconsume_times is not None else 0,
            "k": False,
            "m": batch,
        }
        if max_reconsume_times is not None:
            header["l"] = max_reconsume_times
        return await self.call(RequestCode.SEND_MESSAGE_V2, header, body)

    async def pull(
        self, topic: str, queue_id: int = 0, offset: int = 0, subscription: str = "*"
    ) -> list[MessageExt]:
        answer = await self.pull_answer(topic, queue_id, offset, subscription)
        if answer.code != ResponseCode.SUCCESS:
            return []
        # the stored bytes, as a Java consumer receives them (it decompresses by sysFlag itself)
        return decode_records(answer.body_bytes, decompress_body=False)

    async def pull_answer(
        self,
        topic: str,
        queue_id: int = 0,
        offset: int = 0,
        subscription: str = "*",
        group: str = PROBE_GROUP,
    ) -> RemotingCommand:
        return await self.call(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": group,
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": offset,
                "maxMsgNums": 32,
                "sysFlag": PULL_SYS_FLAG,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": subscription,
                "subVersion": 0,
                "expressionType": "TAG",
            },
        )

    async def create_group(self, name: str, **values: object) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, as mqadmin updateSubGroup sends it."""
        created = await self.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps({"groupName": name, **values}).encode(),
        )
        assert created.code == ResponseCode.SUCCESS, created

    async def wait_for(
        self, topic: str, queue_id: int = 0, count: int = 1, within: float = 10.0
    ) -> list[MessageExt]:
        """Pull until ``count`` messages are in the queue (from offset 0), or ``within`` s pass."""
        deadline = time.monotonic() + within
        while True:
            found = await self.pull(topic, queue_id)
            if len(found) >= count or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.05)

    async def send_back(
        self,
        msg: MessageExt,
        group: str,
        delay_level: int = 0,
        max_reconsume_times: int | None = 16,
    ) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK as DefaultMQPushConsumer sends it after RECONSUME_LATER."""
        header: dict[str, Any] = {
            "offset": msg.commit_log_offset,
            "group": group,
            "delayLevel": delay_level,
            "originMsgId": msg.uniq_key or msg.msg_id,
            "originTopic": msg.topic,
            "unitMode": False,
        }
        if max_reconsume_times is not None:
            header["maxReconsumeTimes"] = max_reconsume_times
        return await self.call(RequestCode.CONSUMER_SEND_MSG_BACK, header)

    async def delay_offsets(self) -> str:
        answer = await self.call(RequestCode.GET_ALL_DELAY_OFFSET, {})
        assert answer.code == ResponseCode.SUCCESS, answer
        return answer.body_bytes.decode()


class RunningBroker(BrokerRequests):
    """BrokerController + BrokerRemoting on 127.0.0.1; restartable on the same store and ports."""

    def __init__(self, root: Path, **config: Any) -> None:
        self.root = root
        self.port = free_port()
        super().__init__(f"127.0.0.1:{self.port}")
        self.config: dict[str, Any] = {
            "storePathRootDir": str(root),
            "listenPort": self.port,
            "haListenPort": free_port(),
            "mappedFileSizeCommitLog": 1 << 20,
            "maxMessageSize": 1 << 19,
            "flushDiskType": "ASYNC_FLUSH",
            **config,
        }
        self.broker: BrokerController | None = None
        self.remoting: BrokerRemoting | None = None

    @property
    def b(self) -> BrokerController:
        assert self.broker is not None
        return self.broker

    async def start(self) -> RunningBroker:
        cfg = BrokerConfig.load(environ={}, overrides=self.config)
        self.broker = BrokerController(cfg)
        await self.broker.start()
        self.remoting = BrokerRemoting(self.broker)
        await self.remoting.start("127.0.0.1", self.port)
        return self

    async def stop(self) -> None:
        await self.close()
        if self.remoting is not None:
            await self.remoting.stop()
            self.remoting = None
        if self.broker is not None:
            await self.broker.stop()
            self.broker = None

    async def restart(self) -> RunningBroker:
        await self.stop()
        return await self.start()
