"""Talking to a broker group over RocketMQ's remoting protocol: queue bounds, group offsets, and
reading one offset range.

A :class:`Group` is one remoting client (:class:`~habroker.client.ClientInstance`) on a private
event loop: the planner keeps one for a query, every Spark task opens its own and closes it.
Brokers are found as RocketMQ clients find them, through ``namesrvAddr``: the topic's route names
its broker group and that group's members by brokerId (0 the master, slaves as they registered).

Reads follow the broker's redirection the way RocketMQ's pull consumer does: every pull goes to
the member the previous answer suggested (``suggestWhichBrokerId``), so a backlog read is moved
to a slave by the master and back to the master by the slave once it has caught up. A slave that
cannot answer (unreachable, behind, reads disabled) sends the pull back to the master, which has
the final word on what exists. Pull bodies are commit-log records, decoded straight into Arrow
(:mod:`brokergroup_spark.records`); nothing is decoded per message on the way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from habroker import fastjson
from habroker.client import (
    BrokerUnreachableError,
    ClientInstance,
    MessageQueue,
    MQClientError,
    MQPullConsumer,
    NameServerUnreachableError,
    PullResult,
    PullStatus,
)
from habroker.client.consumer import DEFAULT_CONSUMER_GROUP
from habroker.client.route import MASTER_ID, BrokerData, QueueData
from habroker.metadata import SYSTEM_TOPICS
from habroker.remoting import RequestCode

from brokergroup_spark.plan import Queue
from brokergroup_spark.prefetch import LoopThread, ahead
from brokergroup_spark.records import decode

log = logging.getLogger("brokergroup_spark")

MASTER = MASTER_ID

# never matched by subscribePattern, with RocketMQ's system topics (SYSTEM_TOPICS, TopicValidator's
# as the broker keeps them), as Kafka's consumers leave internal topics out of pattern
# subscriptions (exclude.internal.topics)
SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_")


class DataLossError(RuntimeError):
    """Offsets the query must read no longer exist (retention removed them, or a queue shrank)."""


@dataclass(frozen=True, slots=True)
class TopicPlacement:
    """Where a topic lives: its broker group, that group's members, its read queues."""

    topic: str
    broker_name: str
    members: Mapping[int, str]
    read_queues: int


