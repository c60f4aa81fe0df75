"""StoreCheckpoint: the 4096-byte ``checkpoint`` file of big-endian int64s (spec §2.4).

Recovery after a crash trusts only what the checkpoint says was durable: consume queues are
rebuilt from the newest commit-log file whose first record is older than ``min_timestamp``.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != SIZE:
                os.ftruncate(fd, SIZE)
            self.mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._fd = os.open(path, os.O_RDWR)
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ) = _FIELDS.unpack_from(self.mm, 0)
        self._synced = self._values()

    @property
    def min_timestamp(self) -> int:
        """Store time before which every record is known durable in log and queues."""
        lowest: int = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, lowest - 3000)

    def _values(self) -> tuple[int, int, int, int, int]:
        return (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )

    def write(self) -> None:
        """Put the fields into the mapping (no sync)."""
        _FIELDS.pack_into(self.mm, 0, *self._values())

    def flush(self) -> None:
        """Write and fdatasync if anything changed (blocking; run it in a thread)."""
        values = self._values()
        if values == self._synced:
            return
        _FIELDS.pack_into(self.mm, 0, *values)
        os.fdatasync(self._fd)
        self._synced = values

    def close(self) -> None:
        self.write()
        self.mm.close()
        os.close(self._fd)
