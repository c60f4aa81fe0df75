"""ScheduleMessageService: RocketMQ's delayed delivery (message property DELAY, messageDelayLevel).

A message put with ``DELAY=n`` (n > 0, capped at the highest level) is stored in topic
``SCHEDULE_TOPIC_XXXX``, queue n-1, with its destination kept in ``REAL_TOPIC``/``REAL_QID``
(:meth:`ScheduleMessageService.redirect`: RocketMQ's commit-log put rule).  The dispatcher
writes each of those units' tagsCode as the time the message is due.  On the master one task
walks the level queues and puts every due message back into its real topic and queue; the
progress per level is ``config/delayOffset.json`` in RocketMQ's format, so a restart resumes
where it stopped and a slave (RocketMQ's or ours) copies it with GET_ALL_DELAY_OFFSET.

Consumer retries ride on this: a message a consumer sends back goes to ``%RETRY%group`` through
a delay level (see :mod:`habroker.processor.send_msg_back`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from habroker.config import BrokerConfig
from habroker.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT_STORE_MSG_OK,
    SCHEDULE_TOPIC,
    MessageExt,
    decode_properties,
    encode_properties,
    find_property,
)
from habroker.metadata import DelayOffsetManager
from habroker.store import BatchEntry, MessageStore, StoreError, StoreNotWritable
from habroker.store.consume_queue import BLANK_UNIT_SIZE

log = logging.getLogger(__name__)

# RocketMQ looks at a level again 100 ms after finding nothing due (DELAY_FOR_A_WHILE)
POLL_INTERVAL = 0.1
# messages delivered per level per round: one busy level neither starves the others nor the loop
DELIVER_BUDGET = 256
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


class BadDelayLevel(ValueError):
    """A DELAY property the broker cannot honour (not an integer, or aimed at the schedule
    topic itself)."""


def delay_queue_id(level: int) -> int:
    return level - 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ScheduleMessageService:
    def __init__(
        self, config: BrokerConfig, store: MessageStore, table: DelayOffsetManager
    ) -> None:
        self.store = store
        self.levels = config.delay_levels_ms
        self.persist_interval = config.flushDelayOffsetInterval / 1000
        # config/delayOffset.json (a Java broker's too: 4.9 or 5.x layout); GET_ALL_DELAY_OFFSET
        # answers it and a slave's metadata copy replaces it (BrokerController.delays)
        self.table = table
        self.delivered = 0
        self._dirty = False
        self._task: asyncio.Task[None] | None = None
        self._failing: dict[int, str] = {}  # level -> the put error last logged

    @property
    def offsets(self) -> dict[int, int]:
        """level -> queue offset of the next message to deliver (RocketMQ's offsetTable)."""
        return self.table.table

    @property
    def max_level(self) -> int:
        return len(self.levels)

    @property
    def running(self) -> bool:
        return self._task is not None

    # -- the put rule ----------------------------------------------------------------------
    def delay_level(self, properties: bytes) -> int:
        """The DELAY property as an int (0 if absent)."""
        raw = find_property(properties, PROPERTY_DELAY_TIME_LEVEL.encode())
        if raw is None:
            return 0
        try:
            return int(raw.decode("ascii", "replace").strip())
        except ValueError:
            raise BadDelayLevel(
                f"property DELAY={raw.decode('utf-8', 'replace')!r} is not a delay level "
                f"(an integer; this broker has levels 1..{self.max_level})"
            ) from None

    def redirect(
        self, topic: str, queue_id: int, entry: BatchEntry, wait: bool | None = None
    ) -> tuple[str, int, BatchEntry] | None:
        """Where a single message with DELAY > 0 is stored instead, or None to store it as is.

        As RocketMQ: the level is capped at the highest, the real topic and queue go into
        REAL_TOPIC/REAL_QID, and the message lands in SCHEDULE_TOPIC_XXXX queue level-1.
        ``wait`` is the producer's WAIT, which the send path strips from stored properties but
        RocketMQ 4.9.7 writes back into a delayed message's.
        """
        level = self.delay_level(entry.properties)
        if level <= 0:
            return None
        if topic == SCHEDULE_TOPIC:
            raise BadDelayLevel(f"{SCHEDULE_TOPIC} is the broker's own delay topic")
        level = min(level, self.max_level)
        props = decode_properties(entry.properties)
        props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        if wait is not None:
            props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true" if wait else "false")
        return (
            SCHEDULE_TOPIC,
            delay_queue_id(level),
            BatchEntry(entry.flag, entry.body, encode_properties(props)),
        )

    def deliver_timestamp(self, level: int, store_timestamp: int) -> int:
        """When a message of ``level`` stored at ``store_timestamp`` is due (RocketMQ adds 1 s
        for a level it does not know)."""
        if 1 <= level <= self.max_level:
            return store_timestamp + self.levels[level - 1]
        return store_timestamp + 1000

    # -- lifecycle -------------------------------------------------------------------------
    def correct_offsets(self) -> None:
        """An offset outside its queue (files deleted, a copied table) moves to the nearest end."""
        for level, offset in sorted(self.offsets.items()):
            cq = self.store.consume_queues.get((SCHEDULE_TOPIC, delay_queue_id(level)))
            if cq is None:
                continue
            fitted = min(max(offset, cq.min_offset_in_queue), cq.max_offset_in_queue)
            if fitted != offset:
                log.warning(
                    "delay level %d: offset %d is outside its queue [%d, %d]; using %d",
                    level,
                    offset,
                    cq.min_offset_in_queue,
                    cq.max_offset_in_queue,
                    fitted,
                )
                self.offsets[level] = fitted
                self._dirty = True

    def start(self) -> None:
        """Deliver due messages from now on (masters only: a slave's store takes no puts)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="schedule-message-service")
            log.info(
                "delayed delivery started: %d levels (%s), offsets %s",
                self.max_level,
                " ".join(_duration(ms) for ms in self.levels),
                self.offsets or "{}",
            )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._dirty:
            try:
                self.persist()
            except OSError as exc:
                log.error("cannot persist %s: %s", self.table.path, exc)

    # -- the offset table ------------------------------------------------------------------
    def persist(self) -> None:
        """Write delayOffset.json the way RocketMQ does (fastjson's pretty layout)."""
        self._dirty = False
        self.table.persist()

    # -- delivery --------------------------------------------------------------------------
    async def _run(self) -> None:
        last_persist = time.monotonic()
        while True:
            wait = POLL_INTERVAL
            try:
                for level in range(1, self.max_level + 1):
                    wait = min(wait, self.deliver_level(level))
            except Exception:  # a bug must not end delayed delivery for good
                log.exception("delayed delivery round failed; retrying in 10 s")
                wait = 10.0
            if self._dirty and time.monotonic() - last_persist >= self.persist_interval:
                # a few bytes, on the loop (as the consumer offsets): no writer races stop()'s
                last_persist = time.monotonic()
                try:
                    self.persist()
                except OSError as exc:
                    log.error("cannot persist %s: %s", self.table.path, exc)
                    self._dirty = True
            await asyncio.sleep(wait)

    def deliver_level(self, level: int) -> float:
        """Put this level's due messages back into their real topics; returns how soon (s) the
        level wants another look (0 when it stopped only because of its per-round budget)."""
        store = self.store
        cq = store.consume_queues.get((SCHEDULE_TOPIC, delay_queue_id(level)))
        if cq is None or not store.running:
            return POLL_INTERVAL
        known = self.offsets.get(level, 0)
        end = cq.max_offset_in_queue
        offset = min(max(known, cq.min_offset_in_queue), end)
        delay = self.levels[level - 1]
        wait = POLL_INTERVAL
        budget = DELIVER_BUDGET
        try:
            while offset < end:
                if budget == 0:
                    wait = 0.0
                    break
                unit = cq.get_unit(offset)
                if unit is None:
                    break
                phys, size, due = unit
                if size != BLANK_UNIT_SIZE and phys >= store.min_phy_offset:
                    now = _now_ms()
                    if due > now + delay:  # the clock went back: due now (RocketMQ's rule)
                        due = now
                    if due > now:
                        wait = min(wait, (due - now) / 1000)
                        break
                    msg = store.look_message_by_offset(phys, size, decompress_body=False)
                    if msg is not None and not self._deliver(level, offset, msg):
                        break  # the store refused the put: retry this message next round
                    budget -= 1
                offset += 1
        finally:
            if offset != known:
                self.offsets[level] = offset
                self._dirty = True
        return wait

    def _deliver(self, level: int, offset: int, msg: MessageExt) -> bool:
        """Put one due message into its real topic; False if the store refused for now.

        RocketMQ 4.9.7 rebuilds the message from the stored one and writes the stored
        properties back as they are (DELAY, REAL_TOPIC and REAL_QID included): its timeup
        code drops DELAY from the property map after the properties string is built.
        """
        props = msg.properties
        topic = props.get(PROPERTY_REAL_TOPIC, "")
        raw_queue = props.get(PROPERTY_REAL_QUEUE_ID, "")
        queue_id = int(raw_queue) if raw_queue.isdigit() else -1
        if not topic or queue_id < 0 or topic in (SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC):
            log.error(
                "delay level %d offset %d: no usable REAL_TOPIC/REAL_QID (%r, %r); skipped",
                level,
                offset,
                topic,
                raw_queue,
            )
            return True
        try:
            self.store.put_messages(
                topic,
                queue_id,
                [BatchEntry(msg.flag, msg.body, encode_properties(props))],
                born_host=msg.born_host,
                born_timestamp=msg.born_timestamp,
                sys_flag=msg.sys_flag,
                reconsume_times=msg.reconsume_times,
            )
        except StoreNotWritable as exc:
            if self._failing.get(level) != str(exc):
                log.warning("delay level %d: cannot deliver yet (%s); retrying", level, exc)
                self._failing[level] = str(exc)
            return False
        except (StoreError, ValueError) as exc:
            log.error(
                "delay level %d offset %d: the store refused the message for %s/%d (%s); skipped",
                level,
                offset,
                topic,
                queue_id,
                exc,
            )
            return True
        self._failing.pop(level, None)
        self.delivered += 1
        return True

    def status(self) -> dict[str, object]:
        """Per level: delivered up to / stored up to (RocketMQ's scheduleMessageOffset_N)."""
        store = self.store
        return {
            str(level): {
                "delayMs": delay,
                "offset": self.offsets.get(level, 0),
                "maxOffset": store.max_offset_in_queue(SCHEDULE_TOPIC, delay_queue_id(level)),
            }
            for level, delay in enumerate(self.levels, 1)
        }


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