class Group:
    """One remoting client for the brokers ``namesrv_addr`` leads to, on its own event loop."""

    def __init__(
        self, namesrv_addr: str, timeout: float = 30.0, consumer_group: str | None = None
    ) -> None:
        self.namesrv_addr = namesrv_addr
        self.timeout = timeout
        self._runner = LoopThread("brokergroup-client")
        try:
            self._instance, self._consumer = self._runner.run(
                self._build(consumer_group or DEFAULT_CONSUMER_GROUP)
            )
        except BaseException:
            self._runner.stop()
            raise

    async def _build(self, consumer_group: str) -> tuple[ClientInstance, MQPullConsumer]:
        # asyncio objects belong to the loop they are made on: make them on ours
        instance = ClientInstance(self.namesrv_addr, timeout=self.timeout)
        consumer = MQPullConsumer(
            group=consumer_group, instance=instance, timeout=self.timeout, pull_batch_size=1024
        )
        return instance, consumer

    def close(self) -> None:
        if self._runner.loop.is_closed():
            return
        try:
            self._runner.run(self._instance.close(), 30)
        finally:
            self._runner.stop()

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata ----------------------------------------------------------------------------
    def placements(self, topics: tuple[str, ...]) -> dict[str, TopicPlacement]:
        """Each topic's broker group and read queue count, from its route."""
        return self._runner.run(self._placements(topics))

    async def _placements(self, topics: tuple[str, ...]) -> dict[str, TopicPlacement]:
        out: dict[str, TopicPlacement] = {}
        for topic in topics:
            route = await self._instance.routes.get(topic)
            readable = [q for q in route.queues if q.readable and q.read_queue_nums > 0]
            if len(readable) > 1:
                names = ", ".join(sorted(q.broker_name for q in readable))
                raise MQClientError(
                    f"topic {topic!r} is on several broker groups ({names}) per the route from "
                    f"{self.namesrv_addr}; the brokergroup source reads one group (its offsets "
                    "are per queueId): give namesrvAddr the brokers of one habroker group, "
                    "which route to their own group only"
                )
            if not readable:
                raise MQClientError(f"topic {topic!r} has no readable queue (route: {route})")
            queues: QueueData = readable[0]
            broker: BrokerData | None = route.broker(queues.broker_name)
            members = dict(broker.addrs) if broker is not None else {}
            if not members:
                raise MQClientError(
                    f"the route of {topic!r} names no broker of group {queues.broker_name}"
                )
            out[topic] = TopicPlacement(topic, queues.broker_name, members, queues.read_queue_nums)
        return out

    def topics_matching(self, pattern: str) -> tuple[str, ...]:
        """The topics the name server lists (GET_ALL_TOPIC_LIST_FROM_NAMESERVER) whose whole
        name matches ``pattern``, system topics left out: RocketMQ's own (TopicValidator's
        list, ``%RETRY%``/``%DLQ%``/``rmq_sys_`` names) and the topics a broker creates under its
        cluster's and its broker group's names (and ``<cluster>_REPLY_TOPIC``)."""
        return self._runner.run(self._topics_matching(pattern))

    async def _topics_matching(self, pattern: str) -> tuple[str, ...]:
        routes = self._instance.routes
        data = await routes.namesrv_json(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        names = {str(t) for t in data.get("topicList") or []}
        info = await routes.cluster_info()
        own = set(info.brokers) | set(info.clusters)
        own |= {f"{cluster}_REPLY_TOPIC" for cluster in info.clusters}  # request-reply
        compiled = re.compile(pattern)
        return tuple(
            sorted(
                t
                for t in names
                if t not in SYSTEM_TOPICS
                and t not in own
                and not t.startswith(SYSTEM_PREFIXES)
                and compiled.fullmatch(t)
            )
        )

    def offsets_by_time(
        self, times: Mapping[Queue, int], placements: Mapping[str, TopicPlacement]
    ) -> dict[Queue, int]:
        """For each queue, the first offset stored at or after its time (ms), as the master
        answers SEARCH_OFFSET_BY_TIMESTAMP; the queue's max offset when nothing is."""
        return self._runner.run(self._offsets_by_time(times, placements))

    async def _offsets_by_time(
        self, times: Mapping[Queue, int], placements: Mapping[str, TopicPlacement]
    ) -> dict[Queue, int]:
        out: dict[Queue, int] = {}
        for (topic, queue), stamp in sorted(times.items()):
            mq = MessageQueue(topic, placements[topic].broker_name, queue)
            out[(topic, queue)] = await self._consumer.search_offset(mq, stamp)
        return out

    def bounds(self, topics: tuple[str, ...]) -> dict[Queue, tuple[int, int]]:
        """(minOffset, maxOffset) of every read queue, as the master (else a slave) sees them."""
        bounds, _ = self.plan(topics)
        return bounds

    def plan(
        self, topics: tuple[str, ...]
    ) -> tuple[dict[Queue, tuple[int, int]], dict[str, TopicPlacement]]:
        """Queue bounds and where each topic lives, in one pass."""
        return self._runner.run(self._plan(topics))

    async def _plan(
        self, topics: tuple[str, ...]
    ) -> tuple[dict[Queue, tuple[int, int]], dict[str, TopicPlacement]]:
        placements = await self._placements(topics)
        out: dict[Queue, tuple[int, int]] = {}
        for topic, where in placements.items():
            stats, address = await self._topic_stats(where)
            for queue in range(where.read_queues):
                found = stats.get(queue)
                if found is None:
                    # read queues beyond the write queues the stats cover: ask for each
                    found = (
                        await self._offset(address, RequestCode.GET_MIN_OFFSET, topic, queue),
                        await self._offset(address, RequestCode.GET_MAX_OFFSET, topic, queue),
                    )
                out[(topic, queue)] = found
        return out, placements

    async def _topic_stats(self, where: TopicPlacement) -> tuple[dict[int, tuple[int, int]], str]:
        """GET_TOPIC_STATS_INFO — one request per topic — from the master, else from a slave
        (its copy: rows up to what it has), and the address that answered."""
        errors = []
        for broker_id in sorted(where.members):  # the master (0) first
            address = where.members[broker_id]
            try:
                answer = await self._instance.call(
                    address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": where.topic}
                )
            except BrokerUnreachableError as exc:
                errors.append(str(exc))
                continue
            if broker_id != MASTER:
                log.warning("master unreachable (%s); planning from broker %d", errors, broker_id)
            table = (fastjson.loads(answer.body_bytes) if answer.body_bytes else {}).get(
                "offsetTable"
            ) or {}
            stats: dict[int, tuple[int, int]] = {}
            for key, value in table.items():
                fields = _object_key(key)
                if fields.get("topic") == where.topic:
                    stats[int(fields["queueId"])] = (
                        int(value.get("minOffset", 0)),
                        int(value.get("maxOffset", 0)),
                    )
            return stats, address
        raise ConnectionError(
            f"no broker of group {where.broker_name} answers: " + "; ".join(errors)
        )

    async def _offset(self, address: str, code: int, topic: str, queue: int) -> int:
        answer = await self._instance.call(address, code, {"topic": topic, "queueId": queue})
        return int(answer.ext_fields.get("offset", 0))

    def commit(self, offsets: Mapping[Queue, int]) -> None:
        """Store the consumer group's offsets on the master (UPDATE_CONSUMER_OFFSET, one request
        per queue, as RocketMQ's clients do)."""
        self._runner.run(self._commit(offsets))

    async def _commit(self, offsets: Mapping[Queue, int]) -> None:
        placements = await self._placements(tuple(sorted({t for t, _ in offsets})))
        for (topic, queue), offset in sorted(offsets.items()):
            mq = MessageQueue(topic, placements[topic].broker_name, queue)
            await self._consumer.commit_offset(mq, offset)

    # -- reading -----------------------------------------------------------------------------
    def read_range(
        self,
        topic: str,
        queue: int,
        start: int,
        end: int,
        *,
        broker_name: str = "",
        batch: int = 1024,
        fail_on_data_loss: bool = True,
        prefetch: int = 4,
        coalesce_rows: int = 8192,
        coalesce_bytes: int = 8 << 20,
    ) -> Iterator[pa.RecordBatch]:
        """Arrow batches of queue offsets ``[start, end)``.

        Up to ``prefetch`` pull answers are fetched ahead on the client's loop, so the broker
        prepares the next answer while this one is decoded. Consecutive answers from the same
        broker are decoded together, up to ``coalesce_rows`` rows or ``coalesce_bytes`` bytes:
        per-batch costs (numpy/Arrow calls here, batch handling in Spark's JVM) shrink with
        fewer, larger batches.
        """
        where = f"{topic}/{queue}"
        name = broker_name or self.placements((topic,))[topic].broker_name
        mq = MessageQueue(topic, name, queue)
        pulls = self._pulls(mq, start, end, batch, fail_on_data_loss)
        pending: list[PullResult] = []
        first = start
        size = count = 0
        for offset, pull in ahead(self._runner, pulls, depth=max(1, prefetch)):
            if pending and pull.broker_id != pending[0].broker_id:
                yield self._decode(where, topic, pending, first, end, fail_on_data_loss)
                pending, size, count = [], 0, 0
            if not pending:
                first = offset
            pending.append(pull)
            size += len(pull.raw)
            count += pull.next_begin_offset - offset
            if count >= coalesce_rows or size >= coalesce_bytes:
                yield self._decode(where, topic, pending, first, end, fail_on_data_loss)
                pending, size, count = [], 0, 0
        if pending:
            yield self._decode(where, topic, pending, first, end, fail_on_data_loss)

    @staticmethod
    def _decode(
        where: str, topic: str, pulls: list[PullResult], first: int, end: int, fail: bool
    ) -> pa.RecordBatch:
        body = pulls[0].raw if len(pulls) == 1 else b"".join(p.raw for p in pulls)
        rows = decode(body, topic=topic, broker_id=pulls[0].broker_id, limit=end - first)
        offsets = np.asarray(rows.column("queueOffset"))
        expected = first + np.arange(len(offsets))
        if not np.array_equal(offsets, expected):
            # Queue offsets are dense: a hole is a message the broker no longer has.
            have = set(offsets.tolist())
            stop = int(offsets[-1]) if len(offsets) else pulls[-1].next_begin_offset
            missing = [o for o in range(first, stop) if o not in have]
            for lo, hi in _runs(missing):
                _lost(where, lo, hi + 1, fail, "the broker no longer has them")
        return rows

    async def _pulls(
        self, mq: MessageQueue, start: int, end: int, batch: int, fail_on_data_loss: bool
    ) -> AsyncIterator[tuple[int, PullResult]]:
        """The FOUND answers covering ``[start, end)`` with the offset each was asked for,
        following the brokers' suggestions and handling every other status."""
        consumer = self._consumer
        routes = self._instance.routes
        offset = start
        down: set[int] = set()  # members that could not serve during this range
        where = f"{mq.topic}/{mq.queue_id}"
        consumer.pull_from[mq] = MASTER
        while offset < end:
            wanted = consumer.pull_from.get(mq, MASTER)
            try:
                pull = await consumer.pull(mq, offset, min(batch, end - offset))
            except NameServerUnreachableError:
                raise
            except BrokerUnreachableError as exc:
                members = routes.broker_addrs.get(mq.broker_name, {})
                down.update(b for b, a in members.items() if a == exc.address)
                down.add(wanted)
                alive = [b for b in sorted(members) if b not in down]  # the master first
                if not alive:
                    raise
                log.warning("%s: %s; trying broker %d", where, exc, alive[0])
                consumer.pull_from[mq] = alive[0]
                continue
            if wanted != MASTER and pull.broker_id != wanted:
                # the client fell back to the master: that slave is out for this range
                down.add(wanted)
            if pull.suggest_which_broker_id in down:
                consumer.pull_from[mq] = MASTER if MASTER not in down else pull.broker_id
            if pull.status is PullStatus.FOUND:
                if pull.next_begin_offset <= offset:
                    raise RuntimeError(
                        f"{where}: broker {pull.broker_id} answered offset {offset} with "
                        f"nextBeginOffset {pull.next_begin_offset}"
                    )
                yield offset, pull
                offset = pull.next_begin_offset
                continue
            if pull.broker_id != MASTER:
                if MASTER not in down:
                    consumer.pull_from[mq] = MASTER  # a slave behind or refusing: ask the master
                    continue
                raise ConnectionError(
                    f"{where}: the master is unreachable and broker {pull.broker_id} has offsets "
                    f"only up to {pull.max_offset} (needed up to {end}); retry once the master "
                    "is back"
                )
            # The master's word is final.
            if pull.status is PullStatus.OFFSET_ILLEGAL and offset < pull.min_offset:
                resume = pull.min_offset  # below the queue's minimum: retention removed it
            elif pull.next_begin_offset > offset:
                resume = pull.next_begin_offset  # units skipped: their log bytes are gone
            else:
                _lost(
                    where,
                    offset,
                    end,
                    fail_on_data_loss,
                    f"the master answers {pull.status} (maxOffset {pull.max_offset})",
                )
                return
            _lost(where, offset, min(resume, end), fail_on_data_loss, "retention removed them")
            offset = resume


def _object_key(key: Any) -> dict[str, Any]:
    """A MessageQueue map key as fastjson writes it (an object), or quoted JSON."""
    if isinstance(key, fastjson.ObjectKey):
        return dict(key.as_dict())
    loaded = fastjson.loads(key)
    return dict(loaded) if isinstance(loaded, dict) else {}


def _runs(values: list[int]) -> Iterator[tuple[int, int]]:
    """Sorted integers as (first, last) runs of consecutive values."""
    start = prev = None
    for value in values:
        if start is None or prev is None or value != prev + 1:
            if start is not None and prev is not None:
                yield start, prev
            start = value
        prev = value
    if start is not None and prev is not None:
        yield start, prev


def _lost(where: str, first: int, stop: int, fail: bool, why: str) -> None:
    text = f"{where}: queue offsets {first}..{stop - 1} can no longer be read: {why}"
    if fail:
        raise DataLossError(
            f"{text}. Set failOnDataLoss=false to skip what is gone with a warning instead."
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", text)
