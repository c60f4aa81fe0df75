"""CommitLog: every message of every topic, back to back, in fixed-size mapped files.

The master appends whole batches (one slice copy into the mapping per batch); a slave appends
raw replicated bytes.  Either way the files are byte-identical to RocketMQ's, BLANK markers and
all, so a real Java broker can replicate from us and we from it.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

from habroker.message import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_V1,
    MAGIC_V2,
    body_crc32,
    check_record,
)
from habroker.store import native
from habroker.store.errors import StoreNotWritable
from habroker.store.mapped_file import MappedFile
from habroker.store.mapped_file_queue import MappedFileQueue
from habroker.store.values import BatchEntry, FilePosition, SelectedRegion

log = logging.getLogger(__name__)

_SIZE_MAGIC = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_STORE_TS = struct.Struct(">q")
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET, then the block shared by a
# batch (SYSFLAG .. PREPAREDTRANSACTIONOFFSET) and BODYLENGTH; keyed by that block's length
_HEADERS = {n: struct.Struct(f">iiiiiqq{n}si") for n in (48, 60, 72)}


def encode_records_py(
    topic_tail: bytes,
    queue_id: int,
    entries: Sequence[BatchEntry],
    first_queue_offset: int,
    shared: bytes,
    record_base: int,
    phys: int,
) -> tuple[list[bytes | memoryview], int]:
    """A batch's records (spec §1.1) as buffers to write back to back from ``phys``, and the
    offset after them.  See :meth:`CommitLog.put_batch` for the arguments. The compiled record
    codec's ``encode_records`` (one buffer) replaces this where it was built."""
    header = _HEADERS[len(shared)]
    pack = header.pack
    i16 = _I16.pack
    crc32 = body_crc32
    parts: list[bytes | memoryview] = []
    append = parts.append
    queue_offset = first_queue_offset
    bare_tail = topic_tail + b"\x00\x00"  # topic + zero properties length
    for entry in entries:
        body = entry.body
        props = entry.properties
        size = record_base + len(body) + len(props)
        append(
            pack(
                size,
                MAGIC_V1,
                crc32(body) & 0x7FFFFFFF,
                queue_id,
                entry.flag,
                queue_offset,
                phys,
                shared,
                len(body),
            )
        )
        append(body)
        append(topic_tail + i16(len(props)) + props if props else bare_tail)
        phys += size
        queue_offset += 1
    return parts, phys


encode_records: Callable[
    [bytes, int, Sequence[BatchEntry], int, bytes, int, int],
    tuple[list[bytes | memoryview], int],
] = native.codec.encode_records if native.codec is not None else encode_records_py


