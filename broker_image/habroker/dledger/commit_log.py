"""DLedgerCommitLog: the broker's commit log when its records live in DLedger entries.

RocketMQ's DLedgerCommitLog layout, so a Java DLedger broker can read the files: every
message record is the body of one DLedger entry, its PHYSICALOFFSET field is the entry's
position + 48 (BODY_OFFSET), and consume-queue units point there.  Readers see only what the
group has committed (reads stop at ``committedPos``), so a consumer never reads a message a
new leader could still cut away.  Dispatch to the consume queues walks committed entries by
index; it is the same on leader and followers, which is why followers need no HA stream.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence

from habroker.dledger.entry import BODY_OFFSET, CURRENT_MAGIC, HEADER_FORMAT
from habroker.dledger.mmap_file_store import BLANK_MAGIC_CODE as BLANK
from habroker.dledger.mmap_file_store import MIN_BLANK_LEN, DLedgerMmapFileStore
from habroker.message import DELAY_LEVELS_MS, MAGIC_V1, DispatchTuple, body_crc32
from habroker.store import native
from habroker.store.commit_log import CommitLog
from habroker.store.dispatcher import ReputMessageService, UnitsDispatch
from habroker.store.errors import StoreNotWritable
from habroker.store.native import parse_record
from habroker.store.values import BatchEntry, FilePosition, SelectedRegion

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
_ENTRY_HEAD = struct.Struct(">iiqqq")  # magic, size, index, term, pos
_I16 = struct.Struct(">h")
# an entry's header and its record's header (spec §1.1: TOTALSIZE .. PHYSICALOFFSET, the block
# a batch shares, BODYLENGTH) packed at once; keyed by the shared block's length
_ENTRY_RECORD_HEADERS = {n: struct.Struct(HEADER_FORMAT + f"iiiiiqq{n}si") for n in (48, 60, 72)}


def encode_entries_py(
    topic_tail: bytes,
    queue_id: int,
    entries: Sequence[BatchEntry],
    record_sizes: Sequence[int],
    first_queue_offset: int,
    shared: bytes,
    term: int,
    first_index: int,
    positions: Sequence[int],
) -> list[bytes | memoryview]:
    """A batch's DLedger entries, one message record each, as RocketMQ's DLedgerCommitLog
    writes them: the entry header (no CRCs, as DLedger 0.3.1.2), then the record whose
    PHYSICALOFFSET is the entry's position + 48 (what RocketMQ's append hook patches in),
    encoded in one pass with no object per entry; three buffers each (headers, body, topic and
    properties).  The compiled codec's ``encode_entries`` (one buffer, a view per entry)
    replaces this where it was built."""
    pack = _ENTRY_RECORD_HEADERS[len(shared)].pack
    i16 = _I16.pack
    crc32 = body_crc32
    parts: list[bytes | memoryview] = []
    append = parts.append
    queue_offset = first_queue_offset
    index = first_index
    bare_tail = topic_tail + b"\x00\x00"  # topic + zero properties length
    for entry, size, pos in zip(entries, record_sizes, positions, strict=True):
        body = entry.body
        props = entry.properties
        append(
            pack(
                CURRENT_MAGIC, BODY_OFFSET + size, index, term, pos, 0, 0, 0, size,
                size, MAGIC_V1, crc32(body) & 0x7FFFFFFF, queue_id, entry.flag, queue_offset,
                pos + BODY_OFFSET, shared, len(body),
            )
        )  # fmt: skip
        append(body)
        append(topic_tail + i16(len(props)) + props if props else bare_tail)
        queue_offset += 1
        index += 1
    return parts


EntryEncoding = Callable[
    [bytes, int, Sequence[BatchEntry], Sequence[int], int, bytes, int, int, Sequence[int]],
    list[bytes | memoryview],
]
encode_entries: EntryEncoding = (
    native.codec.encode_entries if native.codec is not None else encode_entries_py
)
#: buffers per entry that :func:`encode_entries` gives
PARTS_PER_ENTRY = 1 if native.codec is not None else 3


class DLedgerCommitLog(CommitLog):
    """The read side over the DLedger data files; writes go through the DLedger server."""

    def __init__(self, store: DLedgerMmapFileStore, file_size: int) -> None:
        super().__init__(store.data_dir, file_size)  # its own file queue stays unloaded
        self.dledger_store = store

    @property
    def min_offset(self) -> int:
        store = self.dledger_store
        if store.ledger_begin_index < 0:
            return 0
        first = store.get(store.ledger_begin_index)
        return 0 if first is None else first.pos

    @property
    def max_offset(self) -> int:
        """The end of the committed entries: what readers and dispatch may see."""
        return self.dledger_store.committed_pos

    @property
    def flushed_offset(self) -> int:
        return self.dledger_store.flushed_pos

    def read(self, offset: int, size: int) -> memoryview | None:
        if size <= 0 or offset + size > self.dledger_store.committed_pos:
            return None
        data = self.dledger_store.read_data(offset, size)
        if data is None or len(data) < size:
            return None
        return memoryview(data)

    def read_located(self, offset: int, size: int) -> tuple[memoryview, FilePosition | None] | None:
        view = self.read(offset, size)
        # records lie between entry headers here: each is its own run, not worth a sendfile
        return None if view is None else (view, None)

    def select_region(self, offset: int) -> SelectedRegion | None:
        return None  # classic HA does not run in DLedger mode

    def put_batch(
        self,
        topic_tail: bytes,
        queue_id: int,
        entries: Sequence[BatchEntry],
        first_queue_offset: int,
        shared: bytes,
        record_base: int,
        total: int,
    ) -> int:
        raise StoreNotWritable("a DLedger commit log is written through the DLedger leader")

    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> bool:
        return False

    def close(self) -> None:
        pass  # the DLedger server owns the files


class DLedgerReput(ReputMessageService):
    """Dispatch of committed entries, in index order."""

    def __init__(
        self,
        commit_log: DLedgerCommitLog,
        dispatch: Callable[[DispatchTuple], None],
        delay_levels: Sequence[int] = DELAY_LEVELS_MS,
        dispatch_units: UnitsDispatch | None = None,
    ) -> None:
        super().__init__(commit_log, dispatch, lambda: False, delay_levels, dispatch_units)
        self.store = commit_log.dledger_store
        self.dispatched_index = -1
        #: units the leader made from its own puts, dispatched at commit without a parse:
        #: (index, term, entry position, unit), in index order
        self.planned: deque[tuple[int, int, int, DispatchTuple]] = deque()

    def plan(
        self, first_index: int, term: int, positions: Sequence[int], units: Sequence[DispatchTuple]
    ) -> None:
        """Units of entries this leader just appended, for :meth:`do_reput` to take when they
        commit. An entry is the one planned only if its index, term and position all match
        (same index and term: the same entry, DLedger's log-matching rule); anything else, a
        cut tail rewritten under a new term, is parsed from the files as before."""
        planned = self.planned
        if planned and planned[-1][0] >= first_index:
            planned.clear()  # appended again below what was planned: a new leadership
        planned.extend(
            (first_index + i, term, pos, unit)
            for i, (pos, unit) in enumerate(zip(positions, units, strict=True))
        )

    def _planned(self, index: int, term: int, pos: int) -> DispatchTuple | None:
        planned = self.planned
        while planned and planned[0][0] < index:
            planned.popleft()
        if planned and planned[0][0] == index:
            _index, at_term, at_pos, unit = planned.popleft()
            if at_term == term and at_pos == pos:
                return unit
        return None

    def start_after(self, covered_phys: int) -> None:
        """Resume after the last entry the consume queues already index (``covered_phys`` is
        the end of their last unit, -1 for none)."""
        store = self.store
        begin, end = store.ledger_begin_index, store.ledger_end_index
        if covered_phys < 0 or end < 0:
            self.dispatched_index = begin - 1 if begin >= 0 else -1
        else:
            # entries are in position order: find the first whose record ends past the cover
            indexes = range(max(begin, 0), end + 1)
            at = bisect_left(indexes, covered_phys, key=self._record_end)
            self.dispatched_index = max(begin, 0) + at - 1
        entry = store.get(self.dispatched_index) if self.dispatched_index >= 0 else None
        self.reput_from_offset = (
            entry.pos + entry.size if entry is not None else self.commit_log.min_offset
        )

    def _record_end(self, index: int) -> int:
        entry = self.store.get(index)
        return -1 if entry is None else entry.pos + entry.size

    def behind(self) -> int:
        return max(0, self.store.committed_pos - self.reput_from_offset)

    @property
    def caught_up(self) -> bool:
        return self.dispatched_index >= self.store.committed_index

    def do_reput(self) -> int:
        """Dispatch committed entries in index order, walking the data files from where the
        last one ended (as the classic dispatcher walks its commit log: no per-entry index
        lookup, no copy); an entry not found where the walk expects it is looked up by index."""
        store = self.store
        data = store.data
        dispatch = self.dispatch
        delay_levels = self.delay_levels
        count = 0
        target = store.committed_index
        while self.dispatched_index < target:
            index = self.dispatched_index + 1
            if index < store.ledger_begin_index:
                self._skip_to_begin()  # retention or a rebuild removed entries not dispatched
                continue
            pos = self.reput_from_offset
            mf = data.find(pos)
            if mf is not None:
                view = mf.view
                rel = pos - mf.file_from_offset
                wrote = mf.wrote_position
                if rel + MIN_BLANK_LEN <= wrote and _I32.unpack_from(view, rel)[0] == BLANK:
                    self.reput_from_offset = mf.file_end_offset  # on to the next file
                    continue
                if rel + BODY_OFFSET <= wrote:
                    if self.dispatch_units is not None and not self.planned:
                        walked = self._walk_units(view, rel, wrote, pos, index, target)
                    else:
                        walked = self._walk(view, rel, wrote, pos, index, target, dispatch)
                    if walked:
                        count += walked
                        continue
            entry = store.get(index)  # the walk lost its place (a cut log, a fresh start)
            if entry is None:
                log.error("committed entry %d cannot be read; dispatch waits", index)
                return count
            self._dispatched(
                index,
                entry.pos,
                entry.size,
                parse_record(entry.body, 0, False, delay_levels),
                dispatch,
            )
            count += 1
        return count

    def _walk(
        self,
        view: memoryview,
        rel: int,
        wrote: int,
        pos: int,
        index: int,
        target: int,
        dispatch: Callable[[DispatchTuple], None],
    ) -> int:
        """Dispatch the entries that lie back to back in one data file from ``rel`` (the one at
        ``pos`` is ``index``), up to ``target``; how many.  Stops at anything else (a BLANK, an
        entry not where expected, the written end) for :meth:`do_reput` to sort out."""
        unpack = _ENTRY_HEAD.unpack_from
        delay_levels = self.delay_levels
        planned = self.planned
        count = 0
        last_ts = None
        try:
            while index <= target and rel + BODY_OFFSET <= wrote:
                _m, size, at_index, term, at_pos = unpack(view, rel)
                if at_index != index or at_pos != pos or rel + size > wrote:
                    break
                unit = self._planned(index, term, pos) if planned else None
                parsed = (
                    unit
                    if unit is not None
                    else parse_record(view[: rel + size], rel + BODY_OFFSET, False, delay_levels)
                )
                if isinstance(parsed, tuple):
                    dispatch(parsed)
                    last_ts = parsed[5]
                else:
                    log.error(
                        "entry %d at %d holds no message record (%d); skipped", index, pos, parsed
                    )
                count += 1
                index += 1
                pos += size
                rel += size
        finally:
            if count:
                self.dispatched_index = index - 1
                self.reput_from_offset = pos
                if last_ts is not None:
                    self.last_store_timestamp = last_ts
        return count

    def _walk_units(
        self, view: memoryview, rel: int, wrote: int, pos: int, index: int, target: int
    ) -> int:
        """:meth:`_walk` compiled: the entries become runs of consume-queue units, each run
        written to its queue at once.  A failed write leaves the walk where it was: the next
        pass writes the runs again, and a queue drops the units it already has."""
        assert native.walk_entries is not None and self.dispatch_units is not None
        count, walked, last_ts, runs = native.walk_entries(
            view, rel, wrote, pos, index, target, self.delay_levels
        )
        dispatch_units = self.dispatch_units
        for topic, queue_id, first_offset, units, end in runs:
            dispatch_units(topic, queue_id, first_offset, units, end)
        if last_ts is not None:  # walked at least one entry
            self.dispatched_index = index + count - 1
            self.reput_from_offset = pos + walked
            self.last_store_timestamp = last_ts
        return count

    def _skip_to_begin(self) -> None:
        store = self.store
        first = store.get(store.ledger_begin_index)
        if first is None:
            raise RuntimeError(f"the log's first entry {store.ledger_begin_index} is unreadable")
        log.warning(
            "entries %d-%d are gone from this log (retention or a rebuild): dispatch goes on "
            "from entry %d; their messages cannot be read here",
            self.dispatched_index + 1,
            store.ledger_begin_index - 1,
            store.ledger_begin_index,
        )
        self.dispatched_index = store.ledger_begin_index - 1
        self.reput_from_offset = first.pos

    def _dispatched(
        self,
        index: int,
        pos: int,
        size: int,
        parsed: DispatchTuple | int,
        dispatch: Callable[[DispatchTuple], None],
    ) -> None:
        if isinstance(parsed, tuple):
            dispatch(parsed)
            self.last_store_timestamp = parsed[5]
        else:
            log.error("entry %d at %d holds no message record (%d); skipped", index, pos, parsed)
        self.dispatched_index = index
        self.reput_from_offset = pos + size


def record_offset(entry_pos: int) -> int:
    """Where an entry's message record starts: the commit-log offset RocketMQ reports."""
    return entry_pos + BODY_OFFSET
