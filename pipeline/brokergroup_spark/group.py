"""Talking to a broker group: queue bounds, consumer offsets, and reading one offset range.

Reads follow the broker's redirection the way RocketMQ's pull consumer does: every pull goes to
the broker the previous answer suggested (``X-Suggest-Which-Broker-Id``), so a backlog read is
moved to a slave by the master and back to the master by the slave once it has caught up. A slave
that cannot answer (unreachable, behind, reads disabled) sends the pull back to the master, which
has the final word on what exists.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
from habroker.client import BrokerAPIError, BrokerConnection
from habroker.client._protocol import error_from, offset_path, pull_path

from brokergroup_spark.plan import Queue
from brokergroup_spark.prefetch import ahead
from brokergroup_spark.records import decode

log = logging.getLogger("brokergroup_spark")

MASTER = 0
FOUND = "FOUND"
TOO_SMALL = "OFFSET_TOO_SMALL"


class DataLossError(RuntimeError):
    """Offsets the query must read no longer exist (retention removed them, or a queue shrank)."""


@dataclass(slots=True)
class Pull:
    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    suggested: int
    served_by: int
    body: bytes


class Group:
    """Keep-alive connections to the brokers of one group, opened on first use."""

    def __init__(self, brokers: Mapping[int, str], timeout: float = 30.0) -> None:
        self.brokers = dict(brokers)
        self.timeout = timeout
        self._conns: dict[int, BrokerConnection] = {}

    def _conn(self, broker_id: int) -> BrokerConnection:
        conn = self._conns.get(broker_id)
        if conn is None:
            conn = self._conns[broker_id] = BrokerConnection(self.brokers[broker_id], self.timeout)
        return conn

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata ----------------------------------------------------------------------------
    def _topic_table(self) -> tuple[int, dict[str, Any]]:
        """The topic table from the master, or from a slave (its copy) if the master is down."""
        errors = []
        for broker_id in sorted(self.brokers):  # the master (0) first
            try:
                table = self._conn(broker_id).json("GET", "/v1/topics")["topicConfigTable"]
            except OSError as exc:
                errors.append(f"{broker_id}={self.brokers[broker_id]}: {exc}")
                continue
            if broker_id != MASTER:
                log.warning("master unreachable (%s); planning from broker %d", errors, broker_id)
            return broker_id, table
        raise ConnectionError("no broker of the group answers: " + "; ".join(errors))

    def queue_counts(self, topics: tuple[str, ...]) -> tuple[int, dict[str, int]]:
        """Read queues per topic, and the broker that said so."""
        broker_id, table = self._topic_table()
        missing = [t for t in topics if t not in table]
        if missing:
            raise BrokerAPIError(
                404,
                "unknown_topic",
                f"topic(s) {', '.join(missing)} do not exist on broker {broker_id} "
                f"({self.brokers[broker_id]})",
            )
        return broker_id, {t: int(table[t]["readQueueNums"]) for t in topics}

    def bounds(self, topics: tuple[str, ...]) -> dict[Queue, tuple[int, int]]:
        """(minOffset, maxOffset) of every read queue, as the master (else a slave) sees them."""
        broker_id, counts = self.queue_counts(topics)
        out: dict[Queue, tuple[int, int]] = {}
        for topic, count in counts.items():
            # one request per topic (the broker's topic stats), not one probe pull per queue
            data = self._conn(broker_id).json("GET", f"/v1/topics/{quote(topic, safe='')}/offsets")
            queues = data.get("queues") or {}
            for queue in range(count):
                q = queues.get(str(queue)) or {"minOffset": 0, "maxOffset": 0}
                out[(topic, queue)] = (int(q["minOffset"]), int(q["maxOffset"]))
        return out

    def discover(self) -> dict[int, str]:
        """``brokers`` plus the slaves the master's status names (brokerId and HTTP address
        the slaves announce); the given addresses win."""
        found = dict(self.brokers)
        try:
            status = self._conn(MASTER).json("GET", "/v1/status")
        except (OSError, BrokerAPIError) as exc:
            log.warning("slave discovery: the master's status is unavailable (%s)", exc)
            return found
        for slave in (status.get("master") or {}).get("slaves") or []:
            # httpAddress, not listenAddress: that is RocketMQ's client port, not HTTP
            broker_id, address = slave.get("brokerId"), slave.get("httpAddress")
            if isinstance(broker_id, int) and broker_id > 0 and address:
                found.setdefault(broker_id, str(address))
        return found

    def commit(self, group: str, offsets: Mapping[Queue, int]) -> None:
        """Report progress to the master's offset table (informational: Spark's checkpoint rules)."""
        conn = self._conn(MASTER)
        for (topic, queue), offset in sorted(offsets.items()):
            body = json.dumps({"offset": offset}).encode()
            status, _, data = conn.request(
                "PUT", offset_path(group, topic, queue), body, {"Content-Type": "application/json"}
            )
            if status >= 300:
                raise error_from(status, data)

    # -- reading -----------------------------------------------------------------------------
    def pull(
        self, broker_id: int, topic: str, queue: int, offset: int, count: int, group: str | None
    ) -> Pull:
        status, headers, body = self._conn(broker_id).request(
            "GET", pull_path(topic, queue, offset, count, group)
        )
        if status != 200:
            raise error_from(status, body)

        def num(name: str) -> int:
            return int(headers.get(name, "0"))

        return Pull(
            headers.get("X-Pull-Status", FOUND),
            num("X-Next-Begin-Offset"),
            num("X-Min-Offset"),
            num("X-Max-Offset"),
            num("X-Suggest-Which-Broker-Id"),
            int(headers.get("X-Broker-Id", str(broker_id))),
            body,
        )

    def read_range(
        self,
        topic: str,
        queue: int,
        start: int,
        end: int,
        *,
        batch: int = 1024,
        group: str | None = None,
        fail_on_data_loss: bool = True,
        prefetch: bool = True,
        coalesce_rows: int = 8192,
        coalesce_bytes: int = 8 << 20,
    ) -> Iterator[pa.RecordBatch]:
        """Arrow batches of queue offsets ``[start, end)``.

        With ``prefetch`` the pulls run ahead in a thread, so the broker prepares the next
        response while this one is decoded (socket waits release the GIL). Consecutive
        responses from the same broker are decoded together, up to ``coalesce_rows`` rows or
        ``coalesce_bytes`` bytes: per-batch costs (numpy/Arrow calls here, batch handling in
        Spark's JVM) shrink with fewer, larger batches.
        """
        where = f"{topic}/{queue}"
        pulls = self._pulls(topic, queue, start, end, batch, group, fail_on_data_loss)
        pending: list[Pull] = []
        first = start
        size = count = 0
        for offset, pull in ahead(pulls, depth=4) if prefetch else pulls:
            if pending and pull.served_by != pending[0].served_by:
                yield self._decode(where, topic, pending, first, end, fail_on_data_loss)
                pending, size, count = [], 0, 0
            if not pending:
                first = offset
            pending.append(pull)
            size += len(pull.body)
            count += pull.next_offset - offset
            if count >= coalesce_rows or size >= coalesce_bytes:
                yield self._decode(where, topic, pending, first, end, fail_on_data_loss)
                pending, size, count = [], 0, 0
        if pending:
            yield self._decode(where, topic, pending, first, end, fail_on_data_loss)

    @staticmethod
    def _decode(
        where: str, topic: str, pulls: list[Pull], first: int, end: int, fail: bool
    ) -> pa.RecordBatch:
        body = pulls[0].body if len(pulls) == 1 else b"".join(p.body for p in pulls)
        rows = decode(body, topic=topic, broker_id=pulls[0].served_by, limit=end - first)
        offsets = np.asarray(rows.column("queueOffset"))
        expected = first + np.arange(len(offsets))
        if not np.array_equal(offsets, expected):
            # Queue offsets are dense: a hole is a message the broker no longer has.
            have = set(offsets.tolist())
            stop = int(offsets[-1]) if len(offsets) else pulls[-1].next_offset
            missing = [o for o in range(first, stop) if o not in have]
            for lo, hi in _runs(missing):
                _lost(where, lo, hi + 1, fail, "the broker no longer has them")
        return rows

    def _pulls(
        self,
        topic: str,
        queue: int,
        start: int,
        end: int,
        batch: int,
        group: str | None,
        fail_on_data_loss: bool,
    ) -> Iterator[tuple[int, Pull]]:
        """The FOUND responses covering ``[start, end)`` with the offset each was asked for,
        following the broker's suggestions and handling every other status."""
        offset = start
        broker = MASTER
        down: set[int] = set()  # brokers that could not be reached during this range
        where = f"{topic}/{queue}"
        while offset < end:
            try:
                pull = self.pull(broker, topic, queue, offset, min(batch, end - offset), group)
            except OSError as exc:
                down.add(broker)
                alive = [b for b in sorted(self.brokers) if b not in down]  # the master first
                if not alive:
                    raise
                log.warning(
                    "%s: broker %d unreachable (%s); trying %d", where, broker, exc, alive[0]
                )
                broker = alive[0]
                continue
            if pull.status != FOUND and broker != MASTER and MASTER not in down:
                broker = MASTER  # a slave that is behind or refuses reads: ask the master
                continue
            if pull.status == FOUND:
                if pull.next_offset <= offset:
                    raise RuntimeError(
                        f"{where}: broker {pull.served_by} answered offset {offset} with "
                        f"nextBeginOffset {pull.next_offset}"
                    )
                yield offset, pull
                offset = pull.next_offset
                nxt = pull.suggested if pull.suggested in self.brokers else MASTER
                if nxt not in down:
                    broker = nxt
            elif pull.status == TOO_SMALL or pull.next_offset > offset:
                # Below the queue's minimum (retention removed it) or units skipped.
                resume = max(pull.min_offset, pull.next_offset, offset + 1)
                _lost(where, offset, min(resume, end), fail_on_data_loss, "retention removed them")
                offset = resume
            elif broker != MASTER:
                raise ConnectionError(
                    f"{where}: the master is unreachable and broker {broker} has offsets only up "
                    f"to {pull.max_offset} (needed up to {end}); retry once the master is back"
                )
            else:
                _lost(
                    where,
                    offset,
                    end,
                    fail_on_data_loss,
                    f"the master answers {pull.status} (maxOffset {pull.max_offset})",
                )
                return


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
