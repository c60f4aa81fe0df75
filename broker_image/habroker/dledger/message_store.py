"""DLedgerMessageStore: the MessageStore of a DLedger peer.

Consume queues, pulls, lookups and retention of queues are the classic store's; what changes
is where records go and when they become visible.  A put on the leader appends one DLedger
entry per message (as RocketMQ 4.9's DLedgerCommitLog does) and returns the futures the
broker awaits for the quorum; consume-queue units are written when entries are committed, on
every peer alike.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from habroker.config import BrokerConfig
from habroker.dledger.commit_log import (
    PARTS_PER_ENTRY,
    DLedgerCommitLog,
    DLedgerReput,
    encode_entries,
    record_offset,
)
from habroker.dledger.dledger_server import DLedgerServer, DLedgerSettings
from habroker.dledger.entry import BODY_OFFSET, DLedgerEntry
from habroker.dledger.entry_pusher import PusherConfig
from habroker.dledger.leader_elector import ElectionTimings
from habroker.dledger.protocol import Body
from habroker.message import POS_PHYSICAL_OFFSET, DispatchTuple
from habroker.store.checkpoint import StoreCheckpoint
from habroker.store.cleaner import (
    FORCED_FILES_PER_PASS,
    clean_at_once,
    expired_before_ms,
    should_clean,
)
from habroker.store.errors import StoreError
from habroker.store.message_store import MessageStore, PutPlan
from habroker.store.native import unit_tags_code
from habroker.store.values import BatchEntry, CleanResult, PutResult, PutStatus

log = logging.getLogger(__name__)

_I64 = struct.Struct(">q")


@dataclass
class DLedgerPut:
    """A put on the leader: the result to answer with and the quorum acks to wait for."""

    result: PutResult
    acks: list[asyncio.Future[Body]]


def settings_from(config: BrokerConfig) -> DLedgerSettings:
    from habroker.config import FlushDiskType

    return DLedgerSettings(
        group=config.dledger_group,
        self_id=config.dLegerSelfId,
        peers=config.dLegerPeers,
        store_root=config.store_root,
        bind_host=config.bindAddress,
        data_file_size=config.mappedFileSizeCommitLog,
        timings=ElectionTimings(
            heartbeat_interval_ms=config.dLegerHeartBeatIntervalMs,
            max_heartbeat_leak=config.dLegerMaxHeartBeatLeak,
            min_vote_interval_ms=config.dLegerMinVoteIntervalMs,
            max_vote_interval_ms=config.dLegerMaxVoteIntervalMs,
        ),
        pusher=PusherConfig(
            max_wait_ack_ms=config.dLegerMaxWaitAckTimeMs,
            sync_flush=config.flushDiskType is FlushDiskType.SYNC_FLUSH,
            raw_push=config.dLegerRawPush,
        ),
        preferred_leader_ids=config.preferred_leader_ids,
        flush_interval_ms=config.flushIntervalCommitLog,
    )


def _patch_physical_offset(entry: DLedgerEntry, encoded: bytearray) -> None:
    """RocketMQ's append hook: the record's PHYSICALOFFSET is where its entry puts it."""
    _I64.pack_into(encoded, BODY_OFFSET + POS_PHYSICAL_OFFSET, record_offset(entry.pos))


class DLedgerMessageStore(MessageStore):
    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self.dledger = DLedgerServer(settings_from(config), self._committed)
        self.commit_log = DLedgerCommitLog(self.dledger.store, config.mappedFileSizeCommitLog)
        self.reput = DLedgerReput(
            self.commit_log, self._dispatch, config.delay_levels_ms, self._dispatch_units
        )
        self.dreput = self.reput
        self._queues_cleaned_to = 0
        self._begin_seen = -1
        self._cleaning: set[asyncio.Future[None]] = set()

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._running:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            abort = self.root / "abort"
            self.last_exit_ok = not abort.exists()
            await self.dledger.start()
            self._load_consume_queues()
            self._recover_queues()
            abort.write_text(str(os.getpid()))
        except BaseException:
            await self.dledger.stop()
            self._close_files()
            self._release_lock()
            raise
        self._running = True
        self._start_services()

    def _start_services(self) -> None:
        self._services += self._queue_and_retention_services()  # DLedger flushes its own log
        for service in self._services:
            service.start()

    async def shutdown(self) -> None:
        if not self._running:
            return
        await super().shutdown()
        await self.dledger.stop()

    def _recover_queues(self) -> None:
        """Queues cut to the entries the log still has, then dispatch what they miss."""
        end = self.dledger.store.data_end_pos
        for cq in self.consume_queues.values():
            cq.recover()
            cq.truncate_dirty(end)
        covered = max((cq.max_physic_offset for cq in self.consume_queues.values()), default=-1)
        self.dreput.start_after(covered)
        dispatched = self.dreput.do_reput()
        if dispatched:
            log.info("recovery dispatched %d committed entries", dispatched)
        self._queue_offsets.clear()

    # -- commit ------------------------------------------------------------------------------------
    def _committed(self, index: int) -> None:
        if self.dreput.do_reput():
            self._notify()
        begin = self.dledger.store.ledger_begin_index
        if begin != self._begin_seen:  # a rebuild at the leader's first entry: queues follow now
            self._begin_seen = begin
            if self._running and begin > 0:
                task = asyncio.ensure_future(self._clean_queues())
                self._cleaning.add(task)
                task.add_done_callback(self._cleaning.discard)

    @property
    def dispatched_all(self) -> bool:
        """Every entry the log holds is committed and indexed: a new leader may take writes
        (RocketMQ's DLedgerRoleChangeHandler waits for the same)."""
        store = self.dledger.store
        return store.committed_index == store.ledger_end_index and self.dreput.caught_up

    def reset_queue_offsets(self) -> None:
        """A new leader assigns queue offsets from its consume queues, not a predecessor's."""
        self._queue_offsets.clear()

    # -- writes ------------------------------------------------------------------------------------
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
        return self.put_dledger(
            topic,
            queue_id,
            entries,
            born_host=born_host,
            born_timestamp=born_timestamp,
            sys_flag=sys_flag,
            reconsume_times=reconsume_times,
        ).result

    def put_dledger(
        self,
        topic: str,
        queue_id: int,
        entries: Sequence[BatchEntry],
        *,
        born_host: tuple[str, int],
        born_timestamp: int | None = None,
        sys_flag: int = 0,
        reconsume_times: int = 0,
    ) -> DLedgerPut:
        """One entry per message; the acks complete when a quorum holds each entry."""
        plan = self.plan_put(
            topic,
            queue_id,
            entries,
            born_host=born_host,
            born_timestamp=born_timestamp,
            sys_flag=sys_flag,
            reconsume_times=reconsume_times,
        )
        # one entry per record, the records encoded with their entries' headers in one pass
        # once the positions are known (PHYSICALOFFSET = position + 48: RocketMQ's append hook)
        sizes = plan.sizes if plan.sizes is not None else [plan.total]
        terms: list[int] = []

        def encode(term: int, first: int, where: Sequence[int]) -> list[bytes | memoryview]:
            terms.append(term)
            return encode_entries(
                plan.topic_tail,
                queue_id,
                entries,
                sizes,
                plan.queue_offset,
                plan.shared,
                term,
                first,
                where,
            )

        first_index, positions, ack = self.dledger.append_encoded(
            [BODY_OFFSET + size for size in sizes], encode, PARTS_PER_ENTRY
        )
        offsets = [pos + BODY_OFFSET for pos in positions]  # record_offset, without a call each
        if terms and self.dreput.dispatch_units is None:
            # pure Python: dispatched at commit from these, not parsed back out of the files
            # (the compiled walk parses a committed run faster than the per-unit dispatch)
            units = self._units(topic, queue_id, entries, sizes, offsets, plan)
            self.dreput.plan(first_index, terms[0], positions, units)
        acks = [ack]
        queue_offset = plan.queue_offset + len(offsets)
        self._queue_offsets[(topic, queue_id)] = queue_offset
        first = offsets[0]
        result = PutResult(
            PutStatus.PUT_OK,
            first,
            plan.total,
            plan.queue_offset,
            len(offsets),
            (plan.store_block + _I64.pack(first)).hex().upper(),
            plan.store_ts,
            offsets if len(entries) > 1 else None,
        )
        return DLedgerPut(result, acks)

    def _units(
        self,
        topic: str,
        queue_id: int,
        entries: Sequence[BatchEntry],
        sizes: Sequence[int],
        offsets: Sequence[int],
        plan: PutPlan,
    ) -> list[DispatchTuple]:
        """The dispatcher's tuples for a put, from what the put knows (as the classic master's
        ``_dispatch_put``; tests/habroker/test_dledger_dispatch_put.py holds them beside the
        parsed ones)."""
        levels = self.reput.delay_levels
        store_ts = plan.store_ts
        sys_flag = plan.sys_flag
        first = plan.queue_offset
        return [
            (
                topic,
                queue_id,
                phys,
                size,
                unit_tags_code(topic, entry.properties, store_ts, levels)
                if entry.properties
                else 0,
                store_ts,
                first + i,
                sys_flag,
            )
            for i, (entry, size, phys) in enumerate(zip(entries, sizes, offsets, strict=True))
        ]

    # -- what classic HA and retention would do ------------------------------------------------
    async def _flush_commit_log(self) -> None:
        await self.dledger.flush()

    @property
    def commit_log_fsync_count(self) -> int:
        return 0

    async def clean_expired(self, force: bool = False) -> CleanResult:
        """Retention as RocketMQ's DLedgerCommitLog sets it up: data files last modified more
        than fileReservedTime + 1 hours ago go, oldest first and never the last, when the
        deleteWhen hour comes, the disk is fuller than diskMaxUsedSpaceRatio, or ``force``
        (past diskSpaceCleanForciblyRatio, whatever their age; past diskSpaceWarningLevelRatio
        writes are refused, DLedger's DISK_FULL); only what is committed, flushed and indexed. Each peer deletes its own files; a peer
        that falls behind what its leader kept starts its log again at the leader's first
        entry. The consume queues then drop units of deleted messages."""
        store = self.dledger.store
        count = 0
        used = self.check_disk(store.data_dir) if self._running else 0.0
        if self._running and (force or should_clean(self.config, used)):
            forced = clean_at_once(self.config, used)
            before = math.inf if forced else expired_before_ms(self.config) - 3_600_000
            limit = min(store.committed_pos, store.flushed_pos, self.dreput.reput_from_offset)
            count = await self.dledger.delete_expired(
                before, limit, FORCED_FILES_PER_PASS if forced else None
            )
            if count:
                log.info(
                    "retention deleted %d data files; the log begins at entry %d",
                    count,
                    store.ledger_begin_index,
                )
        await self._clean_queues()
        return CleanResult(count, self.commit_log.min_offset)

    async def _clean_queues(self) -> None:
        """Consume-queue files that only point below the log's first message are deleted, and
        each queue's min offset moves to its first message still there (after retention, or
        after a rebuild at the leader's first entry)."""
        min_phy = self.commit_log.min_offset
        if min_phy <= self._queues_cleaned_to:
            return
        for cq in list(self.consume_queues.values()):
            async with cq.queue.flush_lock:
                cq.delete_expired(min_phy)
        self._queues_cleaned_to = min_phy

    def truncate_to(self, offset: int) -> int:
        raise StoreError("a DLedger log is truncated by its leader, never by hand")

    def append_to_commit_log(self, offset: int, data: bytes | memoryview) -> bool:
        return False
