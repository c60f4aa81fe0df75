"""EpochFileCache: which epoch (term of one master) wrote which part of the commit log.

RocketMQ 5's layout (spec §8): ``<storePathRootDir>/epochFileCheckpoint``, a text file of
the entry count, the CRC32 of the entry lines (masked to 31 bits; 0 = unchecked), then one
``epoch-startOffset`` line per entry; written through a temporary file with a ``.bak`` copy,
read back from ``.bak`` when the file is missing or damaged. An entry's end is the next
entry's start; the last one's is the log's max offset.

Two brokers whose logs come from the same masters have the same entries; where they differ,
:meth:`EpochFileCache.consistent_point` says up to which offset they still agree, so a slave
joining a new master knows which tail its new master never had.
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "epochFileCheckpoint"
NO_END = (1 << 63) - 1  # Long.MAX_VALUE: an open entry's end before max offset is known


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int = NO_END

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "startOffset": self.start_offset, "endOffset": self.end_offset}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpochEntry:
        return cls(int(data["epoch"]), int(data["startOffset"]), int(data.get("endOffset", NO_END)))


def crc32(text: str) -> int:
    """UtilAll.crc32: java.util.zip.CRC32 of the UTF-8 bytes, masked to a positive int."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def encode(entries: list[tuple[int, int]]) -> str:
    body = "".join(f"{epoch}-{start}\n" for epoch, start in entries)
    return f"{len(entries)}\n{crc32(body)}\n{body}"


def decode(text: str) -> list[tuple[int, int]]:
    """The entries of one file's text; ValueError if it is damaged."""
    lines = text.split("\n")
    if len(lines) < 2:
        raise ValueError("too short")
    count, crc = int(lines[0]), int(lines[1])
    body_lines = [line for line in lines[2:] if line]
    entries = []
    for line in body_lines:
        epoch, sep, start = line.partition("-")
        if not sep:
            raise ValueError(f"not an epoch-startOffset line: {line!r}")
        entries.append((int(epoch), int(start)))
    if len(entries) != count:
        raise ValueError(f"{count} entries announced, {len(entries)} found")
    body = "".join(line + "\n" for line in body_lines)
    if crc and crc32(body) != crc:
        raise ValueError(f"crc {crc} does not match {crc32(body)}")
    return entries


def consistent_point(
    local: list[EpochEntry], local_max: int, other: list[EpochEntry], other_max: int
) -> int:
    """The offset up to which two logs were written by the same epochs (-1: none).

    The newest local epoch the other side also has, starting at the same offset, decides:
    both agree up to the smaller of the two ends of that epoch (RocketMQ's
    findConsistentPoint, with each side's last entry ending at its max offset).
    """
    theirs = {e.epoch: e for e in _closed(other, other_max)}
    for mine in reversed(_closed(local, local_max)):
        match = theirs.get(mine.epoch)
        if match is not None and match.start_offset == mine.start_offset:
            return min(mine.end_offset, match.end_offset)
    return -1


def _closed(entries: list[EpochEntry], max_offset: int) -> list[EpochEntry]:
    out = []
    for i, e in enumerate(entries):
        end = entries[i + 1].start_offset if i + 1 < len(entries) else max_offset
        out.append(EpochEntry(e.epoch, e.start_offset, end))
    return out


class EpochFileCache:
    """The epoch entries of one store, kept in ``epochFileCheckpoint``."""

    def __init__(self, root: Path) -> None:
        self.path = root / FILE_NAME
        self.entries: list[EpochEntry] = []

    @property
    def backup(self) -> Path:
        return self.path.with_name(FILE_NAME + ".bak")

    def load(self) -> list[EpochEntry]:
        for path in (self.path, self.backup):
            if not path.exists():
                continue
            try:
                pairs = decode(path.read_text())
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning("%s is damaged (%s); trying the backup", path, exc)
                continue
            if pairs or path == self.backup:
                self.entries = [EpochEntry(e, s) for e, s in pairs]
                return self.entries
        self.entries = []
        return self.entries

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def closed(self, max_offset: int) -> list[EpochEntry]:
        """The entries with their ends filled in, the last one ending at ``max_offset``."""
        return _closed(self.entries, max_offset)

    def append(self, epoch: int, start_offset: int) -> None:
        """A new epoch starting at ``start_offset``; refuses one that does not move forward."""
        if self.entries:
            last = self.entries[-1]
            if epoch <= last.epoch or start_offset < last.start_offset:
                raise ValueError(
                    f"epoch {epoch} at {start_offset} does not follow epoch {last.epoch} "
                    f"at {last.start_offset}"
                )
            # an epoch that wrote nothing stays: it is how a log that never had the next
            # epoch's first byte finds where the two part
        self.entries.append(EpochEntry(epoch, start_offset))
        self.persist()

    def truncate_from(self, offset: int) -> None:
        """Drop entries that start beyond ``offset`` (the log was cut there)."""
        kept = [e for e in self.entries if e.start_offset <= offset]
        if kept != self.entries:
            self.entries = kept
            self.persist()

    def replace(self, entries: list[EpochEntry]) -> None:
        if [(e.epoch, e.start_offset) for e in entries] != [
            (e.epoch, e.start_offset) for e in self.entries
        ]:
            self.entries = [EpochEntry(e.epoch, e.start_offset) for e in entries]
            self.persist()

    def persist(self) -> None:
        """Temporary file, then the backup, then the file (MixAll.string2File's order)."""
        text = encode([(e.epoch, e.start_offset) for e in self.entries])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        tmp.write_text(text)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if self.path.exists():
            self.backup.write_bytes(self.path.read_bytes())
        os.replace(tmp, self.path)
