"""ConsumeQueue: per (topic, queueId), an array of 20-byte units indexing the commit log.

Unit ``i`` sits at byte ``i * 20`` of the logical queue: int64 commit-log offset, int32 record
size, int64 tagsCode (spec §2.3).  Units are written only by the dispatcher, on master and
slave alike, from the records' own QUEUEOFFSET fields.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Collection
from pathlib import Path

from habroker.store.errors import DamagedFile
from habroker.store.mapped_file import MappedFile
from habroker.store.mapped_file_queue import MappedFileQueue, is_store_file_name

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE = 20
UNIT = struct.Struct(">qiq")
# filler for slots before a queue's first real unit (a queue that starts past index 0)
BLANK_UNIT_SIZE = 0x7FFFFFFF
BLANK_UNIT = UNIT.pack(0, BLANK_UNIT_SIZE, 0)


#: a pull's walk between consume-queue files: (next index, last unit's commit-log offset,
#: messages and bytes in closed runs, the open run's start, end, file end and message count)
WalkState = tuple[int, int, int, int, int, int, int, int]
#: a run: records of one queue back to back in one commit-log file, (start, end, messages)
Run = tuple[int, int, int]


def walk_units_py(
    units: memoryview,
    state: WalkState,
    examine_limit: int,
    max_msgs: int,
    max_bytes: int,
    min_phy: int,
    file_size: int,
    tags_codes: Collection[int] | None,
    runs: list[Run],
) -> tuple[bool, WalkState]:
    """getMessage's walk over ``units`` (those of the queue from index ``state[0]``): the
    wanted records gathered into runs, each closed run appended to ``runs``; (whether the pull
    is full, the state to go on from in the next file). Units of retention-deleted records
    and BLANK fillers are skipped; ``tags_codes`` filters on tagsCode. A run never crosses a
    commit-log file end. The compiled codec's ``walk_units`` does the same (the pull's hot
    loop: a 1024-message pull walks 1024 units)."""
    index, max_phy, count, total, run_start, run_end, run_file_end, run_count = state
    full = False
    for phys, size, tags in UNIT.iter_unpack(units):
        if index >= examine_limit:
            full = True
            break
        max_phy = phys
        taken = count + run_count
        if taken and (taken >= max_msgs or total + (run_end - run_start) + size > max_bytes):
            full = True
            break
        index += 1
        if size == BLANK_UNIT_SIZE or phys < min_phy:
            continue
        if tags_codes is not None and tags not in tags_codes:
            continue
        if phys == run_end and phys + size <= run_file_end:
            run_end += size
            run_count += 1
            continue
        if run_count:
            runs.append((run_start, run_end, run_count))
            count += run_count
            total += run_end - run_start
        run_start, run_end, run_count = phys, phys + size, 1
        run_file_end = phys - phys % file_size + file_size
    return full, (index, max_phy, count, total, run_start, run_end, run_file_end, run_count)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: Path, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue = MappedFileQueue(directory, file_size, pad_short_last=True)
        self.max_physic_offset = -1  # end of the last record indexed (dedups re-dispatch)
        self.min_logic_offset = 0  # bytes; advanced by retention
        # load() found a file cut short or damaged: recovery re-dispatches what it misses
        self.needs_rebuild = False

    # -- offsets (in units) --------------------------------------------------------------------
    @property
    def min_offset_in_queue(self) -> int:
        return max(self.min_logic_offset, self.queue.min_offset) // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        return self.queue.max_offset // CQ_STORE_UNIT_SIZE

    # -- load and recovery ---------------------------------------------------------------------
    def load(self) -> None:
        """Map the queue's files. A last file cut short is padded (recovery cuts it); any other
        damaged file makes the whole queue be rebuilt from the commit log, which holds every
        unit's data (each record carries its queue offset), as RocketMQ rebuilds queues."""
        try:
            self.queue.load()
        except DamagedFile as exc:
            log.warning(
                "%s; rebuilding consume queue %s-%d from the commit log",
                exc,
                self.topic,
                self.queue_id,
            )
            directory, size = self.queue.directory, self.queue.file_size
            self.queue.close()
            for path in directory.iterdir():
                if is_store_file_name(path.name):
                    path.unlink()
            self.queue = MappedFileQueue(directory, size, pad_short_last=True)
            self.needs_rebuild = True
            return
        self.needs_rebuild = self.queue.padded is not None

    def recover(self) -> None:
        """Find the last valid unit (offset >= 0, size > 0), scanning from the third-to-last
        file like RocketMQ; everything after it is cut."""
        files = self.queue.files
        if not files:
            return
        end = files[0].file_from_offset
        for mf in files[max(0, len(files) - 3) :]:
            pos = _valid_prefix(mf)
            end = mf.file_from_offset + pos
            if pos < mf.file_size:
                break
        self.queue.truncate_dirty(end)
        self.queue.flushed_where = end
        self._reload_max_physic()
        self.min_logic_offset = self.queue.min_offset

    def _reload_max_physic(self) -> None:
        self.max_physic_offset = -1
        for mf in reversed(self.queue.files):
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= 0:
                offset, size, _ = UNIT.unpack_from(mf.mm, pos)
                if size != BLANK_UNIT_SIZE:
                    self.max_physic_offset = offset + size
                    return
                pos -= CQ_STORE_UNIT_SIZE

    def last_unit_offset(self) -> int | None:
        """Commit-log offset of the last unit's record (None if the queue is empty)."""
        for mf in reversed(self.queue.files):
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= 0:
                offset, size, _ = UNIT.unpack_from(mf.mm, pos)
                if size != BLANK_UNIT_SIZE:
                    return int(offset)
                pos -= CQ_STORE_UNIT_SIZE
        return None

    def truncate_dirty(self, phy_end: int) -> None:
        """Remove units whose record starts at or past ``phy_end`` (the log's valid end)."""
        files = self.queue.files
        cut = None
        for mf in reversed(files):
            pos = 0
            found = None
            while pos < mf.wrote_position:
                offset, size, _ = UNIT.unpack_from(mf.mm, pos)
                if size != BLANK_UNIT_SIZE and offset >= phy_end:
                    found = pos
                    break
                pos += CQ_STORE_UNIT_SIZE
            if found is None:
                break
            cut = mf.file_from_offset + found
            if found > 0:
                break
        if cut is not None:
            self.queue.truncate_dirty(cut)
            self._reload_max_physic()

    # -- writing (dispatcher) ------------------------------------------------------------------
    def put_unit(self, offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Write the unit for one record at index ``queue_offset``; False if it is a duplicate."""
        if offset + size <= self.max_physic_offset:
            return False
        files = self.queue.files
        if files:
            mf = files[-1]
            pos = mf.wrote_position
            if pos < mf.file_size and mf.file_from_offset + pos == queue_offset * 20:
                UNIT.pack_into(mf.mm, pos, offset, size, tags_code)
                mf.wrote_position = pos + CQ_STORE_UNIT_SIZE
                self.max_physic_offset = offset + size
                return True
        return self._put_unit_slow(offset, size, tags_code, queue_offset)

    def put_units(self, units: bytes, queue_offset: int, end: int) -> None:
        """Write units for consecutive queue offsets from ``queue_offset``, their records in
        commit-log order ending at ``end``: one copy when they follow this queue's last unit in
        its last file; otherwise unit by unit, as :meth:`put_unit` (duplicates dropped)."""
        files = self.queue.files
        n = len(units)
        if files and n:
            mf = files[-1]
            pos = mf.wrote_position
            phys, size, _tags = UNIT.unpack_from(units, 0)
            if (
                pos + n <= mf.file_size
                and mf.file_from_offset + pos == queue_offset * CQ_STORE_UNIT_SIZE
                and phys + size > self.max_physic_offset
            ):
                mf.mm[pos : pos + n] = units
                mf.wrote_position = pos + n
                self.max_physic_offset = end
                return
        for i, (phys, size, tags) in enumerate(UNIT.iter_unpack(units)):
            self.put_unit(phys, size, tags, queue_offset + i)

    def _put_unit_slow(self, offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """First unit of a queue, a new file, or a gap or overlap in queue offsets."""
        expect = queue_offset * CQ_STORE_UNIT_SIZE
        current = self.queue.max_offset
        created = not self.queue.files
        if created:
            current = self.queue.last_writable(expect).file_from_offset
            self.min_logic_offset = expect
        if expect < current:
            log.warning(
                "%s-%d: unit for queue offset %d already exists (max %d); record at %d ignored",
                self.topic,
                self.queue_id,
                queue_offset,
                current // CQ_STORE_UNIT_SIZE,
                offset,
            )
            return False
        if expect > current:
            if not created:
                log.warning(
                    "%s-%d: gap before queue offset %d (max %d): padding with blank units",
                    self.topic,
                    self.queue_id,
                    queue_offset,
                    current // CQ_STORE_UNIT_SIZE,
                )
            self._pad_to(expect)
        mf = self.queue.last_writable()
        UNIT.pack_into(mf.mm, mf.wrote_position, offset, size, tags_code)
        mf.wrote_position += CQ_STORE_UNIT_SIZE
        self.max_physic_offset = offset + size
        return True

    def _pad_to(self, expect: int) -> None:
        while self.queue.max_offset < expect:
            mf = self.queue.last_writable()
            n = min(mf.file_size - mf.wrote_position, expect - self.queue.max_offset)
            n -= n % CQ_STORE_UNIT_SIZE
            mf.mm[mf.wrote_position : mf.wrote_position + n] = BLANK_UNIT * (
                n // CQ_STORE_UNIT_SIZE
            )
            mf.wrote_position += n

    # -- reading -------------------------------------------------------------------------------
    def units_from(self, index: int) -> tuple[memoryview, int] | None:
        """A view of the written units from ``index`` to the end of that unit's file, and the
        file's first unit index; None if no file holds the index."""
        byte = index * CQ_STORE_UNIT_SIZE
        mf = self.queue.find(byte)
        if mf is None:
            return None
        pos = byte - mf.file_from_offset
        if pos >= mf.wrote_position:
            return None
        return mf.view[pos : mf.wrote_position], index

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        found = self.units_from(index)
        if found is None:
            return None
        offset, size, tags = UNIT.unpack_from(found[0], 0)
        return offset, size, tags

    # -- retention -----------------------------------------------------------------------------
    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete leading files whose units all point below the commit log's new minimum."""
        files = self.queue.files
        count = 0
        for mf in files[:-1]:
            if mf.wrote_position < CQ_STORE_UNIT_SIZE:
                break
            offset, size, _ = UNIT.unpack_from(mf.mm, mf.wrote_position - CQ_STORE_UNIT_SIZE)
            if size != BLANK_UNIT_SIZE and offset >= min_phy_offset:
                break
            count += 1
        if count:
            self.queue.delete_first(count)
        self.correct_min_offset(min_phy_offset)
        return count

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """min offset = the first unit whose record still exists (starts >= min_phy_offset)."""
        for mf in self.queue.files:
            last_pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            if last_pos < 0:
                continue
            offset, size, _ = UNIT.unpack_from(mf.mm, last_pos)
            if size == BLANK_UNIT_SIZE or offset < min_phy_offset:
                continue
            pos = 0
            while pos <= last_pos:
                offset, size, _ = UNIT.unpack_from(mf.mm, pos)
                if size != BLANK_UNIT_SIZE and offset >= min_phy_offset:
                    self.min_logic_offset = mf.file_from_offset + pos
                    return
                pos += CQ_STORE_UNIT_SIZE
        self.min_logic_offset = self.queue.max_offset

    async def flush(self) -> int:
        return await self.queue.flush()

    def close(self) -> None:
        self.queue.close()


_ZERO_UNIT = bytes(CQ_STORE_UNIT_SIZE)


def _valid_prefix(mf: MappedFile) -> int:
    """Bytes of ``mf`` holding valid units (offset >= 0, size > 0), counted from its start.

    Unwritten space is zero, so the end is the first all-zero unit; finding it with
    ``mmap.find`` and checking the sign bytes with strided slices keeps startup fast for
    full 6 MB files.  Anything unexpected falls back to a unit-by-unit scan.
    """
    mm = mf.mm
    end = mf.file_size
    pos = 0
    while True:
        i = mm.find(_ZERO_UNIT, pos)
        if i < 0:
            break
        aligned = -(-i // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
        if mm[aligned : aligned + CQ_STORE_UNIT_SIZE] == _ZERO_UNIT:
            end = aligned
            break
        pos = i + 1
    if end == 0:
        return 0
    if max(mm[0:end:CQ_STORE_UNIT_SIZE]) < 0x80 and max(mm[8:end:CQ_STORE_UNIT_SIZE]) < 0x80:
        # sizes are positive unless all four bytes are zero: check units whose low byte is 0
        low = mm[11:end:CQ_STORE_UNIT_SIZE]
        i = low.find(0)
        while i >= 0:
            p = i * CQ_STORE_UNIT_SIZE
            if mm[p + 8 : p + 12] == b"\0\0\0\0":
                return p
            i = low.find(0, i + 1)
        return end
    return _valid_prefix_slow(mf)


def _valid_prefix_slow(mf: MappedFile) -> int:
    pos = 0
    for offset, size, _ in UNIT.iter_unpack(mf.mm):
        if offset < 0 or size <= 0:
            break
        pos += CQ_STORE_UNIT_SIZE
    return pos
