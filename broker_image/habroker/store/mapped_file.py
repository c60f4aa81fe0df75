"""One pre-sized commit-log or consume-queue file, memory-mapped read/write.

Writes go straight into the mapping (the page cache); durability comes from ``fdatasync`` on
the file's descriptor, run in a worker thread so the event loop keeps appending meanwhile.
The open file object is kept: replication sends from it with ``sendfile``.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

_ZERO_CHUNK = bytes(1 << 20)
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024


def offset_to_file_name(offset: int) -> str:
    """RocketMQ's file name: the start offset as 20 zero-padded decimal digits."""
    return f"{offset:020d}"


class MappedFile:
    """A file of exactly ``file_size`` bytes starting at absolute offset ``file_from_offset``."""

    __slots__ = (
        "file",
        "file_from_offset",
        "file_size",
        "flushed_position",
        "mm",
        "path",
        "view",
        "wrote_position",
    )

    def __init__(self, path: Path, file_from_offset: int, file_size: int, *, create: bool) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, file_size)  # sparse, zero-filled, like a fresh Java mapping
            except BaseException:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise
            self.file: BinaryIO = open(fd, "r+b", buffering=0)  # noqa: SIM115 - kept open
        else:
            self.file = open(path, "r+b", buffering=0)  # noqa: SIM115 - kept open
            actual = os.fstat(self.file.fileno()).st_size
            if actual != file_size:
                self.file.close()
                raise ValueError(f"{path}: {actual} bytes, expected {file_size}")
        self.mm = mmap.mmap(self.file.fileno(), file_size)
        self.view = memoryview(self.mm)
        # a new file is empty; a loaded one counts as full until recovery says otherwise
        self.wrote_position = 0 if create else file_size
        self.flushed_position = self.wrote_position

    @property
    def file_end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def wrote_offset(self) -> int:
        """Absolute offset of the first unwritten byte."""
        return self.file_from_offset + self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def fileno(self) -> int:
        return self.file.fileno()

    def append(self, data: bytes | bytearray | memoryview) -> bool:
        """Copy ``data`` at the write position; False (nothing written) if it does not fit.

        ``pwrite`` rather than a copy into the mapping: the kernel fills the page cache the
        mapping shares without taking a page fault per fresh 4 KiB page (several times faster
        on a new, sparse file); readers of the mapping see the bytes at once.
        """
        n = len(data)
        pos = self.wrote_position
        if pos + n > self.file_size:
            return False
        self._pwrite(data, pos)
        self.wrote_position = pos + n
        return True

    def append_parts(self, parts: list[bytes | memoryview], size: int) -> None:
        """Write ``parts`` (``size`` bytes in all, known to fit) back to back with ``pwritev``."""
        pos = self.wrote_position
        fd = self.file.fileno()
        at = pos
        for i in range(0, len(parts), _IOV_MAX):
            chunk = parts[i : i + _IOV_MAX]
            want = sum(len(p) for p in chunk) if len(parts) > _IOV_MAX else size
            done = os.pwritev(fd, chunk, at)
            if done != want:  # short write (signal, ENOSPC on a hole): finish it plainly
                self._pwrite(memoryview(b"".join(chunk))[done:], at + done)
            at += want
        self.wrote_position = pos + size

    def _pwrite(self, data: bytes | bytearray | memoryview, pos: int) -> None:
        fd = self.file.fileno()
        view = memoryview(data)
        while view:
            done = os.pwrite(fd, view, pos)
            if done <= 0:
                raise OSError(f"{self.path}: pwrite wrote nothing at {pos}")
            view = view[done:]
            pos += done

    def sync(self) -> None:
        """fdatasync the file (blocking; callers run it in a thread)."""
        os.fdatasync(self.file.fileno())

    def zero_from(self, position: int) -> None:
        """Overwrite everything from ``position`` to the end with zeros.

        A torn tail left in place could line up with a future record boundary and be read back
        as valid records after a second crash.  Holes of the sparse file are skipped, and
        chunks that already read as zero are not rewritten, so this stays cheap.
        """
        fd = self.file.fileno()
        pos = position
        end = self.file_size
        while pos < end:
            try:
                data_start = os.lseek(fd, pos, os.SEEK_DATA)
                data_end = os.lseek(fd, data_start, os.SEEK_HOLE)
            except OSError:  # ENXIO: only holes remain (or SEEK_DATA unsupported: be thorough)
                if pos == position and not _seek_data_supported(fd):
                    data_start, data_end = pos, end
                else:
                    break
            data_start = max(data_start, position)
            data_end = min(data_end, end)
            chunk = data_start
            while chunk < data_end:
                stop = min(chunk + len(_ZERO_CHUNK), data_end)
                if self.mm[chunk:stop] != _ZERO_CHUNK[: stop - chunk]:
                    self.mm[chunk:stop] = _ZERO_CHUNK[: stop - chunk]
                chunk = stop
            pos = data_end

    def close(self) -> None:
        """Unmap and close; a mapping still exported to readers is left for the GC to unmap."""
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            log.debug("%s: mapping still referenced by a reader; unmapped when released", self.path)
        with contextlib.suppress(OSError):
            self.file.close()

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position})"
        )


def _seek_data_supported(fd: int) -> bool:
    try:
        os.lseek(fd, 0, os.SEEK_DATA)
    except OSError as exc:
        import errno

        return exc.errno == errno.ENXIO
    return True