class CommitLog:
    def __init__(self, directory: Path, file_size: int) -> None:
        self.queue = MappedFileQueue(directory, file_size, pad_short_last=True)
        self.file_size = file_size

    # -- facts ---------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_where

    # -- master write path ---------------------------------------------------------------------
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
        """Encode and append a whole batch contiguously; returns the first record's offset.

        ``topic_tail`` is the topic-length byte plus the topic, ``shared`` the per-batch block
        from SYSFLAG to PREPAREDTRANSACTIONOFFSET, ``record_base`` a record's size without body
        and properties, ``total`` the batch's size (validated to fit in an empty file).  A
        batch that would leave fewer than 8 bytes in the file goes whole to the next file,
        behind a BLANK marker (spec §1.8).
        """
        mf = self._writable_file()
        if mf.wrote_position + total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            self._check_disk()  # before the BLANK: a refused put writes nothing
            self._seal(mf)
            mf = self.queue.last_writable()
        start = mf.wrote_offset
        parts, end = encode_records(
            topic_tail, queue_id, entries, first_queue_offset, shared, record_base, start
        )
        mf.append_parts(parts, end - start)
        return start

    def _writable_file(self) -> MappedFile:
        last = self.queue.last
        if last is None or last.is_full:
            self._check_disk()
        return self.queue.last_writable(0)

    def _check_disk(self) -> None:
        """Refuse a new file the disk cannot hold: writing into a sparse mapping on a full
        disk would kill the process with SIGBUS instead of failing the put."""
        self.queue.directory.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.queue.directory).free
        if free < self.file_size:
            raise StoreNotWritable(
                f"disk full: {free} bytes free under {self.queue.directory}, a new commit-log "
                f"file needs {self.file_size}"
            )

    def _seal(self, mf: MappedFile) -> None:
        """Write the BLANK marker and mark the file full."""
        pos = mf.wrote_position
        mf.mm[pos : pos + END_FILE_MIN_BLANK_LENGTH] = _SIZE_MAGIC.pack(
            self.file_size - pos, BLANK_MAGIC
        )
        mf.wrote_position = self.file_size
        self.queue.touch_mtime(mf)

    # -- slave write path ----------------------------------------------------------------------
    def append_raw(self, offset: int, data: bytes | bytearray | memoryview) -> bool:
        """Replicated bytes at exactly the local max offset, never across a file end."""
        last = self.queue.last
        if last is None:
            if offset % self.file_size:
                log.warning(
                    "refusing replicated bytes at %d: an empty log starts at a file "
                    "boundary (a multiple of %d)",
                    offset,
                    self.file_size,
                )
                return False
        elif offset != last.wrote_offset:
            return False
        if not data:
            return True
        if last is None or last.is_full:
            if len(data) > self.file_size:
                return False
            if last is not None:
                self.queue.touch_mtime(last)
            mf = self.queue.last_writable(offset)
        else:
            mf = last
        return mf.append(data)

    # -- reading -------------------------------------------------------------------------------
    def _written(self, offset: int, size: int) -> tuple[MappedFile, int] | None:
        """The file holding the ``size`` bytes at ``offset`` and their position in it, if they
        are all written."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position:
            return None
        return mf, pos

    def read(self, offset: int, size: int) -> memoryview | None:
        """The ``size`` bytes at ``offset`` if they are all written, as a view of the mapping."""
        found = self._written(offset, size)
        return None if found is None else found[0].view[found[1] : found[1] + size]

    def read_located(self, offset: int, size: int) -> tuple[memoryview, FilePosition | None] | None:
        """:meth:`read`, and where the bytes lie: their file and the position in it (None
        where they are not one slice of one file)."""
        found = self._written(offset, size)
        if found is None:
            return None
        mf, pos = found
        return mf.view[pos : pos + size], (mf.file, pos)

    def select_region(self, offset: int) -> SelectedRegion | None:
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = mf.wrote_position
        if pos >= end:
            return None
        return SelectedRegion(offset, mf.file, pos, end - pos, mf.view[pos:end])

    # -- recovery ------------------------------------------------------------------------------
    def recover(
        self, abnormal: bool, checkpoint_min_timestamp: int, check_crc: bool
    ) -> tuple[int, int]:
        """Find the valid end (first byte where a forward scan fails) and cut the rest.

        Returns (valid end, scan start).  The scan starts at the third-to-last file after a
        clean exit, and after a crash at the newest file whose first record was stored before
        the checkpoint's durable timestamp (spec §2.6); records from there on may be missing
        from consume queues, so the caller re-dispatches from the scan start.
        """
        files = self.queue.files
        if not files:
            return 0, 0
        start = max(0, len(files) - 3)
        if abnormal:
            start = 0
            for i in range(len(files) - 1, -1, -1):
                if _first_record_before(files[i], checkpoint_min_timestamp):
                    start = i
                    break
        scan_start = files[start].file_from_offset
        end = scan_start
        for mf in files[start:]:
            pos = 0
            view = mf.view
            while True:
                req, size = check_record(view, pos, check_crc)
                if req is None:
                    break
                pos += size
            if size == 0 or pos == self.file_size:
                # BLANK: the rest is filler.  A BLANK in the last file still seals it (a
                # replica may hold it already), so the end is that file's end.
                end = mf.file_end_offset
                continue
            if size > 0:
                log.warning(
                    "%s: record at %d declares %d bytes but its fields disagree; the "
                    "log ends there",
                    mf.path,
                    pos,
                    size,
                )
            end = mf.file_from_offset + pos
            break
        log.info(
            "commit log recovered (%s): scanned from %d, valid end %d",
            "after a crash" if abnormal else "clean",
            scan_start,
            end,
        )
        self.queue.truncate_dirty(end)
        self.queue.flushed_where = end
        return end, scan_start

    def close(self) -> None:
        self.queue.close()


def _first_record_before(mf: MappedFile, min_timestamp: int) -> bool:
    """RocketMQ's abnormal-recovery test: a real first record stored at or before the time."""
    if mf.file_size < 64:
        return False
    _size, magic = _SIZE_MAGIC.unpack_from(mf.mm, 0)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return False
    sys_flag = struct.unpack_from(">i", mf.mm, 36)[0]
    store_ts: int = _STORE_TS.unpack_from(mf.mm, 68 if sys_flag & 0x10 else 56)[0]
    return store_ts != 0 and store_ts <= min_timestamp


def disk_used_ratio(path: Path) -> float:
    """Percentage of the file system holding ``path`` that is in use, as ``df`` shows it:
    used / (used + available to unprivileged writers). 100 means the broker (not root in a
    pod) can write no more; blocks reserved for root count as neither."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    room = used + st.f_bavail * st.f_frsize
    return 100.0 * used / room if room else 0.0


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
