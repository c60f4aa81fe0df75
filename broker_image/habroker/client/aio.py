"""asyncio client on aiohttp: a batching producer and a pull consumer that tracks offsets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from habroker.client._protocol import (
    MASTER_ID,
    PRODUCE_HEADERS,
    BrokerAPIError,
    PullResult,
    SendResult,
    error_from,
    normalize_address,
    offset_path,
    parse_brokers,
    produce_path,
    pull_path,
)
from habroker.message import MessageExt
from habroker.wire import OutgoingMessage, encode_batch

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Receipt:
    """Where one message sent through a batching producer was stored."""

    status: str
    topic: str
    queue_id: int
    queue_offset: int


class _Session:
    """An aiohttp session we own, or one the caller lent us (which we must not close)."""

    def __init__(self, session: aiohttp.ClientSession | None, timeout: float) -> None:
        self._owned = session is None
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        async with self.session.request(method, url, data=data, headers=headers) as resp:
            return resp.status, resp.headers, await resp.read()

    async def json(self, method: str, url: str, payload: Any | None = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if body is not None else None
        status, _, data = await self.request(method, url, data=body, headers=headers)
        if status >= 300:
            raise error_from(status, data)
        return json.loads(data) if data else None

    async def close(self) -> None:
        if self._owned and self._session is not None:
            await self._session.close()
        self._session = None


class AsyncProducer:
    """Produces to a master. With ``batch_size > 1``, :meth:`send` calls that arrive within
    ``linger_ms`` of each other for the same topic and queue share one request, which is how
    many small producers reach batch throughput; each caller still gets its own receipt."""

    def __init__(
        self,
        address: str,
        *,
        batch_size: int = 1,
        linger_ms: float = 2.0,
        timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.base = "http://" + normalize_address(address)
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self._http = _Session(session, timeout)
        self._pending: dict[
            tuple[str, int | None], list[tuple[OutgoingMessage, asyncio.Future[Receipt]]]
        ] = {}
        self._timers: dict[tuple[str, int | None], asyncio.TimerHandle] = {}
        self._inflight: set[asyncio.Task[None]] = set()

    async def send_batch(
        self,
        topic: str,
        messages: Iterable[OutgoingMessage | bytes],
        *,
        queue_id: int | None = None,
    ) -> SendResult:
        return await self.send_encoded(topic, encode_batch(messages), queue_id=queue_id)

    async def send_encoded(
        self, topic: str, batch: bytes, *, queue_id: int | None = None
    ) -> SendResult:
        status, _, data = await self._http.request(
            "POST", self.base + produce_path(topic, queue_id), data=batch, headers=PRODUCE_HEADERS
        )
        if status != 200:
            raise error_from(status, data)
        return SendResult.from_json(json.loads(data))

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int | None = None,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Receipt:
        msg = OutgoingMessage(body, tags, keys, properties)
        if self.batch_size == 1:
            res = await self.send_batch(topic, [msg], queue_id=queue_id)
            return Receipt(res.status, res.topic, res.queue_id, res.queue_offset)
        key = (topic, queue_id)
        fut: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        bucket = self._pending.setdefault(key, [])
        bucket.append((msg, fut))
        if len(bucket) >= self.batch_size:
            self._dispatch(key)
        elif key not in self._timers:
            self._timers[key] = asyncio.get_running_loop().call_later(
                self.linger, self._dispatch, key
            )
        return await fut

    def _dispatch(self, key: tuple[str, int | None]) -> None:
        timer = self._timers.pop(key, None)
        if timer:
            timer.cancel()
        bucket = self._pending.pop(key, [])
        if bucket:
            task = asyncio.create_task(self._send_bucket(key, bucket))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _send_bucket(
        self,
        key: tuple[str, int | None],
        bucket: list[tuple[OutgoingMessage, asyncio.Future[Receipt]]],
    ) -> None:
        topic, queue_id = key
        try:
            res = await self.send_batch(topic, [m for m, _ in bucket], queue_id=queue_id)
        except Exception as exc:  # every waiter learns why its message was not stored
            for _, fut in bucket:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for i, (_, fut) in enumerate(bucket):
            if not fut.done():
                fut.set_result(Receipt(res.status, res.topic, res.queue_id, res.queue_offset + i))

    async def flush(self) -> None:
        for key in list(self._pending):
            self._dispatch(key)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)

    async def create_topic(self, topic: str, queues: int = 4) -> dict[str, Any]:
        result: dict[str, Any] = await self._http.json(
            "POST",
            self.base + "/v1/topics",
            {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues},
        )
        return result

    async def close(self) -> None:
        await self.flush()
        await self._http.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


StartFrom = Literal["committed", "earliest", "latest"]


class PullConsumer:
    """Pulls a topic's queues for a consumer group, following the broker's redirection.

    Positions start from the group's committed offsets (``start="committed"``, falling back to
    the earliest retained message), or from the earliest/latest offset. A pull is sent to the
    broker the previous answer suggested (``suggestWhichBrokerId``): the master, or a slave when
    the master says the backlog is cold. :meth:`commit` stores positions on the master.
    """

    def __init__(
        self,
        brokers: str | Mapping[int, str],
        group: str,
        topic: str,
        *,
        queue_ids: Iterable[int] | None = None,
        start: StartFrom = "committed",
        max_msgs: int = 32,
        timeout: float = 30.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.brokers = parse_brokers(brokers)
        self.group = group
        self.topic = topic
        self.start_from = start
        self.max_msgs = max_msgs
        self._queue_ids = list(queue_ids) if queue_ids is not None else None
        self._http = _Session(session, timeout)
        self.positions: dict[int, int] = {}
        self.next_broker: dict[int, int] = {}
        self.served_by: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._rr = 0

    def _url(self, broker_id: int, path: str) -> str:
        return f"http://{self.brokers[broker_id]}{path}"

    async def start(self) -> None:
        if self._queue_ids is None:
            table = (await self._http.json("GET", self._url(MASTER_ID, "/v1/topics")))[
                "topicConfigTable"
            ]
            if self.topic not in table:
                raise BrokerAPIError(404, "unknown_topic", f"topic {self.topic!r} does not exist")
            self._queue_ids = list(range(int(table[self.topic]["readQueueNums"])))
        for qid in self._queue_ids:
            self.positions[qid] = await self._initial_offset(qid)
            self._committed[qid] = self.positions[qid]

    async def _initial_offset(self, queue_id: int) -> int:
        if self.start_from == "committed":
            try:
                data = await self._http.json(
                    "GET", self._url(MASTER_ID, offset_path(self.group, self.topic, queue_id))
                )
                return int(data["offset"])
            except BrokerAPIError as exc:
                if exc.code != "no_offset":
                    raise
        probe = await self._pull_once(queue_id, 0, 1)
        return probe.max_offset if self.start_from == "latest" else probe.min_offset

    async def _pull_once(self, queue_id: int, offset: int, max_msgs: int) -> PullResult:
        broker_id = self.next_broker.get(queue_id, MASTER_ID)
        if broker_id not in self.brokers:
            broker_id = MASTER_ID
        path = pull_path(self.topic, queue_id, offset, max_msgs, self.group)
        try:
            status, headers, data = await self._http.request("GET", self._url(broker_id, path))
        except (aiohttp.ClientError, TimeoutError) as exc:
            if broker_id == MASTER_ID:
                raise
            log.warning(
                "broker %d unreachable (%s); pulling %s/%d from the master",
                broker_id,
                exc,
                self.topic,
                queue_id,
            )
            broker_id = MASTER_ID
            status, headers, data = await self._http.request("GET", self._url(MASTER_ID, path))
        if status != 200:
            raise error_from(status, data)
        result = PullResult.from_response(headers, data)
        self.next_broker[queue_id] = result.suggest_which_broker_id
        self.served_by[queue_id] = result.broker_id
        return result

    async def poll(self) -> list[MessageExt]:
        """One pull from the next queue in turn; an empty list when that queue had nothing new."""
        if self._queue_ids is None:
            await self.start()
        assert self._queue_ids is not None
        for _ in range(len(self._queue_ids)):
            qid = self._queue_ids[self._rr % len(self._queue_ids)]
            self._rr += 1
            messages = await self.poll_queue(qid)
            if messages:
                return messages
        return []

    async def poll_queue(self, queue_id: int) -> list[MessageExt]:
        offset = self.positions[queue_id]
        for _ in range(3):  # a redirect or an offset reset is retried at once
            result = await self._pull_once(queue_id, offset, self.max_msgs)
            if result.status == "FOUND":
                messages = result.messages
                self.positions[queue_id] = result.next_begin_offset
                return messages
            if result.status == "PULL_RETRY_IMMEDIATELY":
                continue
            if result.status in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY"):
                log.warning(
                    "%s/%d: offset %d is outside [%d, %d] (%s); continuing from %d",
                    self.topic,
                    queue_id,
                    offset,
                    result.min_offset,
                    result.max_offset,
                    result.status,
                    result.next_begin_offset,
                )
                offset = self.positions[queue_id] = result.next_begin_offset
                continue
            if result.status == "NO_MATCHED_MESSAGE" and result.next_begin_offset > offset:
                offset = self.positions[queue_id] = result.next_begin_offset
                continue
            return []
        return []

    def seek(self, queue_id: int, offset: int) -> None:
        """Pull ``queue_id`` from ``offset`` next (and commit that position)."""
        if queue_id not in self.positions:
            raise KeyError(f"queue {queue_id} is not assigned to this consumer")
        self.positions[queue_id] = offset

    async def commit(self) -> None:
        """Store every position that moved since the last commit on the master."""
        for qid, offset in self.positions.items():
            if self._committed.get(qid) != offset:
                await self._http.json(
                    "PUT",
                    self._url(MASTER_ID, offset_path(self.group, self.topic, qid)),
                    {"offset": offset},
                )
                self._committed[qid] = offset

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.commit()
        await self._http.close()

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
