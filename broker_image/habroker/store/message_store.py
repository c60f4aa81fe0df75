"""MessageStore: commit log + consume queues + flush, recovery and retention, on one loop.

Every method runs on the event loop thread, so there are no locks around the in-memory state;
only fdatasync calls leave the loop (worker threads).  The write path is synchronous: a put
appends into the mapping and dispatches its consume-queue units before it returns, so a pull
issued right after sees the messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import struct
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from habroker.config import BrokerConfig, BrokerRole, FlushDiskType
from habroker.message import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MIN_RECORD_SIZE,
    POS_BORN_HOST,
    POS_SYSFLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    DispatchTuple,
    MessageExt,
    decode_record,
    host_block,
)
from habroker.store import native
from habroker.store.checkpoint import StoreCheckpoint
from habroker.store.cleaner import (
    FORCED_FILES_PER_PASS,
    CleanCommitLogService,
    clean_at_once,
    expired_before_ms,
    should_clean,
)
from habroker.store.commit_log import CommitLog, disk_used_ratio
from habroker.store.consume_queue import BLANK_UNIT_SIZE, UNIT, ConsumeQueue, Run, WalkState
from habroker.store.dispatcher import ReputMessageService
from habroker.store.errors import (
    DamagedFile,
    InvalidTopic,
    MessageTooLarge,
    PropertiesTooLarge,
    StoreError,
    StoreNotWritable,
)
from habroker.store.flush import (
    FlushCommitLogService,
    FlushConsumeQueueService,
    GroupCommitService,
    _Service,
)
from habroker.store.native import unit_tags_code
from habroker.store.store_util import in_memory_span
from habroker.store.values import (
    BatchEntry,
    CleanResult,
    FilePosition,
    GetMessageResult,
    GetMessageStatus,
    PutResult,
    PutStatus,
    SelectedRegion,
)
from habroker.store.wakeup import Wakeup

log = logging.getLogger(__name__)

# RocketMQ's TopicValidator character rule; also keeps topics safe as directory names
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_SHARED_HEAD = struct.Struct(">iq")  # SYSFLAG BORNTIMESTAMP
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_SIZE_MAGIC = struct.Struct(">ii")
_SHARED_TAIL = struct.Struct(">iq")  # RECONSUMETIMES PREPAREDTRANSACTIONOFFSET
_HOST_V6_FLAGS = 0x10 | 0x20  # BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
MAX_FILTERED_UNITS = 16000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class PutPlan:
    """A validated batch: the parts its records share, before any byte is written."""

    topic_tail: bytes  # topic length byte + topic
    shared: bytes  # SYSFLAG .. PREPAREDTRANSACTIONOFFSET
    record_base: int  # a record's size without body and properties
    total: int
    sizes: list[int] | None  # each record's size, for a batch of more than one
    queue_offset: int  # the first record's queue offset
    store_block: bytes  # STOREHOST as written
    store_ts: int
    sys_flag: int  # SYSFLAG as written


class MessageStore:
    """The broker's storage engine; see the module docstring for the threading rule."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.root = config.store_root
        self.commit_log = CommitLog(config.commit_log_dir, config.mappedFileSizeCommitLog)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.reput = ReputMessageService(
            self.commit_log,
            self._dispatch,
            self._is_slave,
            config.delay_levels_ms,
            self._dispatch_units,
        )
        self.checkpoint: StoreCheckpoint | None = None
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._topic_bytes: dict[str, bytes] = {}
        self._lock_fd: int | None = None
        self._running = False
        self._services: list[_Service] = []
        #: past diskSpaceWarningLevelRatio (checked every cleanResourceInterval): puts refused
        self.disk_full = False
        self._disk_checked_at = 0.0
        self.group_commit: GroupCommitService | None = None
        self._new_data = Wakeup()  # HA writers waiting for bytes past what they sent
        self._new_messages = Wakeup()  # long-polling pulls
        self.last_exit_ok = True
        self._last_cq: ConsumeQueue | None = None  # dispatch fast path: batches share a queue
        # slave: replicated bytes are indexed behind the HA reader (see append_to_commit_log)
        self._dispatch_wanted: asyncio.Event | None = None
        self._dispatch_task: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Lock the directory, load, recover (clean or after a crash), start the services."""
        if self._running:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self.config.commit_log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            abort = self.root / "abort"
            self.last_exit_ok = not abort.exists()
            self._load_commit_log()
            self._load_consume_queues()
            self._recover(abnormal=not self.last_exit_ok)
            abort.write_text(str(os.getpid()))
        except BaseException:
            self._close_files()
            self._release_lock()
            raise
        self._running = True
        self._start_services()

    def _start_services(self) -> None:
        cfg = self.config
        cl = self.commit_log
        if cfg.flushDiskType == FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(cl, self._flush_commit_log)
            self._services.append(self.group_commit)
            # a slave or WAIT=false producers still need their bytes synced eventually
        self._services.append(
            FlushCommitLogService(
                cl,
                lambda: self.config.flushIntervalCommitLog,
                lambda: self.config.flushCommitLogLeastPages,
                self._flush_commit_log,
            )
        )
        self._services += self._queue_and_retention_services()
        for service in self._services:
            service.start()
        self._dispatch_wanted = asyncio.Event()
        self._dispatch_task = asyncio.create_task(self._dispatch_behind(), name="dispatch-behind")

    def _queue_and_retention_services(self) -> list[_Service]:
        """What every store runs, whatever writes its log: consume-queue flushing and
        retention."""
        return [
            FlushConsumeQueueService(
                lambda: self.config.flushIntervalConsumeQueue, self._flush_consume_queues
            ),
            CleanCommitLogService(
                lambda: self.config.cleanResourceInterval, lambda: self.clean_expired(False)
            ),
        ]

    async def shutdown(self) -> None:
        """Stop services, flush everything, write the checkpoint, remove ``abort``."""
        if not self._running:
            return
        self._running = False
        if self._dispatch_task is not None:
            self._dispatch_task.cancel()
            await asyncio.gather(self._dispatch_task, return_exceptions=True)
            self._dispatch_task = None
            self.reput.do_reput()  # what the background dispatch had not reached yet
        for service in self._services:
            await service.stop()
        self._services = []
        self.group_commit = None
        await self._flush_commit_log()
        await self._flush_consume_queues()
        # measured before the files close: a closed commit log has no end to measure from
        behind = self.reput.behind()
        self._close_files()
        if behind == 0:
            (self.root / "abort").unlink(missing_ok=True)
        else:
            log.warning(
                "dispatch is %d bytes behind the commit log at shutdown; keeping the "
                "abort file so the next start recovers",
                behind,
            )
        self._release_lock()
        self._new_data.notify()
        self._new_messages.notify()

    def _close_files(self) -> None:
        self.commit_log.close()
        for cq in self.consume_queues.values():
            cq.close()
        self.consume_queues = {}
        self._last_cq = None
        if self.checkpoint is not None:
            self.checkpoint.close()
            self.checkpoint = None

    def _take_lock(self) -> None:
        path = self.root / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreError(
                    f"{self.root} is in use by another broker (lock held on {path}); two brokers "
                    "must never share a store directory"
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- loading and recovery ------------------------------------------------------------------
    def _load_commit_log(self) -> None:
        """Map the commit log; a damaged file other than a short last one is refused with the
        file and the repair named (docs/storage.md, "Repairing a damaged store")."""
        try:
            self.commit_log.queue.load()
        except DamagedFile as exc:
            self.commit_log.close()
            if exc.later:
                names = [p.name for p in exc.later]
                later = (
                    ", ".join(names)
                    if len(names) <= 5
                    else f"the {len(names)} files {names[0]} to {names[-1]}"
                )
                raise StoreError(
                    f"{exc}; refusing to start. To keep the records before the damage: stop, "
                    f"move {later} out of {exc.path.parent} and "
                    "start again (the damaged file is then the last one: it is padded and cut "
                    "at its last whole record; the moved files' records are lost to this "
                    "broker). Or rebuild this broker from a replica that has them. See "
                    'docs/storage.md, "Repairing a damaged store"'
                ) from None
            raise StoreError(
                f'{exc}; refusing to start. See docs/storage.md, "Repairing a damaged store"'
            ) from None

    def _load_consume_queues(self) -> None:
        root = self.config.consume_queue_dir
        if not root.is_dir():
            return
        for topic_dir in sorted(root.iterdir()):
            if not topic_dir.is_dir() or not _TOPIC_RE.match(topic_dir.name):
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.is_dir() or not queue_dir.name.isdigit():
                    continue
                cq = self._new_consume_queue(topic_dir.name, int(queue_dir.name))
                cq.load()

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            topic,
            queue_id,
            self.config.consume_queue_dir / topic / str(queue_id),
            self.config.mappedFileSizeConsumeQueue,
        )
        self.consume_queues[(topic, queue_id)] = cq
        return cq

    def _recover(self, abnormal: bool) -> None:
        """Valid log end by CRC scan, queues cut to it, then re-dispatch what they miss."""
        assert self.checkpoint is not None
        end, scan_start = self.commit_log.recover(
            abnormal, self.checkpoint.min_timestamp, self.config.checkCRCOnRecover
        )
        for cq in self.consume_queues.values():
            cq.recover()
            if not self.commit_log.queue.files:
                cq.queue.destroy_all()
                cq.max_physic_offset = -1
            else:
                cq.truncate_dirty(end)
        covered = max((cq.max_physic_offset for cq in self.consume_queues.values()), default=-1)
        start = self.commit_log.min_offset if covered < 0 else covered
        if abnormal:
            start = min(start, scan_start)
        for cq in self.consume_queues.values():
            if cq.needs_rebuild:
                # units past its last whole one are missing while other queues may be ahead:
                # re-dispatch from its end (units other queues hold already are skipped)
                log.warning(
                    "rebuilding consume queue %s-%d from the commit log from offset %d",
                    cq.topic,
                    cq.queue_id,
                    max(cq.max_physic_offset, self.commit_log.min_offset),
                )
                start = min(start, max(cq.max_physic_offset, 0))
                cq.needs_rebuild = False
        start = min(max(start, self.commit_log.min_offset), end)
        self.reput.reput_from_offset = start
        dispatched = self.reput.do_reput()
        if dispatched:
            log.info("recovery re-dispatched %d records from offset %d", dispatched, start)
        min_phy = self.commit_log.min_offset
        for cq in self.consume_queues.values():
            cq.correct_min_offset(min_phy)
        self._queue_offsets.clear()

    # -- dispatch ------------------------------------------------------------------------------
    def _is_slave(self) -> bool:
        return self.config.brokerRole == BrokerRole.SLAVE

    def _dispatch(self, record: DispatchTuple) -> None:
        """Index one record (the dispatcher's tuple form of a DispatchRequest)."""
        topic, queue_id, phys, size, tags, _ts, queue_offset, sys_flag = record
        tran = sys_flag & TRANSACTION_TYPE_MASK
        if tran and tran != TRANSACTION_COMMIT_TYPE:
            return  # prepared and rolled-back halves never enter a consume queue
        cq = self._queue_for(topic, queue_id, phys)
        if cq is not None:
            cq.put_unit(phys, size, tags, queue_offset)

    def _dispatch_units(
        self, topic: str, queue_id: int, first_offset: int, units: bytes, end: int
    ) -> None:
        """Index a run of units for one queue (consecutive queue offsets from ``first_offset``,
        ``end`` past the last record), made by the compiled walk of the commit log."""
        cq = self._queue_for(topic, queue_id, end)
        if cq is not None:
            cq.put_units(units, first_offset, end)

    def _queue_for(self, topic: str, queue_id: int, phys: int) -> ConsumeQueue | None:
        """The queue of the last dispatch when it is this one (dispatch comes in runs of one
        queue), else :meth:`_find_consume_queue`."""
        last = self._last_cq
        if last is not None and last.queue_id == queue_id and last.topic == topic:
            return last
        return self._find_consume_queue(topic, queue_id, phys)

    def _find_consume_queue(self, topic: str, queue_id: int, phys: int) -> ConsumeQueue | None:
        """The queue a record at ``phys`` goes to, made if new; None if no queue can hold it."""
        found = self.consume_queues.get((topic, queue_id))
        if found is None:
            if not _TOPIC_RE.match(topic) or queue_id < 0:
                log.error(
                    "record at %d has topic %r queue %d that cannot name a consume "
                    "queue; not indexed",
                    phys,
                    topic,
                    queue_id,
                )
                return None
            found = self._new_consume_queue(topic, queue_id)
        self._last_cq = found
        return found

    def _dispatch_put(
        self, topic: str, queue_id: int, entries: Sequence[BatchEntry], at: int, plan: PutPlan
    ) -> None:
        """Index a batch the master has just written at ``at`` from what the put already knows
        (offsets, sizes, store time, the raw properties), instead of parsing the records back
        out of the mapping. The units are the ones :meth:`ReputMessageService.do_reput` would
        make (tests/habroker/test_store_dispatch_put.py holds them side by side)."""
        tran = plan.sys_flag & TRANSACTION_TYPE_MASK
        if not tran or tran == TRANSACTION_COMMIT_TYPE:
            cq = self._queue_for(topic, queue_id, at)
            sizes = plan.sizes if plan.sizes is not None else (plan.total,)
            levels = self.reput.delay_levels  # parsed once, at start
            if cq is not None and native.put_cq_units is not None:  # one compiled pass
                units = native.put_cq_units(topic, entries, sizes, at, plan.store_ts, levels)
                cq.put_units(units, plan.queue_offset, at + plan.total)
            elif cq is not None:
                put_unit = cq.put_unit
                store_ts = plan.store_ts
                phys = at
                queue_offset = plan.queue_offset
                for entry, size in zip(entries, sizes, strict=True):
                    props = entry.properties
                    tags = unit_tags_code(topic, props, store_ts, levels) if props else 0
                    put_unit(phys, size, tags, queue_offset)
                    phys += size
                    queue_offset += 1
        self.reput.reput_from_offset = at + plan.total
        self.reput.last_store_timestamp = plan.store_ts

    def _notify(self) -> None:
        self._new_data.notify()
        self._new_messages.notify()

    # -- master write path ---------------------------------------------------------------------
    def put_messages(
        self,
        topic: str,
        queue_id: int,
        entries: Sequence[BatchEntry],
        *,
        born_host: tuple[str, int],
        born_timestamp: int | None = None,
        sys_flag: int = 0,
        reconsume_times: int = 0,
    ) -> PutResult:
        """Append a batch as consecutive records of one queue (spec §1.9) and index it.

        The whole batch is validated first: on any error nothing is written.  ``sys_flag``
        carries the producer's bits (COMPRESSED, MULTI_TAGS, ...); the address-family bits
        are the store's to set from the real addresses.
        """
        if self.reput.reput_from_offset < self.commit_log.max_offset:
            self.catch_up_dispatch()  # a promoted slave: queue offsets need every unit
        plan = self.plan_put(
            topic,
            queue_id,
            entries,
            born_host=born_host,
            born_timestamp=born_timestamp,
            sys_flag=sys_flag,
            reconsume_times=reconsume_times,
        )
        wrote_offset = self.commit_log.put_batch(
            plan.topic_tail,
            queue_id,
            entries,
            plan.queue_offset,
            plan.shared,
            plan.record_base,
            plan.total,
        )
        record_offsets: list[int] | None = None
        if plan.sizes is not None:  # each record's offset: where the one before it ends
            record_offsets = list(accumulate(plan.sizes[:-1], initial=wrote_offset))
        self._queue_offsets[(topic, queue_id)] = plan.queue_offset + len(entries)
        if self.reput.reput_from_offset == wrote_offset:
            self._dispatch_put(topic, queue_id, entries, wrote_offset, plan)
        else:  # a BLANK sealed the last file first (or dispatch lags): parse from where it is
            self.reput.do_reput()
        self._notify()
        return PutResult(
            PutStatus.PUT_OK,
            wrote_offset,
            plan.total,
            plan.queue_offset,
            len(entries),
            (plan.store_block + _I64.pack(wrote_offset)).hex().upper(),
            plan.store_ts,
            record_offsets,
        )

    def plan_put(
        self,
        topic: str,
        queue_id: int,
        entries: Sequence[BatchEntry],
        *,
        born_host: tuple[str, int],
        born_timestamp: int | None = None,
        sys_flag: int = 0,
        reconsume_times: int = 0,
    ) -> PutPlan:
        """Validate a batch and compute what its records share; raises before anything is
        written.  The commit log (classic or DLedger) then lays the records down."""
        if not self._running:
            raise StoreNotWritable("the store is not running")
        if self.config.brokerRole == BrokerRole.SLAVE:
            raise StoreNotWritable("a SLAVE store only takes replicated bytes")
        now = time.monotonic()
        if now - self._disk_checked_at > DISK_CHECK_INTERVAL:  # cheaper than a statvfs a put
            self._disk_checked_at = now
            self.check_disk(self.commit_log.queue.directory)
        if self.disk_full:
            raise StoreNotWritable(
                f"the store's disk is more than {self.config.diskSpaceWarningLevelRatio}% full "
                "(diskSpaceWarningLevelRatio): writes are refused until retention frees space"
            )
        if not entries:
            raise StoreError("an empty batch has nothing to store")
        if not 0 <= queue_id <= 0x7FFFFFFF:
            raise StoreError(f"queueId {queue_id} is out of range")
        topic_raw = self._topic_bytes.get(topic)
        if topic_raw is None:
            topic_raw = self._check_topic(topic)
        store_block = host_block((self.config.brokerIP1, self.config.listenPort))
        born_block = host_block(born_host)
        sys_flag = (
            (sys_flag & ~_HOST_V6_FLAGS)
            | (0x10 if len(born_block) == 20 else 0)
            | (0x20 if len(store_block) == 20 else 0)
        )
        record_base = 74 + len(born_block) + len(store_block) + 1 + len(topic_raw)
        max_body = self.config.maxMessageSize
        # maxMessageSize may exceed what one file holds (RocketMQ starts with that too): a
        # record must also fit in a file, with room for the BLANK that ends it
        file_size = self.commit_log.file_size
        room = file_size - END_FILE_MIN_BLANK_LENGTH
        total = 0
        sizes: list[int] | None = [] if len(entries) > 1 else None
        fast = (
            native.record_sizes(entries, record_base, max_body, MAX_PROPERTIES_LENGTH, room)
            if native.record_sizes is not None and sizes is not None
            else None
        )
        if fast is not None:
            total, sizes = fast
        for i, entry in enumerate(entries if fast is None else ()):
            body_len = len(entry.body)
            props_len = len(entry.properties)
            if body_len > max_body:
                raise MessageTooLarge(
                    f"message {i} of the batch: body is {body_len} bytes, "
                    f"maxMessageSize is {max_body}"
                )
            if props_len > MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLarge(
                    f"message {i} of the batch: properties are {props_len} "
                    f"bytes, at most {MAX_PROPERTIES_LENGTH}"
                )
            record_len = record_base + body_len + props_len
            if record_len > room:
                raise MessageTooLarge(
                    f"message {i} of the batch: its record is {record_len} bytes (body "
                    f"{body_len}); a commit-log file (mappedFileSizeCommitLog={file_size}) "
                    f"holds records of at most {room} bytes, whatever maxMessageSize "
                    f"({max_body}) allows"
                )
            total += record_len
            if sizes is not None:
                sizes.append(record_len)
        if total > room:
            raise MessageTooLarge(
                f"the batch encodes to {total} bytes; a commit-log file "
                f"(mappedFileSizeCommitLog={file_size}) holds at most {room}"
            )
        key = (topic, queue_id)
        queue_offset = self._queue_offsets.get(key)
        if queue_offset is None:
            cq = self.consume_queues.get(key)
            queue_offset = cq.max_offset_in_queue if cq is not None else 0
        store_ts = _now_ms()
        born_ts = store_ts if born_timestamp is None else born_timestamp
        shared = b"".join(
            (
                _SHARED_HEAD.pack(sys_flag, born_ts),
                born_block,
                _I64.pack(store_ts),
                store_block,
                _SHARED_TAIL.pack(reconsume_times, 0),
            )
        )
        return PutPlan(
            bytes((len(topic_raw),)) + topic_raw,
            shared,
            record_base,
            total,
            sizes,
            queue_offset,
            store_block,
            store_ts,
            sys_flag,
        )

    def _check_topic(self, topic: str) -> bytes:
        raw = topic.encode()
        if not raw or len(raw) > MAX_TOPIC_LENGTH_V1 or not _TOPIC_RE.match(topic):
            raise InvalidTopic(f"topic {topic!r}: 1..127 characters from [%|a-zA-Z0-9_-]")
        if len(self._topic_bytes) > 100_000:
            self._topic_bytes.clear()
        self._topic_bytes[topic] = raw
        return raw

    async def wait_flushed(self, offset: int, timeout: float) -> bool:  # noqa: ASYNC109
        """SYNC_FLUSH: True once bytes up to ``offset`` are on disk (group commit); False on
        timeout.  ASYNC_FLUSH: True at once."""
        if self.config.flushDiskType != FlushDiskType.SYNC_FLUSH:
            return True
        if self.group_commit is None:
            return self.commit_log.flushed_offset >= offset
        return await self.group_commit.wait(offset, timeout)

    # -- read path -----------------------------------------------------------------------------
    def transfer_caps(self, units: memoryview, max_msgs: int, max_bytes: int) -> tuple[int, int]:
        """``max_msgs`` and ``max_bytes`` narrowed to RocketMQ's isTheBatchFull caps.

        Data further than ``accessMessageInMemoryMaxRatio`` % of RAM behind the log's end is
        taken as on disk and gets the ``…InDisk`` pair, the rest the ``…InMemory`` pair.
        RocketMQ asks for every unit; a pull here asks once, at its first unit: a pull that
        starts cold is capped as cold throughout (RocketMQ would let its warm tail in).
        """
        c = self.config
        first_phy = UNIT.unpack_from(units, 0)[0]
        span = in_memory_span(c.totalPhysicalMemorySize, c.accessMessageInMemoryMaxRatio)
        if self.max_phy_offset - first_phy > span:
            count, size = c.maxTransferCountOnMessageInDisk, c.maxTransferBytesOnMessageInDisk
        else:
            count, size = c.maxTransferCountOnMessageInMemory, c.maxTransferBytesOnMessageInMemory
        return min(max_msgs, count), min(max_bytes, size)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        max_bytes: int = 4 * 1024 * 1024,
        *,
        tags_codes: Collection[int] | None = None,
        capped: bool = False,
    ) -> GetMessageResult:
        """RocketMQ's getMessage: up to ``max_msgs`` records from queue offset ``offset``.

        At least one record is returned even if it alone exceeds ``max_bytes``.  Units whose
        bytes retention already deleted are skipped.  ``tags_codes`` filters on the unit's
        tagsCode (the consumer re-checks the tag string: hash codes can collide).  ``capped``
        narrows both limits to the ``maxTransfer*`` keys (:meth:`transfer_caps`).
        """
        cq = self.consume_queues.get((topic, queue_id))
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
        min_offset = cq.min_offset_in_queue
        max_offset = cq.max_offset_in_queue
        if max_offset == 0:
            return GetMessageResult(
                GetMessageStatus.NO_MESSAGE_IN_QUEUE, [], 0, min_offset, max_offset
            )
        if offset < min_offset:
            return GetMessageResult(
                GetMessageStatus.OFFSET_TOO_SMALL, [], min_offset, min_offset, max_offset
            )
        if offset == max_offset:
            return GetMessageResult(
                GetMessageStatus.OFFSET_OVERFLOW_ONE, [], offset, min_offset, max_offset
            )
        if offset > max_offset:
            return GetMessageResult(
                GetMessageStatus.OFFSET_OVERFLOW_BADLY, [], max_offset, min_offset, max_offset
            )
        first = cq.units_from(offset)
        if first is None:
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL, [], offset, min_offset, max_offset
            )
        if capped:
            max_msgs, max_bytes = self.transfer_caps(first[0], max_msgs, max_bytes)
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        # Records of one queue that lie back to back in the log (a produced batch) are served
        # as one slice: one read and one buffer per run instead of per record.  A run never
        # crosses a file end (records don't; the next file starts after a BLANK).
        runs: list[Run] = []
        state: WalkState = (offset, 0, 0, 0, -1, -1, -1, 0)
        examine_limit = offset + max(MAX_FILTERED_UNITS, max_msgs * 20)
        min_phy = self.commit_log.min_offset
        found: tuple[memoryview, int] | None = first
        full = False
        while found is not None and not full:
            units = found[0]
            full, state = native.walk_units(
                units,
                state,
                examine_limit,
                max_msgs,
                max_bytes,
                min_phy,
                self.mapped_file_size,
                tags_codes,
                runs,
            )
            units.release()
            if not full:
                found = cq.units_from(state[0]) if state[0] < max_offset else None
        index, max_phy_pulling, _, _, run_start, run_end, _, run_count = state
        if run_count:
            runs.append((run_start, run_end, run_count))
        records: list[memoryview | bytes] = []
        files: list[FilePosition] | None = []
        count = 0
        read = self.commit_log.read_located
        for start, end, n in runs:
            located = read(start, end - start)
            if located is None:  # retention deleted its file meanwhile
                continue
            view, where = located
            records.append(view)
            count += n
            if where is None:
                files = None
            elif files is not None:
                files.append(where)
        if count:
            status = GetMessageStatus.FOUND
        return GetMessageResult(
            status, records, index, min_offset, max_offset, max_phy_pulling, count, files
        )

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        return cq.min_offset_in_queue if cq is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.get((topic, queue_id))
        return cq.max_offset_in_queue if cq is not None else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(qid for (t, qid) in self.consume_queues if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _) in self.consume_queues})

    def look_message_by_offset(
        self, commit_log_offset: int, size: int | None = None, *, decompress_body: bool = True
    ) -> MessageExt | None:
        """Decode the record at a commit-log offset (e.g. from an offsetMsgId).

        ``decompress_body=False`` keeps a compressed body as stored (to store it again with its
        sysFlag, as delayed delivery and consumer retries do)."""
        if size is None:
            head = self.commit_log.read(commit_log_offset, 4)
            if head is None:
                return None
            size = struct.unpack(">i", head)[0]
            head.release()
        view = self.commit_log.read(commit_log_offset, size) if size > 0 else None
        if view is None:
            return None
        try:
            return decode_record(view, decompress_body=decompress_body)
        except ValueError:
            return None
        finally:
            view.release()

    async def wait_for_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout: float,  # noqa: ASYNC109
    ) -> bool:
        """Long-poll helper: True once the queue's max offset exceeds ``offset``."""
        deadline = time.monotonic() + timeout
        while self.max_offset_in_queue(topic, queue_id) <= offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._running:
                return False
            await self._new_messages.wait(remaining)
        return True

    # -- admin lookups (remoting's GET_MIN/MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, ...) ---------
    def read_record(self, commit_log_offset: int) -> bytes | None:
        """The raw record at a commit-log offset (VIEW_MESSAGE_BY_ID answers with these bytes)."""
        head = self.commit_log.read(commit_log_offset, 8)
        if head is None:
            return None
        size, magic = _SIZE_MAGIC.unpack(head)
        head.release()
        if size < MIN_RECORD_SIZE or magic == BLANK_MAGIC:
            return None
        view = self.commit_log.read(commit_log_offset, size)
        if view is None:
            return None
        try:
            return bytes(view)
        finally:
            view.release()

    def store_time_of(self, topic: str, queue_id: int, offset: int) -> int | None:
        """STORETIMESTAMP of the message at a queue offset, or None if it is gone."""
        cq = self.consume_queues.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
            return None
        return self.store_time_at(unit[0])

    def store_time_at(self, phy_offset: int) -> int | None:
        """STORETIMESTAMP of the record at a commit-log offset (the next file's first record
        if the offset is a file's BLANK tail), or None past the end: how old the first byte a
        slave lacks is (``habroker_ha_slave_lag_seconds``)."""
        first = self.commit_log.read(phy_offset, _SIZE_MAGIC.size)
        if first is None:
            return None
        _, magic = _SIZE_MAGIC.unpack(first)
        first.release()
        if magic == BLANK_MAGIC:
            phy_offset += self.commit_log.file_size - phy_offset % self.commit_log.file_size
        head = self.commit_log.read(phy_offset, POS_BORN_HOST + 28)
        if head is None:
            return None
        try:
            (sys_flag,) = _I32.unpack_from(head, POS_SYSFLAG)
            at = POS_BORN_HOST + (20 if sys_flag & 0x10 else 8)
            (stamp,) = _I64.unpack_from(head, at)
            return int(stamp)
        finally:
            head.release()

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after ``timestamp`` (max offset if none is)."""
        lo = self.min_offset_in_queue(topic, queue_id)
        hi = self.max_offset_in_queue(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            stamp = self.store_time_of(topic, queue_id, mid)
            if stamp is None or stamp < timestamp:  # removed by retention under us: search above it
                lo = mid + 1
            else:
                hi = mid
        return lo

    def delete_topic(self, topic: str) -> int:
        """Drop a topic's consume queues (its records age out of the commit log as usual)."""
        removed = 0
        for key in [k for k in self.consume_queues if k[0] == topic]:
            cq = self.consume_queues.pop(key)
            cq.queue.destroy_all()
            cq.close()
            self._queue_offsets.pop(key, None)
            removed += 1
        if self._last_cq is not None and self._last_cq.topic == topic:
            self._last_cq = None
        directory = self.config.consume_queue_dir / topic
        if directory.is_dir():
            for child in sorted(directory.rglob("*"), reverse=True):
                child.unlink() if child.is_file() else child.rmdir()
            directory.rmdir()
        self._topic_bytes.pop(topic, None)
        return removed

    # -- facts ---------------------------------------------------------------------------------
    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.flushed_offset

    @property
    def dispatched_offset(self) -> int:
        return self.reput.reput_from_offset

    @property
    def mapped_file_size(self) -> int:
        return self.commit_log.file_size

    @property
    def commit_log_fsync_count(self) -> int:
        """fdatasync calls made on commit-log files so far (group commit is visible here)."""
        return self.commit_log.queue.fsync_count

    @property
    def running(self) -> bool:
        return self._running

    # -- truncation (failover) -----------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Cut the commit log at ``offset`` (a record boundary) and every consume-queue unit
        pointing at or past it; returns the bytes cut. Only while nothing appends: a slave
        whose HA client is not connected, or a slave becoming master."""
        end = self.commit_log.max_offset
        if offset >= end:
            return 0
        offset = max(offset, self.commit_log.min_offset)
        self.commit_log.queue.truncate_dirty(offset)
        for cq in self.consume_queues.values():
            cq.truncate_dirty(offset)
        self._last_cq = None
        self._queue_offsets.clear()
        self.reput.reput_from_offset = min(self.reput.reput_from_offset, offset)
        log.warning("commit log cut from %d to %d (%d bytes)", end, offset, end - offset)
        return end - offset

    def cut_partial_record(self) -> int:
        """Cut a record the HA stream left half-written at the end (before this log takes
        appends of its own); returns the bytes cut."""
        self.reput.do_reput()
        return self.truncate_to(self.reput.reput_from_offset)

    def last_record_offset(self) -> int | None:
        """Where the log's last indexed record starts (None for an empty log)."""
        best: int | None = None
        for cq in self.consume_queues.values():
            start = cq.last_unit_offset()
            if start is not None and (best is None or start > best):
                best = start
        return best

    # -- replication hooks ---------------------------------------------------------------------
    def get_commit_log_data(self, offset: int) -> SelectedRegion | None:
        """Bytes of the one file holding ``offset``, from it to that file's readable end."""
        return self.commit_log.select_region(offset)

    def append_to_commit_log(self, offset: int, data: bytes | memoryview) -> bool:
        """Slave: raw bytes at exactly the local max offset.

        The bytes are in the commit log when this returns (what the slave's report acks, as
        in RocketMQ); their consume-queue units are written behind, by ``_dispatch_behind``,
        in slices that let the HA reader run in between: a catch-up is bound by the socket,
        not by indexing. Units are only ever made from bytes already written, so a consumer
        of the slave never gets one pointing past the commit log; it sees records a little
        later than the log holds them.
        """
        if not self._running:
            return False
        if not self.commit_log.append_raw(offset, data):
            return False
        self._new_data.notify()
        if self._dispatch_wanted is not None:
            self._dispatch_wanted.set()
        else:  # not started through start(): index now
            self.catch_up_dispatch()
        return True

    def catch_up_dispatch(self) -> int:
        """Index everything written so far, now; returns the records dispatched."""
        count = self.reput.do_reput()
        if count:
            self._notify()
        return count

    async def _dispatch_behind(self) -> None:
        """Index replicated bytes in slices of DISPATCH_SLICE, yielding after each one.

        The HA reader appends up to a megabyte per turn of the event loop; a slice here is a
        quarter of that, so while the socket has data the reader gets most of the time, and
        while it waits for the socket the records are indexed.
        """
        assert self._dispatch_wanted is not None
        wanted = self._dispatch_wanted
        reput = self.reput
        while True:
            await wanted.wait()
            wanted.clear()
            while reput.behind() > 0:
                before = reput.reput_from_offset
                try:
                    count = reput.do_reput_slice(DISPATCH_SLICE)
                except Exception:  # a bug here must not stop indexing for good
                    log.exception("background dispatch failed at %d", before)
                    break
                if count:
                    self._notify()
                if reput.reput_from_offset == before:
                    break  # a record cut in half: the next append completes it
                await asyncio.sleep(0)

    async def wait_for_new_data(self, offset: int, timeout: float) -> bool:  # noqa: ASYNC109
        """Return once max_phy_offset > ``offset`` (True) or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while self.max_phy_offset <= offset and self._running:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await self._new_data.wait(remaining)
        return self.max_phy_offset > offset

    # -- flushing ------------------------------------------------------------------------------
    async def flush(self) -> int:
        """Sync the commit log and every consume queue now; returns the flushed offset."""
        await self._flush_commit_log()
        await self._flush_consume_queues()
        return self.flushed_offset

    async def _flush_commit_log(self) -> None:
        """fdatasync the commit log; the checkpoint learns the store time now durable.

        Until this run dispatches a record there is no store time (0): the checkpoint keeps
        the one it was loaded with, as RocketMQ does, or the next crash recovery would scan
        the whole log from its first file.
        """
        offset, store_ts = self.reput.reput_from_offset, self.reput.last_store_timestamp
        flushed = await self.commit_log.queue.flush()
        if self.checkpoint is not None and offset <= flushed and store_ts > 0:
            self.checkpoint.physic_msg_timestamp = store_ts

    async def _flush_consume_queues(self) -> None:
        """Sync dirty queues, then record in the checkpoint what is now durable (a store time
        only once this run has one, as for the commit log)."""
        logics_ts = self.reput.last_store_timestamp
        for cq in list(self.consume_queues.values()):
            if cq.queue.unflushed_bytes() > 0:
                await cq.flush()
        if self.checkpoint is not None:
            if logics_ts > 0:
                self.checkpoint.logics_msg_timestamp = logics_ts
            await asyncio.to_thread(self.checkpoint.flush)

    # -- retention -----------------------------------------------------------------------------
    def check_disk(self, directory: Path) -> float:
        """How full (%) the disk holding ``directory`` is (or the consume queues' disk, when
        storePathCommitLog puts the log on another one and that one is fuller, as RocketMQ
        also watches its logics disk); past diskSpaceWarningLevelRatio the store refuses writes
        (:attr:`disk_full`) until retention brings it back below."""
        used = disk_used_ratio(directory)
        logics = self.config.consume_queue_dir
        if _other_file_system(directory, logics):
            logics_used = disk_used_ratio(logics)
            if logics_used > used:
                used, directory = logics_used, logics
        full = used > self.config.diskSpaceWarningLevelRatio
        if full != self.disk_full:
            self.disk_full = full
            if full:
                log.error(
                    "the disk holding %s is %.1f%% full (diskSpaceWarningLevelRatio=%d): writes "
                    "are refused until retention frees space",
                    directory,
                    used,
                    self.config.diskSpaceWarningLevelRatio,
                )
            else:
                log.info("the disk holding %s is %.1f%% full: writes taken again", directory, used)
        return used

    async def clean_expired(self, force: bool = False) -> CleanResult:
        """Delete expired commit-log files now if due (or ``force``); queues follow."""
        cl = self.commit_log
        if not self._running:
            return CleanResult(0, cl.min_offset)
        used = self.check_disk(cl.queue.directory)
        if not force and not should_clean(self.config, used):
            return CleanResult(0, cl.min_offset)
        forced = clean_at_once(self.config, used)
        before = math.inf if forced else expired_before_ms(self.config)
        async with cl.queue.flush_lock:
            limit = min(self.reput.reput_from_offset, cl.flushed_offset)
            count = cl.queue.expired_files(before, limit, FORCED_FILES_PER_PASS if forced else None)
            if count:
                for mf in cl.queue.files[:count]:
                    log.info("retention: deleting %s", mf.path)
                cl.queue.delete_first(count)
        if count:
            min_phy = cl.min_offset
            for cq in self.consume_queues.values():
                async with cq.queue.flush_lock:
                    cq.delete_expired(min_phy)
        return CleanResult(count, cl.min_offset)


def _other_file_system(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev != os.stat(b).st_dev
    except OSError:
        return False


DISK_CHECK_INTERVAL = 0.1
"""Seconds between two looks at the disk from the put path: a fast producer must not fill the
last tenth of a disk between two retention passes (cleanResourceInterval)."""

DISPATCH_SLICE = 256 << 10
"""Bytes a slave's background dispatch indexes before letting the HA reader run again."""
