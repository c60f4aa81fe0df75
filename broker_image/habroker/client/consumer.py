"""MQPullConsumer: read queues over RocketMQ's remoting protocol, with a group's offsets.

Two levels, as in RocketMQ's Java client:

* :meth:`MQPullConsumer.pull` — one PULL_MESSAGE for a queue at an offset you choose
  (DefaultMQPullConsumer.pull).  It goes to the group member the previous answer for that queue
  suggested (``suggestWhichBrokerId``: a master sends a consumer that has fallen far behind to a
  slave, a slave sends a consumer that caught up back), to the master when the route does not
  have that member, and back to the master when a slave stops answering.  Every answer says
  which member served it (:attr:`PullResult.broker_id`).
* :meth:`MQPullConsumer.assign` + :meth:`MQPullConsumer.poll` — DefaultLitePullConsumer's assign
  mode: a task per queue long-polls (the broker holds a pull until a message arrives or
  ``long_polling_timeout`` passes) into a bounded buffer, ``poll`` hands out one pull's messages
  at a time, and :meth:`MQPullConsumer.commit` stores the positions after what ``poll`` returned
  on the queue's master (UPDATE_CONSUMER_OFFSET).  A queue starts at the group's committed
  offset, else where ``consume_from`` says; ``seek*`` moves it.

PULL_OFFSET_MOVED (the offset is outside the queue: retention removed it, or it is past the end)
continues at the broker's ``nextBeginOffset``, as RocketMQ's clients do.  A tag expression
(``"a || b"``) is filtered by the broker by tag hash and again here by exact tag.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from habroker.client.errors import (
    BrokerUnreachableError,
    MQBrokerError,
    MQClientError,
    TopicNotExistError,
)
from habroker.client.instance import (
    SUB_ALL,
    ClientInstance,
    ConsumerRegistration,
    subscription_json,
)
from habroker.client.route import MASTER_ID, MessageQueue
from habroker.message import MessageExt, decode_records
from habroker.remoting import RequestCode, ResponseCode
from habroker.remoting.acl import SessionCredentials

log = logging.getLogger(__name__)

DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
# PullSysFlag bits
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_LITE_PULL = 0x10
PULL_DELAY_ON_ERROR = 1.0  # seconds before a queue's task pulls again after a failure
SUSPEND_MARGIN = 10.0


class PullStatus(StrEnum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def parse_expression(expression: str | None) -> tuple[str, frozenset[str] | None]:
    """A TAG expression as RocketMQ's FilterAPI reads it: (subString, tags or None for all)."""
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return SUB_ALL, None
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    return text, tags or None


@dataclass(slots=True)
class PullResult:
    """One PULL_MESSAGE answer.  ``raw`` is the records as the broker sent them (commit-log
    bytes, what the Spark connector decodes in bulk); ``messages`` decodes them on first use."""

    status: PullStatus
    message_queue: MessageQueue
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    broker_id: int
    broker_address: str
    raw: bytes = b""
    tags: frozenset[str] | None = None
    _messages: list[MessageExt] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[MessageExt]:
        if self._messages is None:
            found = decode_records(self.raw) if self.raw else []
            if self.tags is not None:
                found = [m for m in found if m.tags in self.tags]
            self._messages = found
        return self._messages


@dataclass(slots=True)
class PolledBatch:
    """What one :meth:`MQPullConsumer.poll_batch` returns: one pull's messages of one queue."""

    message_queue: MessageQueue
    messages: list[MessageExt]
    broker_id: int
    next_offset: int


