"""Blocking facades over the asyncio remoting client, for code without an event loop.

Spark tasks and scripts call these from ordinary threads: each facade runs its asyncio object
on a private event loop in a daemon thread and waits for each call.  One facade may be used from
several threads; the calls are serialised onto its loop, where they still run concurrently.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from habroker.client.admin import MQAdmin, OffsetReset, QueueProgress, TopicQueueStats
from habroker.client.consumer import MQPullConsumer, PullResult
from habroker.client.instance import SUB_ALL, ClientInstance
from habroker.client.producer import DEFAULT_PRODUCER_GROUP, MQProducer, SendResult
from habroker.client.route import ClusterInfo, MessageQueue, TopicRoute
from habroker.message import MessageExt
from habroker.wire import OutgoingMessage

T = TypeVar("T")


class _LoopThread:
    """An event loop running in its own daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()


async def _build_instance(namesrv_addr: str | Sequence[str], wait: float) -> ClientInstance:
    return ClientInstance(namesrv_addr, timeout=wait)


class _Facade:
    def __init__(self, namesrv_addr: str | Sequence[str], timeout: float, name: str) -> None:
        self._loop = _LoopThread(name)
        # the instance owns asyncio objects: build it on its loop
        try:
            self._instance = self._loop.run(_build_instance(namesrv_addr, timeout))
        except BaseException:
            self._loop.stop()
            raise

    def _close(self, closer: Coroutine[Any, Any, None]) -> None:
        try:
            self._loop.run(closer, 30)
            self._loop.run(self._instance.close(), 30)
        finally:
            self._loop.stop()


class SyncMQProducer(_Facade):
    """:class:`~habroker.client.producer.MQProducer`, blocking."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str],
        group: str = DEFAULT_PRODUCER_GROUP,
        *,
        send_timeout: float = 3.0,
        retry_times: int = 2,
    ) -> None:
        super().__init__(namesrv_addr, send_timeout, "habroker-producer")
        self.producer = MQProducer(
            group=group, instance=self._instance, send_timeout=send_timeout, retry_times=retry_times
        )

    def send(
        self,
        topic: str,
        body: OutgoingMessage | bytes | str,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue: MessageQueue | int | None = None,
        delay_level: int = 0,
    ) -> SendResult:
        return self._loop.run(
            self.producer.send(
                topic,
                body,
                tags=tags,
                keys=keys,
                properties=properties,
                queue=queue,
                delay_level=delay_level,
            )
        )

    def send_batch(
        self,
        topic: str,
        messages: Iterable[OutgoingMessage | bytes | str],
        *,
        queue: MessageQueue | int | None = None,
    ) -> SendResult:
        return self._loop.run(self.producer.send_batch(topic, list(messages), queue=queue))

    def close(self) -> None:
        self._close(self.producer.close())

    def __enter__(self) -> SyncMQProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncMQPullConsumer(_Facade):
    """:class:`~habroker.client.consumer.MQPullConsumer`'s explicit-offset side, blocking:
    what a Spark task needs (pull a queue from an offset, read and store group offsets)."""

    def __init__(
        self,
        namesrv_addr: str | Sequence[str],
        group: str,
        *,
        pull_batch_size: int = 32,
        timeout: float = 3.0,
    ) -> None:
        super().__init__(namesrv_addr, timeout, "habroker-consumer")
        self.consumer = MQPullConsumer(
            group=group, instance=self._instance, pull_batch_size=pull_batch_size, timeout=timeout
        )

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop.run(self.consumer.fetch_message_queues(topic))

    def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int | None = None,
        expression: str = SUB_ALL,
        *,
        suspend: float = 0.0,
    ) -> PullResult:
        return self._loop.run(self.consumer.pull(mq, offset, max_nums, expression, suspend=suspend))

    def committed(self, mq: MessageQueue) -> int | None:
        return self._loop.run(self.consumer.committed(mq))

    def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        self._loop.run(self.consumer.commit_offset(mq, offset))

    def min_offset(self, mq: MessageQueue) -> int:
        return self._loop.run(self.consumer.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._loop.run(self.consumer.max_offset(mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._loop.run(self.consumer.search_offset(mq, timestamp_ms))

    @property
    def served_by(self) -> dict[MessageQueue, int]:
        return dict(self.consumer.served_by)

    def close(self) -> None:
        self._close(self.consumer.close())

    def __enter__(self) -> SyncMQPullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncMQAdmin(_Facade):
    """:class:`~habroker.client.admin.MQAdmin`, blocking."""

    def __init__(self, namesrv_addr: str | Sequence[str], *, timeout: float = 5.0) -> None:
        super().__init__(namesrv_addr, timeout, "habroker-admin")
        self.admin = MQAdmin(instance=self._instance)

    def cluster_info(self) -> ClusterInfo:
        return self._loop.run(self.admin.cluster_info())

    def broker_runtime_info(self, address: str) -> dict[str, str]:
        return self._loop.run(self.admin.broker_runtime_info(address))

    def create_topic(
        self,
        topic: str,
        queues: int = 4,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        return self._loop.run(
            self.admin.create_topic(topic, queues, cluster=cluster, broker_addr=broker_addr)
        )

    def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        return self._loop.run(self.admin.delete_topic(topic, cluster=cluster))

    def topic_list(self) -> list[str]:
        return self._loop.run(self.admin.topic_list())

    def topic_route(self, topic: str) -> TopicRoute:
        return self._loop.run(self.admin.topic_route(topic))

    def topic_stats(self, topic: str) -> list[TopicQueueStats]:
        return self._loop.run(self.admin.topic_stats(topic))

    def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        return self._loop.run(self.admin.consumer_progress(group, topic))

    def reset_offsets(self, group: str, topic: str, to: str | int) -> list[OffsetReset]:
        return self._loop.run(self.admin.reset_offsets(group, topic, to))

    def view_message(self, offset_msg_id: str) -> MessageExt:
        return self._loop.run(self.admin.view_message(offset_msg_id))

    def close(self) -> None:
        async def nothing() -> None:
            return None

        self._close(nothing())

    def __enter__(self) -> SyncMQAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
