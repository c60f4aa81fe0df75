"""Values passed across the store API (the HTTP server and HA code build on these)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import BinaryIO


@dataclass(slots=True)
class BatchEntry:
    """One message of a produce batch; ``properties`` are already RocketMQ-encoded."""

    flag: int
    body: bytes | memoryview
    properties: bytes


class PutStatus(StrEnum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class PutResult:
    """Where a batch landed: its first record's offsets and the whole batch's extent."""

    status: PutStatus
    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    count: int
    msg_id: str  # offsetMsgId of the first record
    store_timestamp: int = 0
    # every record's commit-log offset, for a batch of more than one (batch msgIds)
    record_offsets: list[int] | None = None

    @property
    def next_offset(self) -> int:
        """Commit-log offset just past the batch: what SYNC waits compare against."""
        return self.wrote_offset + self.wrote_bytes


class GetMessageStatus(StrEnum):
    FOUND = "FOUND"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


#: a file and a byte position in it (the file object, not its descriptor: closed is visible)
FilePosition = tuple[BinaryIO, int]


@dataclass(slots=True)
class GetMessageResult:
    """A pull's answer. ``records`` are raw commit-log bytes, verbatim: each item is a run of
    one or more whole records that lie back to back in the log (``message_count`` in all)."""

    status: GetMessageStatus
    records: list[memoryview | bytes]
    next_begin_offset: int
    min_offset: int
    max_offset: int
    max_phy_offset_pulling: int = 0
    message_count: int = 0
    #: where each of ``records`` lies: its commit-log file and the position in it, so an
    #: answer can go out with ``sendfile``; None where the records are not file slices
    files: list[FilePosition] | None = None

    @property
    def buffer_total_size(self) -> int:
        return sum(len(r) for r in self.records)

    def record_views(self) -> list[memoryview]:
        """Each record on its own, split out of the runs by its TOTALSIZE field."""
        out: list[memoryview] = []
        for run in self.records:
            view = memoryview(run)
            pos = 0
            while pos < len(view):
                size = int.from_bytes(view[pos : pos + 4], "big")
                out.append(view[pos : pos + size])
                pos += size
        return out


@dataclass(slots=True)
class SelectedRegion:
    """Bytes of one commit-log file from ``start_offset`` to its readable end."""

    start_offset: int
    file: BinaryIO
    position: int
    size: int
    view: memoryview


@dataclass(slots=True)
class CleanResult:
    deleted_files: int
    min_offset: int