@dataclass(slots=True)
class _QueueState:
    mq: MessageQueue
    expression: str
    pull_offset: int | None = None  # next offset to pull
    consumed: int | None = None  # next offset poll() has not returned: what commit() stores
    committed: int | None = None
    generation: int = 0
    buffered: int = 0
    space: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class MQPullConsumer:
    def __init__(
        self,
        namesrv_addr: str | Sequence[str] | None = None,
        group: str = DEFAULT_CONSUMER_GROUP,
        *,
        instance: ClientInstance | None = None,
        pull_batch_size: int = 32,
        long_polling_timeout: float = 20.0,
        consume_from: str | int = "last",
        pull_threshold_for_queue: int = 1000,
        auto_commit: bool = False,
        auto_commit_interval: float = 5.0,
        timeout: float = 3.0,
        credentials: SessionCredentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            raise ValueError("MQPullConsumer needs namesrv_addr or a ClientInstance")
        if isinstance(consume_from, str) and consume_from not in ("first", "last"):
            raise ValueError(f"consume_from={consume_from!r}: 'first', 'last' or a time in ms")
        self.group = group
        self._owns_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv_addr or "", timeout=timeout, credentials=credentials, tls=tls
        )
        self.pull_batch_size = pull_batch_size
        self.long_polling_timeout = long_polling_timeout
        self.consume_from = consume_from
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval
        self.timeout = timeout
        # the member each queue's next pull goes to (the last answer's suggestWhichBrokerId)
        self.pull_from: dict[MessageQueue, int] = {}
        # the member that served each queue's last pull
        self.served_by: dict[MessageQueue, int] = {}
        self._sub_versions: dict[str, int] = {}
        self._states: dict[MessageQueue, _QueueState] = {}
        self._cache: asyncio.Queue[tuple[_QueueState, int, list[MessageExt], int, int]] = (
            asyncio.Queue()
        )
        self._last_commit = time.monotonic()
        self.last_error: MQClientError | None = None

    # -- queues ------------------------------------------------------------------------
    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of a topic (TopicNotExistError if it has no route)."""
        route = await self.instance.routes.get(topic)
        return route.subscribe_queues()

    async def _master(self, mq: MessageQueue) -> str:
        routes = self.instance.routes
        address = routes.master_address(mq.broker_name)
        if address is None:
            await routes.get(mq.topic, refresh=True)
            address = routes.master_address(mq.broker_name)
        if address is None:
            raise MQClientError(f"broker group {mq.broker_name} has no master in the route")
        return address

    async def _subscribe_address(self, mq: MessageQueue, broker_id: int) -> tuple[str, int]:
        routes = self.instance.routes
        found = routes.subscribe_address(mq.broker_name, broker_id)
        if found is None:
            await routes.get(mq.topic, refresh=True)
            found = routes.subscribe_address(mq.broker_name, broker_id)
        if found is None:
            raise MQClientError(
                f"no broker of group {mq.broker_name} is in the route of {mq.topic!r}"
            )
        return found

    # -- one pull ----------------------------------------------------------------------
    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int | None = None,
        expression: str = SUB_ALL,
        *,
        suspend: float = 0.0,
    ) -> PullResult:
        """PULL_MESSAGE once.  With ``suspend`` > 0 the broker holds a pull that finds nothing
        for up to that many seconds, answering as soon as the queue grows (long polling)."""
        sub_string, tags = parse_expression(expression)
        sys_flag = FLAG_SUBSCRIPTION | FLAG_LITE_PULL | (FLAG_SUSPEND if suspend > 0 else 0)
        header = {
            "consumerGroup": self.group,
            "topic": mq.topic,
            "queueId": mq.queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums or self.pull_batch_size,
            "sysFlag": sys_flag,
            "commitOffset": 0,
            "suspendTimeoutMillis": int(suspend * 1000),
            "subscription": sub_string,
            "subVersion": self._sub_version(sub_string),
            "expressionType": "TAG",
        }
        # a broker may answer a held pull a few seconds after its suspend time (RocketMQ's
        # hold service checks every 5 s): wait longer than that, as consumerTimeoutMillisWhenSuspend
        wait = suspend + SUSPEND_MARGIN if suspend > 0 else self.timeout
        wanted = self.pull_from.get(mq, MASTER_ID)
        address, broker_id = await self._subscribe_address(mq, wanted)
        try:
            answer = await self.instance.invoke(
                address, RequestCode.PULL_MESSAGE, header, timeout=wait
            )
            refused = answer.code not in _STATUS_BY_CODE
        except BrokerUnreachableError:
            if broker_id == MASTER_ID:
                raise
            refused = True
        if refused and broker_id != MASTER_ID:
            # a slave that stopped answering or refuses reads (RocketMQ 5 answers SYSTEM_BUSY
            # when slaveReadEnable=false): this queue reads from its master until told otherwise
            log.info("slave %s of %s cannot serve the pull; pulling from the master", address, mq)
            self.pull_from[mq] = MASTER_ID
            address, broker_id = await self._subscribe_address(mq, MASTER_ID)
            answer = await self.instance.invoke(
                address, RequestCode.PULL_MESSAGE, header, timeout=wait
            )
        status = _STATUS_BY_CODE.get(answer.code)
        if status is None:
            if answer.code == ResponseCode.TOPIC_NOT_EXIST:
                self.instance.routes.invalidate(mq.topic)
                raise TopicNotExistError(mq.topic, f"broker {address}")
            raise MQBrokerError(answer.code, answer.remark, address, RequestCode.PULL_MESSAGE)
        ext = answer.ext_fields
        suggestion = int(ext.get("suggestWhichBrokerId", MASTER_ID))
        next_offset = int(ext.get("nextBeginOffset", offset))
        if status is PullStatus.NO_MATCHED_MSG and broker_id not in (MASTER_ID, suggestion):
            # "ask that broker instead": a 4.9 slave without slaveReadEnable says so with the
            # nextBeginOffset of messages it read but did not send; never skip past them.  A
            # master's nextBeginOffset stands (units it skipped: filtered, or their bytes gone)
            next_offset = offset
        self.pull_from[mq] = suggestion
        self.served_by[mq] = broker_id
        return PullResult(
            status,
            mq,
            next_offset,
            int(ext.get("minOffset", 0)),
            int(ext.get("maxOffset", 0)),
            suggestion,
            broker_id,
            address,
            answer.body_bytes if status is PullStatus.FOUND else b"",
            tags,
        )

    def _sub_version(self, sub_string: str) -> int:
        version = self._sub_versions.get(sub_string)
        if version is None:
            version = self._sub_versions[sub_string] = time.time_ns() // 1_000_000
        return version

    # -- offsets on the master ---------------------------------------------------------
    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's stored offset for a queue (QUERY_CONSUMER_OFFSET), None if it has none."""
        address = await self._master(mq)
        answer = await self.instance.call(
            address,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": self.group, "topic": mq.topic, "queueId": mq.queue_id},
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND),
        )
        if answer.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return int(answer.ext_fields.get("offset", -1))

    async def commit_offset(self, mq: MessageQueue, offset: int) -> None:
        """Store the group's offset for a queue (UPDATE_CONSUMER_OFFSET on its master)."""
        address = await self._master(mq)
        await self.instance.call(
            address,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {
                "consumerGroup": self.group,
                "topic": mq.topic,
                "queueId": mq.queue_id,
                "commitOffset": offset,
            },
        )

    async def _offset_request(self, mq: MessageQueue, code: int, **extra: int) -> int:
        address = await self._master(mq)
        answer = await self.instance.call(
            address, code, {"topic": mq.topic, "queueId": mq.queue_id, **extra}
        )
        key = "timestamp" if code == RequestCode.GET_EARLIEST_MSG_STORETIME else "offset"
        return int(answer.ext_fields.get(key, -1))

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_request(mq, RequestCode.GET_MIN_OFFSET)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset after the queue's last message."""
        return await self._offset_request(mq, RequestCode.GET_MAX_OFFSET)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after a time (SEARCH_OFFSET_BY_TIMESTAMP)."""
        return await self._offset_request(
            mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=timestamp_ms
        )

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return await self._offset_request(mq, RequestCode.GET_EARLIEST_MSG_STORETIME)

    # -- assign mode -------------------------------------------------------------------
    async def assign(self, queues: Iterable[MessageQueue], expression: str = SUB_ALL) -> None:
        """Read exactly these queues from now on (queues no longer listed stop)."""
        wanted = list(dict.fromkeys(queues))
        for topic in {mq.topic for mq in wanted}:
            await self.instance.routes.get(topic)
        for mq in list(self._states):
            if mq not in wanted:
                await self._stop_queue(self._states.pop(mq))
        for mq in wanted:
            st = self._states.get(mq)
            if st is None:
                st = self._states[mq] = _QueueState(mq, expression)
                st.space.set()
                self._start_queue(st)
            elif st.expression != expression:
                # a new tag expression applies from the position poll() has reached
                st.expression = expression
                if st.consumed is not None:
                    await self.seek(mq, st.consumed)
        self.instance.register_consumer(
            ConsumerRegistration(
                self.group,
                subscriptions={
                    t: subscription_json(t, expression) for t in {mq.topic for mq in wanted}
                },
            )
        )
        await self.instance.send_heartbeats()

    def assignment(self) -> list[MessageQueue]:
        return sorted(self._states)

    def position(self, mq: MessageQueue) -> int | None:
        """The offset poll() continues at on this queue (None until it is known)."""
        return self._state(mq).consumed

    def _state(self, mq: MessageQueue) -> _QueueState:
        st = self._states.get(mq)
        if st is None:
            raise MQClientError(f"{mq} is not assigned to this consumer")
        return st

    def _start_queue(self, st: _QueueState) -> None:
        st.task = asyncio.create_task(self._pull_loop(st, st.generation), name=f"pull {st.mq}")

    @staticmethod
    async def _stop_queue(st: _QueueState) -> None:
        st.generation += 1
        if st.task is not None:
            st.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await st.task
            st.task = None

    async def _initial_offset(self, mq: MessageQueue, stored: int | None) -> int:
        if stored is not None and stored >= 0:
            return stored
        if self.consume_from == "first":
            return await self.min_offset(mq)
        if self.consume_from == "last":
            return await self.max_offset(mq)
        return await self.search_offset(mq, int(self.consume_from))

    async def _pull_loop(self, st: _QueueState, generation: int) -> None:
        quick = 0
        while True:
            try:
                if st.pull_offset is None:
                    stored = await self.committed(st.mq)
                    st.committed = stored
                    st.pull_offset = await self._initial_offset(st.mq, stored)
                    if st.consumed is None:
                        st.consumed = st.pull_offset
                while st.buffered >= self.pull_threshold_for_queue:
                    st.space.clear()
                    await st.space.wait()
                started = time.monotonic()
                result = await self.pull(
                    st.mq,
                    st.pull_offset,
                    self.pull_batch_size,
                    st.expression,
                    suspend=self.long_polling_timeout,
                )
            except MQClientError as exc:
                self.last_error = exc
                log.warning("pulling %s failed: %s", st.mq, exc)
                await asyncio.sleep(PULL_DELAY_ON_ERROR)
                continue
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise
                # not us: a connection attempt shared with a caller that was cancelled
                continue
            if generation != st.generation:
                return
            self.last_error = None
            messages = result.messages if result.status is PullStatus.FOUND else []
            if result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "%s: offset %d is outside the queue (%d..%d); continuing at %d",
                    st.mq,
                    st.pull_offset,
                    result.min_offset,
                    result.max_offset,
                    result.next_begin_offset,
                )
            if messages:
                st.buffered += len(messages)
                self._cache.put_nowait(
                    (st, generation, messages, result.broker_id, result.next_begin_offset)
                )
            elif st.buffered == 0:
                # nothing handed out is pending before this point: the position moves with it
                st.consumed = result.next_begin_offset
            st.pull_offset = result.next_begin_offset
            if not messages and time.monotonic() - started < 0.05:
                quick += 1  # the broker did not hold the pull (no long polling there)
                await asyncio.sleep(min(0.02 * quick, 0.5))
            else:
                quick = 0

    async def poll_batch(self, timeout: float = 5.0) -> PolledBatch | None:  # noqa: ASYNC109
        """The next pull's messages of one queue, or None if none came within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    st, generation, messages, broker_id, next_offset = await self._cache.get()
            except TimeoutError:
                await self._maybe_auto_commit()
                return None
            if generation != st.generation or self._states.get(st.mq) is not st:
                continue  # pulled before a seek or a reassignment: dropped
            st.buffered -= len(messages)
            if st.buffered < self.pull_threshold_for_queue:
                st.space.set()
            st.consumed = next_offset
            await self._maybe_auto_commit()
            return PolledBatch(st.mq, messages, broker_id, next_offset)

    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:  # noqa: ASYNC109
        batch = await self.poll_batch(timeout)
        return batch.messages if batch is not None else []

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue this queue at ``offset``: what is buffered for it is dropped."""
        st = self._state(mq)
        await self._stop_queue(st)
        st.buffered = 0
        st.space.set()
        st.pull_offset = st.consumed = offset
        self._start_queue(st)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        await self.seek(mq, await self.max_offset(mq))

    async def seek_to_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> None:
        await self.seek(mq, await self.search_offset(mq, timestamp_ms))

    async def commit(self) -> dict[MessageQueue, int]:
        """Store the position of every assigned queue that moved since the last commit."""
        done: dict[MessageQueue, int] = {}
        for mq, st in list(self._states.items()):
            if st.consumed is not None and st.consumed != st.committed:
                offset = st.consumed
                await self.commit_offset(mq, offset)
                st.committed = offset
                done[mq] = offset
        self._last_commit = time.monotonic()
        return done

    async def _maybe_auto_commit(self) -> None:
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval:
            try:
                await self.commit()
            except MQClientError as exc:
                log.warning("auto commit failed: %s", exc)

    # -- lifecycle ---------------------------------------------------------------------
    async def close(self) -> None:
        for st in list(self._states.values()):
            await self._stop_queue(st)
        if self.auto_commit and self._states:
            with contextlib.suppress(MQClientError):
                await self.commit()
        if self._states:
            await self.instance.unregister(consumer_group=self.group)
        self._states.clear()
        if self._owns_instance:
            await self.instance.close()

    async def __aenter__(self) -> MQPullConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
