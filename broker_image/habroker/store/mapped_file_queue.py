"""An ordered run of equally sized MappedFiles forming one logical byte stream.

Used for the commit log and for every consume queue.  File ``i`` covers absolute offsets
``[from_i, from_i + size)`` and ``from_{i+1} = from_i + size``: lookups are arithmetic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from pathlib import Path

from habroker.store.errors import DamagedFile
from habroker.store.mapped_file import MappedFile, offset_to_file_name

log = logging.getLogger(__name__)

_NAME = re.compile(r"^\d{20}$")


def _later(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{len(names)} files, {names[0]}..{names[-1]}"


def is_store_file_name(name: str) -> bool:
    """A mapped file's name: its start offset in 20 digits."""
    return _NAME.match(name) is not None


class MappedFileQueue:
    """Sorted mapped files in one directory, named by their 20-digit start offset."""

    def __init__(self, directory: Path, file_size: int, *, pad_short_last: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        # RocketMQ's recovery for a last file cut short (a crash or a full disk mid-write): pad
        # it to its size with zeros; the caller's recovery then cuts at its last whole record
        self.pad_short_last = pad_short_last
        self.padded: Path | None = None  # the file load() padded, if any
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.fsync_count = 0  # fdatasync calls made by flush(); tests count group commits
        self.flush_lock = asyncio.Lock()
        # bumped whenever files are cut or removed: a flush whose sync ran meanwhile (in a
        # thread) must not claim positions from before the cut
        self.cuts = 0

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> None:
        """Map every file in the directory (all marked full; recovery truncates).

        A 0-byte last file (a crash right after creating it) is removed; with
        ``pad_short_last`` a shorter last file is padded with zeros to its size. Any other size
        mismatch or a gap between files raises :class:`DamagedFile` naming the file.
        """
        if not self.directory.is_dir():
            return
        names = sorted(p.name for p in self.directory.iterdir() if _NAME.match(p.name))
        for i, name in enumerate(names):
            path = self.directory / name
            size = path.stat().st_size
            if size != self.file_size:
                last = i == len(names) - 1
                if size == 0 and last:
                    log.warning("%s: removing the empty last file", path)
                    path.unlink()
                    continue
                if size < self.file_size and last and self.pad_short_last:
                    log.warning(
                        "%s: %d bytes, shorter than the configured %d (cut by a crash or a full "
                        "disk); padding it with zeros, recovery cuts it at its last whole record",
                        path,
                        size,
                        self.file_size,
                    )
                    os.truncate(path, self.file_size)
                    self.padded = path
                elif size < self.file_size and not last:
                    raise DamagedFile(
                        path,
                        f"{path}: {size} bytes but the configured size is {self.file_size}, and "
                        f"it is not the last file ({_later(names[i + 1 :])} after it)",
                        later=[self.directory / n for n in names[i + 1 :]],
                    )
                else:
                    raise DamagedFile(
                        path,
                        f"{path}: file is {size} bytes but the configured size is "
                        f"{self.file_size}; the store was written with a different mapped file "
                        "size or is damaged",
                    )
            start = int(name)
            if start % self.file_size:
                raise DamagedFile(
                    path, f"{path}: start offset {start} is not a multiple of {self.file_size}"
                )
            if self.files and start != self.files[-1].file_end_offset:
                raise DamagedFile(
                    path,
                    f"{path}: expected the file after {self.files[-1].path.name} to start at "
                    f"{self.files[-1].file_end_offset}; a file is missing",
                )
            self.files.append(MappedFile(path, start, self.file_size, create=False))

    # -- facts -------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Absolute offset of the first unwritten byte (0 when empty)."""
        return self.files[-1].wrote_offset if self.files else 0

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file whose range contains ``offset``, if any."""
        if not self.files:
            return None
        idx = (offset - self.files[0].file_from_offset) // self.file_size
        if 0 <= idx < len(self.files) and offset >= self.files[0].file_from_offset:
            return self.files[idx]
        return None

    def index_of(self, mf: MappedFile) -> int:
        return (mf.file_from_offset - self.files[0].file_from_offset) // self.file_size

    # -- growth ------------------------------------------------------------------------------
    def create_file(self, start_offset: int) -> MappedFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / offset_to_file_name(start_offset)
        mf = MappedFile(path, start_offset, self.file_size, create=True)
        self.files.append(mf)
        return mf

    def last_writable(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the next one when the last is full.

        An empty queue starts at ``start_offset`` rounded down to a file boundary.
        """
        last = self.last
        if last is None:
            mf = self.create_file(start_offset - start_offset % self.file_size)
            self.flushed_where = mf.file_from_offset
            return mf
        if last.is_full:
            return self.create_file(last.file_end_offset)
        return last

    # -- truncation and deletion -------------------------------------------------------------
    def truncate_dirty(self, offset: int) -> None:
        """Make ``offset`` the end: zero the rest of its file, destroy every later file."""
        self.cuts += 1
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.file_end_offset <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                mf.zero_from(pos)
                mf.wrote_position = pos
                mf.flushed_position = min(mf.flushed_position, pos)
                keep.append(mf)
            else:
                log.info("%s: removed (beyond the valid end %d)", mf.path, offset)
                mf.destroy()
        self.files = keep
        self.flushed_where = min(self.flushed_where, offset)

    def destroy_all(self) -> None:
        self.cuts += 1
        for mf in self.files:
            mf.destroy()
        self.files = []
        self.flushed_where = 0

    def delete_first(self, count: int) -> None:
        self.cuts += 1
        for mf in self.files[:count]:
            mf.destroy()
        del self.files[:count]

    def expired_files(
        self, expired_before_ms: float, limit_offset: int, at_most: int | None = None
    ) -> int:
        """How many leading files were last modified before ``expired_before_ms`` and end at
        or before ``limit_offset`` (``at_most`` of them); never the last file, stops at the
        first keeper."""
        count = 0
        for mf in self.files[: -1 if at_most is None else min(at_most, len(self.files) - 1)]:
            try:
                mtime_ms = os.stat(mf.path).st_mtime * 1000
            except OSError:
                mtime_ms = 0
            if mtime_ms >= expired_before_ms or mf.file_end_offset > limit_offset:
                break
            count += 1
        return count

    # -- flushing ----------------------------------------------------------------------------
    def unflushed_bytes(self) -> int:
        return self.max_offset - self.flushed_where

    async def flush(self) -> int:
        """fdatasync every file holding bytes past ``flushed_where``; returns the new value.

        The target is the write position *before* the sync starts, so bytes appended while a
        sync runs are not claimed; concurrent callers serialize on ``flush_lock``.
        """
        async with self.flush_lock:
            while self.files:
                mf = self.find(self.flushed_where)
                if mf is None:
                    if self.flushed_where < self.min_offset:
                        self.flushed_where = self.min_offset
                        continue
                    break
                target = mf.wrote_position
                if mf.flushed_position < target:
                    self.fsync_count += 1
                    cuts = self.cuts
                    try:
                        await asyncio.to_thread(mf.sync)
                    except (OSError, ValueError):
                        if self.cuts == cuts:
                            raise
                    if self.cuts != cuts:
                        # cut (a follower's truncation) or removed while it synced: what it
                        # synced may not be what is there now; look again from the new end
                        continue
                    mf.flushed_position = max(mf.flushed_position, target)
                self.flushed_where = mf.file_from_offset + mf.flushed_position
                if mf.flushed_position < mf.file_size:
                    break
            return self.flushed_where

    def flush_blocking(self) -> None:
        """Synchronous flush for shutdown paths that cannot await."""
        for mf in self.files:
            if mf.flushed_position < mf.wrote_position:
                self.fsync_count += 1
                mf.sync()
                mf.flushed_position = mf.wrote_position
        self.flushed_where = self.max_offset

    def close(self) -> None:
        for mf in self.files:
            mf.close()
        self.files = []

    def touch_mtime(self, mf: MappedFile) -> None:
        """mmap writes do not reliably update mtime; retention relies on it."""
        now = time.time()
        with contextlib.suppress(OSError):
            os.utime(mf.path, (now, now))
