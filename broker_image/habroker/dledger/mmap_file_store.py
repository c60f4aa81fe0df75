"""DLedgerMmapFileStore: the replicated log's data and index files, laid out as DLedger's.

``<storePathRootDir>/dledger-<selfId>/`` holds ``data/`` (entries back to back in files of
``mappedFileSizeCommitLog`` bytes named by their start offset; a file whose space cannot take
the next entry plus 8 bytes ends with a blank: int -1 and int remaining bytes), ``index/``
(one 32-byte unit per entry at ``index * 32``: magic, pos, size, index, term) and
``checkpoint`` (Java properties ``committedIndex`` and ``endIndex``).  ../shared/spec
ROCKETMQ-FORMAT.md has the field tables.

Recovery walks the entries from (at most) the third-last data file, checks each against its
index unit (rewriting index units from the first disagreement, which is how an entry written
before a crash but not yet indexed is kept), and cuts the log at the first entry that does
not hold together: a zero size, a wrong position, a gap in indexes or a term going backwards.

Retention deletes whole data files from the front, so the log's first entry (the begin index)
moves; a follower whose log cannot reach its leader's first entry starts the log again there,
in the middle of a file at the leader's position, and recovery finds where that file's first
entry starts.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Sequence
from itertools import accumulate
from pathlib import Path

from habroker.dledger.entry import (
    BODY_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_1,
    DLedgerEntry,
    decode,
    decode_header,
    decode_index,
    encode_index,
    pack_index_units_py,
    same_entry,
    units_match_entries_py,
)
from habroker.dledger.protocol import DLedgerResponseCode
from habroker.store.errors import StoreError
from habroker.store.mapped_file import MappedFile
from habroker.store.mapped_file_queue import MappedFileQueue
from habroker.store.native import pack_index_units, units_match_entries

log = logging.getLogger(__name__)

BLANK_MAGIC_CODE = -1
MIN_BLANK_LEN = 8
INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024
CHECKPOINT = "checkpoint"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"

AppendHook = Callable[[DLedgerEntry, bytearray], None]
#: (term, first index, each entry's position) → the entries' bytes, header included, as
#: ``parts_per_entry`` buffers per entry (see :meth:`append_encoded_as_leader`)
EntryEncoder = Callable[[int, int, list[int]], list[bytes | memoryview]]
_UNIT = struct.Struct(">iqiqq")  # an index unit: magic, pos, size, index, term
_BLANK = struct.Struct(">ii")
_ENTRY_HEAD = struct.Struct(">iiqqq")  # magic, size, index, term, pos
_HEADER_WITH_LEN = struct.Struct(">iiqqqiiii")  # ... channel, chainCrc, bodyCrc, body length
_units_match = units_match_entries or units_match_entries_py  # the compiled one where built
_pack_units = pack_index_units or pack_index_units_py


class DLedgerStoreError(StoreError):
    """A refusal with the DLedger response code a peer is told."""

    def __init__(self, code: DLedgerResponseCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code


class DLedgerMmapFileStore:
    def __init__(
        self,
        base_dir: Path,
        self_id: str,
        *,
        data_file_size: int,
        index_file_size: int = INDEX_FILE_SIZE,
    ) -> None:
        if index_file_size % INDEX_UNIT_SIZE:
            raise ValueError(f"index file size {index_file_size} is not a multiple of 32")
        self.root = Path(base_dir) / f"dledger-{self_id}"
        self.data = MappedFileQueue(self.root / "data", data_file_size)
        self.index = MappedFileQueue(self.root / "index", index_file_size)
        self.ledger_begin_index = -1
        self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.committed_index = -1
        self._checkpoint_written: str | None = None  # the checkpoint file's text, once written
        self._committed_pos = -1
        self.flushed_index = -1
        #: the member's current term: commits announced for an older term are ignored
        self.current_term: Callable[[], int] = lambda: -1

    # -- facts -----------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.data.directory

    @property
    def committed_pos(self) -> int:
        """End of the last committed entry (the first entry's position when none is)."""
        if self._committed_pos >= 0:
            return self._committed_pos
        return self.data.min_offset

    @property
    def data_end_pos(self) -> int:
        return self.data.max_offset

    @property
    def flushed_pos(self) -> int:
        return self.data.flushed_where

    # -- recovery --------------------------------------------------------------------------------
    def recover(self) -> None:
        self.data.load()
        self.index.load()
        files = self.data.files
        if not files:
            self.index.truncate_dirty(0)
            self.index.destroy_all()
            self._load_checkpoint()
            return
        start = max(0, len(files) - 3)
        while start > 0 and not self._first_entry_checks(files[start]):
            start -= 1
        process, last_index, last_term = self._walk(start)
        if files[-1].file_from_offset - process > self.data.file_size:
            raise StoreError(
                f"{self.data.directory}: recovery stopped at {process}, more than a file before "
                f"the last file {files[-1].path.name}; check the files before truncating them"
            )
        self.data.truncate_dirty(process)
        self.data.flushed_where = process
        self.index.truncate_dirty((last_index + 1) * INDEX_UNIT_SIZE)
        self.index.flushed_where = self.index.max_offset
        self.ledger_end_index = last_index
        self.ledger_end_term = last_term
        self.flushed_index = last_index
        self._revise_begin_index()
        if last_index >= 0 and self.get(last_index) is None:
            raise StoreError(f"{self.root}: entry {last_index} unreadable after recovery")
        self._load_checkpoint()

    def _first_entry_checks(self, mf: MappedFile) -> bool:
        try:
            magic, size, index, term, pos, _c, _cc, _bc, body_len = decode_header(mf.view)
            unit = self._index_unit(index)
            return (
                magic == MAGIC_1
                and size > HEADER_SIZE
                and pos == mf.file_from_offset
                and body_len + BODY_OFFSET == size
                and unit is not None
                and unit == (magic, pos, size, index, term)
            )
        except Exception:
            return False

    def _walk(self, start: int) -> tuple[int, int, int]:
        """Check entries from the file at ``start``; (end offset, last index, last term)."""
        files = self.data.files
        last_index = last_term = -1
        rewrite_index = False
        i = start
        mf = files[i]
        rel = self._first_entry_rel(mf) if i == 0 else 0
        process = mf.file_from_offset + rel
        while True:
            if rel + 8 > mf.file_size:
                break
            magic = int.from_bytes(mf.view[rel : rel + 4], "big", signed=True)
            if magic == BLANK_MAGIC_CODE:
                process = mf.file_end_offset
                i += 1
                if i >= len(files):
                    break
                mf, rel, process = files[i], 0, files[i].file_from_offset
                continue
            if rel + BODY_OFFSET > mf.file_size:
                break
            _m, size, index, term, pos, _c, _cc, _bc, body_len = decode_header(mf.view, rel)
            absolute = mf.file_from_offset + rel
            if size == 0:
                break
            problem = None
            if not MAGIC_1 <= magic <= CURRENT_MAGIC:
                problem = f"magic {magic}"
            elif size <= HEADER_SIZE or body_len + BODY_OFFSET != size or rel + size > mf.file_size:
                problem = f"size {size} (body {body_len})"
            elif pos != absolute:
                problem = f"pos {pos}"
            elif last_index != -1 and index != last_index + 1:
                problem = f"index {index} after {last_index}"
            elif term < last_term:
                problem = f"term {term} after {last_term}"
            if problem is not None:
                log.warning(
                    "%s: the log ends at %d: entry there has %s",
                    self.data.directory,
                    absolute,
                    problem,
                )
                break
            unit = (magic, absolute, size, index, term)
            if not rewrite_index and self._index_unit(index) != unit:
                log.warning("%s: index units rebuilt from entry %d", self.index.directory, index)
                self._cut_index(index * INDEX_UNIT_SIZE)
                rewrite_index = True
            if rewrite_index:
                self._append_index(*unit)
            last_index, last_term = index, term
            rel += size
            process = absolute + size
        return process, last_index, last_term

    def _cut_index(self, offset: int) -> None:
        self.index.truncate_dirty(offset)
        if self.index.max_offset != offset:
            self.index.destroy_all()
            self._rebuild_at(self.index, offset)

    @staticmethod
    def _rebuild_at(queue: MappedFileQueue, offset: int) -> None:
        mf = queue.create_file(offset - offset % queue.file_size)
        mf.wrote_position = mf.flushed_position = offset % queue.file_size
        queue.flushed_where = offset

    def _revise_begin_index(self) -> None:
        first = self.data.files[0] if self.data.files else None
        if first is None or self.ledger_end_index < 0:
            self.ledger_begin_index = -1
            return
        self.ledger_begin_index = decode_header(first.view, self._first_entry_rel(first))[2]

    @staticmethod
    def _first_entry_rel(mf: MappedFile) -> int:
        """Where the first entry of the log's first file starts: 0, unless the log was rebuilt
        at a leader's first entry (:meth:`truncate`), whose file is zeros up to that entry.
        The magic (an int below 256) makes the first non-zero byte the entry's fourth."""
        view = mf.view
        if _ENTRY_HEAD.unpack_from(view, 0)[4] == mf.file_from_offset and view[3]:
            return 0  # the usual case: the file begins with an entry
        step = 1 << 20
        for at in range(0, mf.file_size, step):
            chunk = bytes(view[at : at + step])
            stripped = chunk.lstrip(b"\0")
            if not stripped:
                continue
            rel = at + len(chunk) - len(stripped) - 3
            if rel <= 0 or rel + BODY_OFFSET > mf.file_size:
                return 0
            magic, _size, _index, _term, pos = _ENTRY_HEAD.unpack_from(view, rel)
            ok = MAGIC_1 <= magic <= CURRENT_MAGIC and pos == mf.file_from_offset + rel
            return rel if ok else 0
        return 0

    def _load_checkpoint(self) -> None:
        path = self.root / CHECKPOINT
        try:
            text = path.read_text()
        except FileNotFoundError:
            return
        values = dict(
            line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
        )
        committed = values.get(COMMITTED_INDEX_KEY, "").strip()
        if committed:
            self.update_committed_index(self.current_term(), int(committed))

    # -- index units -----------------------------------------------------------------------------
    def _index_unit(self, index: int) -> tuple[int, int, int, int, int] | None:
        offset = index * INDEX_UNIT_SIZE
        mf = self.index.find(offset)
        if mf is None or index < 0:
            return None
        rel = offset - mf.file_from_offset
        if rel + INDEX_UNIT_SIZE > mf.wrote_position:
            return None
        return decode_index(mf.view, rel)

    def _append_index(self, magic: int, pos: int, size: int, index: int, term: int) -> None:
        expected = index * INDEX_UNIT_SIZE
        if self.index.max_offset != expected:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR,
                f"index unit of entry {index} would land at {self.index.max_offset}, not {expected}",
            )
        mf = self.index.last_writable(expected)
        if not mf.append(encode_index(pos, size, magic, index, term)):
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR, f"index unit {index} not written"
            )

    # -- data ------------------------------------------------------------------------------------
    def append_as_leader(
        self, body: bytes, term: int, hook: AppendHook | None = None
    ) -> DLedgerEntry:
        return self.append_batch_as_leader([body], term, hook)[0]

    def append_batch_as_leader(
        self, bodies: Sequence[bytes], term: int, hook: AppendHook | None = None
    ) -> list[DLedgerEntry]:
        """Entries for ``bodies`` at the end of the log, in this term; ``hook`` sees each
        encoded entry (with its position) before it is written."""
        first = self.ledger_end_index + 1
        entries = [DLedgerEntry(first + i, term, body) for i, body in enumerate(bodies)]
        self._lay_down(entries, hook, assign=True)
        return entries

    def append_encoded_as_leader(
        self, term: int, sizes: Sequence[int], encode: EntryEncoder, parts_per_entry: int
    ) -> tuple[int, list[int]]:
        """Entries of ``sizes`` bytes (header included) at the end of the log, in this term,
        without an object per entry: their positions are planned first (a blank closes a file
        that cannot take the next entry plus 8 bytes), ``encode(term, first index, positions)`` gives
        their bytes (``parts_per_entry`` buffers each, headers packed by the caller with
        :data:`habroker.dledger.entry.HEADER_FORMAT`), which go to the files with one
        ``pwritev`` per file, and the index units with one write.  Returns (first index,
        positions)."""
        if not sizes:
            return self.ledger_end_index + 1, []
        file_size = self.data.file_size
        mf = self.data.last_writable(0)
        base = mf.file_from_offset
        rel = mf.wrote_position
        starts: list[int] = []  # entries that open a new data file
        if rel + sum(sizes) + MIN_BLANK_LEN <= file_size:  # all fit: no loop in Python
            positions = list(accumulate(sizes[:-1], initial=base + rel))
        else:
            positions = []
            for size in sizes:
                if size + MIN_BLANK_LEN > file_size - rel:
                    if size + MIN_BLANK_LEN > file_size:
                        raise DLedgerStoreError(
                            DLedgerResponseCode.DISK_ERROR,
                            f"an entry of {size} bytes does not fit a data file of "
                            f"{file_size} bytes",
                        )
                    starts.append(len(positions))
                    base += file_size
                    rel = 0
                positions.append(base + rel)
                rel += size
        first = self.ledger_end_index + 1
        parts = encode(term, first, positions)
        if len(parts) != len(sizes) * parts_per_entry:
            raise ValueError(f"{len(parts)} parts for {len(sizes)} entries")
        written = 0
        try:
            for end in (*starts, len(sizes)):
                if end > written:  # else the first entry already opens a new file
                    seg = parts[written * parts_per_entry : end * parts_per_entry]
                    seg_size = positions[end - 1] + sizes[end - 1] - positions[written]
                    if sum(map(len, seg)) != seg_size:
                        raise ValueError(f"entries {first + written}..: not {seg_size} bytes")
                    if mf.file_from_offset + mf.wrote_position != positions[written]:
                        raise DLedgerStoreError(
                            DLedgerResponseCode.DISK_ERROR,
                            f"entry {first + written} planned at {positions[written]}, "
                            f"the file is at {mf.file_from_offset + mf.wrote_position}",
                        )
                    mf.append_parts(seg, seg_size)
                    written = end
                if end < len(sizes):  # a blank closes this file; the next one takes the rest
                    remaining = file_size - mf.wrote_position
                    self._write_chunk(mf, bytearray(_BLANK.pack(BLANK_MAGIC_CODE, remaining)))
                    mf.wrote_position = file_size
                    mf = self.data.last_writable(0)
        finally:
            if written:
                units = _pack_units(
                    positions[:written], sizes[:written], first, term, CURRENT_MAGIC
                )
                self._append_index_units(first, units)
                self.ledger_end_index = first + written - 1
                self.ledger_end_term = term
                if self.ledger_begin_index == -1:
                    self.ledger_begin_index = first
        return first, positions

    def append_as_follower(
        self, entry: DLedgerEntry, leader_term: int, leader_id: str
    ) -> DLedgerEntry:
        self.append_batch_as_follower([entry], leader_term, leader_id)
        return entry

    def append_batch_as_follower(
        self, entries: Sequence[DLedgerEntry], leader_term: int, leader_id: str
    ) -> None:
        """The leader's entries, which must follow this log's end and land where the leader
        put them."""
        expected = self.ledger_end_index + 1
        for i, entry in enumerate(entries):
            if entry.index != expected + i:
                raise DLedgerStoreError(
                    DLedgerResponseCode.INCONSISTENT_INDEX,
                    f"entry {entry.index} pushed by {leader_id}, expected {expected + i}",
                )
        self._lay_down(entries, None, assign=False)

    def index_units(self, first: int, count: int) -> bytes:
        """The index units of entries ``first`` .. ``first + count - 1`` (a raw push sends
        them with the entries: the follower's are the same bytes)."""
        out = bytearray()
        offset = first * INDEX_UNIT_SIZE
        end = offset + count * INDEX_UNIT_SIZE
        while offset < end:
            mf = self.index.find(offset)
            if mf is None:
                break
            rel = offset - mf.file_from_offset
            take = min(end - offset, mf.wrote_position - rel)
            if take <= 0:
                break
            out += mf.view[rel : rel + take]
            offset += take
        if len(out) != count * INDEX_UNIT_SIZE:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR, f"index units of entries {first}+{count} missing"
            )
        return bytes(out)

    def raw_push_body(self, first: int, max_count: int, max_bytes: int) -> tuple[int, bytes]:
        """A PUSH_RAW's body from ``first``: (how many entries, their index units then their
        bytes); (0, b"") when there is nothing there.  Entries that lie in one data file are
        one slice found by their first and last index units (every header checked against its
        unit); otherwise they are walked as :meth:`raw_entries` walks them."""
        last = min(self.ledger_end_index, first + max_count - 1)
        if first > last or first < self.ledger_begin_index:
            return 0, b""
        count = last - first + 1
        units = self.index_units(first, count)
        _m0, pos0, _s0, _i0, _t0 = _UNIT.unpack_from(units, 0)
        _m1, pos1, size1, _i1, _t1 = _UNIT.unpack_from(units, len(units) - INDEX_UNIT_SIZE)
        mf = self.data.find(pos0)
        if (
            mf is not None
            and pos1 + size1 - pos0 <= max_bytes
            and pos0 <= pos1
            and pos1 + size1 <= mf.file_from_offset + mf.wrote_position
        ):
            rel = pos0 - mf.file_from_offset
            data = mf.view[rel : rel + pos1 + size1 - pos0]
            if self._headers_match(units, data):
                return count, units + data
        walked = self.raw_entries(first, max_count, max_bytes)
        units = units[: len(walked) * INDEX_UNIT_SIZE]
        return len(walked), b"".join([units, *walked])

    @staticmethod
    def _headers_match(units: bytes | memoryview, entries: memoryview) -> bool:
        """``entries`` are exactly the entries ``units`` index, every header checked: a slip in
        one entry in the middle of a push must not reach a follower's index."""
        return _units_match(units, entries, CURRENT_MAGIC)

    def append_raw_as_follower(
        self, data: bytes, first: int, count: int, leader_term: int, leader_id: str
    ) -> None:
        """A raw push: ``count`` index units, then the leader's entries as its data files hold
        them.  Entries that lie in this log's current data file, back to back where the units
        say, go down in two writes after every entry is checked against its unit; otherwise (a
        data file ends among them, or anything disagrees) every entry is walked and checked,
        and what was checked before a bad one is kept."""
        index = self.ledger_end_index + 1
        if first != index or count < 1:
            raise DLedgerStoreError(
                DLedgerResponseCode.INCONSISTENT_INDEX,
                f"entries {first}+{count} pushed by {leader_id}, expected {index}",
            )
        view = memoryview(data)
        units, entries = view[: count * INDEX_UNIT_SIZE], view[count * INDEX_UNIT_SIZE :]
        if len(units) != count * INDEX_UNIT_SIZE:
            raise DLedgerStoreError(
                DLedgerResponseCode.UNEXPECTED_ARGUMENT,
                f"raw push from {leader_id}: {count} entries need {count} index units",
            )
        mf = self.data.last_writable(0)
        pos = mf.file_from_offset + mf.wrote_position
        if self._raw_in_one_file(units, entries, pos, mf.file_end_offset, leader_term):
            self._write_chunk(mf, entries)
            self._append_index_units(first, units)
            if self.ledger_begin_index == -1:
                self.ledger_begin_index = first
            self.ledger_end_index = first + count - 1
            self.ledger_end_term = _UNIT.unpack_from(units, len(units) - INDEX_UNIT_SIZE)[4]
            return
        self._walk_raw(entries, first, count, leader_term, leader_id)

    def _raw_in_one_file(
        self, units: memoryview, entries: memoryview, pos: int, file_end: int, leader_term: int
    ) -> bool:
        """Whether a raw push's entries fit the current data file at ``pos``, their units
        back to back from there, every entry header as its unit says."""
        first_term = _UNIT.unpack_from(units, 0)[4]
        pos0 = _UNIT.unpack_from(units, 0)[1]
        last_term = _UNIT.unpack_from(units, len(units) - INDEX_UNIT_SIZE)[4]
        return (
            pos0 == pos
            and pos + len(entries) + MIN_BLANK_LEN <= file_end
            and self.ledger_end_term <= first_term <= last_term <= leader_term
            and self._headers_match(units, entries)
        )

    def _walk_raw(
        self, view: memoryview, first: int, count: int, leader_term: int, leader_id: str
    ) -> None:
        """:meth:`append_raw_as_follower` entry by entry (past the end of a data file)."""
        file_size = self.data.file_size
        mf = self.data.last_writable(0)
        rel = mf.wrote_position
        start = at = 0
        index = first
        term = self.ledger_end_term
        units = bytearray()
        head = _HEADER_WITH_LEN.unpack_from
        try:
            while at < len(view):
                if len(view) - at < BODY_OFFSET:
                    raise DLedgerStoreError(
                        DLedgerResponseCode.UNEXPECTED_ARGUMENT,
                        f"raw push from {leader_id}: {len(view) - at} bytes after entry "
                        f"{index - 1} are no entry",
                    )
                magic, size, e_index, e_term, e_pos, _c, _cc, _bc, body_len = head(view, at)
                if (
                    magic != CURRENT_MAGIC
                    or size != BODY_OFFSET + body_len
                    or at + size > len(view)
                    or e_index != index
                    or not term <= e_term <= leader_term
                ):
                    raise DLedgerStoreError(
                        DLedgerResponseCode.INCONSISTENT_STATE,
                        f"raw push from {leader_id}: entry at byte {at} says magic {magic}, "
                        f"size {size}, index {e_index}, term {e_term}; expected entry {index} "
                        f"of a term in [{term}, {leader_term}]",
                    )
                if size + MIN_BLANK_LEN > file_size:
                    raise DLedgerStoreError(
                        DLedgerResponseCode.DISK_ERROR,
                        f"an entry of {size} bytes does not fit a data file of {file_size} bytes",
                    )
                if size + MIN_BLANK_LEN > file_size - rel:
                    self._write_chunk(mf, view[start:at])
                    start = at
                    self._write_chunk(mf, _BLANK.pack(BLANK_MAGIC_CODE, file_size - rel))
                    mf.wrote_position = file_size
                    mf = self.data.last_writable(0)
                    rel = 0
                pos = mf.file_from_offset + rel
                if e_pos != pos:
                    raise DLedgerStoreError(
                        DLedgerResponseCode.DISK_ERROR,
                        f"entry {e_index} belongs at {e_pos} but would land at {pos}; "
                        "do the peers share mappedFileSizeCommitLog?",
                    )
                units += _UNIT.pack(magic, pos, size, e_index, e_term)
                rel += size
                at += size
                index += 1
                term = e_term
            if index - first != count:
                raise DLedgerStoreError(
                    DLedgerResponseCode.UNEXPECTED_ARGUMENT,
                    f"raw push from {leader_id} says {count} entries from {first} and holds "
                    f"{index - first}",
                )
        finally:
            if at > start:
                self._write_chunk(mf, view[start:at])
            if index > first:
                self._append_index_units(first, units)
                if self.ledger_begin_index == -1:
                    self.ledger_begin_index = first
                self.ledger_end_index = index - 1
                self.ledger_end_term = term

    def _lay_down(
        self, entries: Sequence[DLedgerEntry], hook: AppendHook | None, *, assign: bool
    ) -> None:
        """Write ``entries`` with as few writes as the file boundaries allow (a blank closes a
        file that cannot take the next entry plus 8 bytes), then their index units."""
        if not entries:
            return
        file_size = self.data.file_size
        mf = self.data.last_writable(0)
        rel = mf.wrote_position
        chunk = bytearray()
        units = bytearray()
        done: list[DLedgerEntry] = []
        try:
            for entry in entries:
                size = entry.size
                if size + MIN_BLANK_LEN > file_size:
                    raise DLedgerStoreError(
                        DLedgerResponseCode.DISK_ERROR,
                        f"an entry of {size} bytes does not fit a data file of {file_size} bytes",
                    )
                if size + MIN_BLANK_LEN > file_size - rel:
                    remaining = file_size - rel
                    chunk += BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)
                    chunk += remaining.to_bytes(4, "big")
                    self._write_chunk(mf, chunk)
                    mf.wrote_position = file_size
                    chunk = bytearray()
                    mf = self.data.last_writable(0)
                    rel = 0
                pos = mf.file_from_offset + rel
                if assign:
                    entry.pos = pos
                elif entry.pos != pos:
                    raise DLedgerStoreError(
                        DLedgerResponseCode.DISK_ERROR,
                        f"entry {entry.index} belongs at {entry.pos} but would land at {pos}; "
                        "do the peers share mappedFileSizeCommitLog?",
                    )
                if hook is not None:
                    data = entry.encode()
                    hook(entry, data)
                    entry.body = bytes(data[BODY_OFFSET:])
                    chunk += data
                else:  # header and body straight into the chunk: no entry-sized copy between
                    chunk += entry.header()
                    chunk += entry.body
                units += encode_index(pos, size, entry.magic, entry.index, entry.term)
                rel += size
                done.append(entry)
        finally:
            if chunk:
                self._write_chunk(mf, chunk)
            if done:
                self._append_index_units(done[0].index, units[: len(done) * INDEX_UNIT_SIZE])
                if self.ledger_begin_index == -1:
                    self.ledger_begin_index = done[0].index
                self._appended(done[-1])

    def _write_chunk(self, mf: MappedFile, chunk: bytes | bytearray | memoryview) -> None:
        if not mf.append(chunk):
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR, f"{len(chunk)} bytes not written to {mf.path}"
            )

    def _append_index_units(self, first: int, units: bytes | bytearray | memoryview) -> None:
        expected = first * INDEX_UNIT_SIZE
        if self.index.max_offset != expected:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR,
                f"index unit of entry {first} would land at {self.index.max_offset}, not {expected}",
            )
        view = memoryview(units)
        while view:
            mf = self.index.last_writable(self.index.max_offset)
            room = mf.file_size - mf.wrote_position
            mf.append(view[:room])
            view = view[room:]

    def _appended(self, entry: DLedgerEntry) -> None:
        self.ledger_end_index = entry.index
        self.ledger_end_term = entry.term
        if self.ledger_begin_index == -1:
            self.ledger_begin_index = entry.index

    def truncate(self, entry: DLedgerEntry, leader_term: int, leader_id: str) -> int:
        """Make ``entry`` the last entry: cut everything after it (and it, if ours differs),
        then write the leader's copy.  Returns the new end index."""
        try:
            mine = self.get(entry.index)
        except Exception:
            mine = None
        existed = same_entry(entry, mine)
        cut = entry.pos + entry.size if existed else entry.pos
        if not existed and (
            cut > self.data.max_offset
            or entry.index > self.ledger_end_index + 1
            or entry.index < self.ledger_begin_index
            or cut < self.data.min_offset
        ):
            return self._rebuild(entry, leader_term, leader_id)
        if cut != self.data.max_offset:
            log.warning(
                "%s: cutting the log from %d to %d at the word of leader %s (term %d)",
                self.root.name,
                self.data.max_offset,
                cut,
                leader_id,
                leader_term,
            )
        self.data.truncate_dirty(cut)
        self._cut_index(entry.index * INDEX_UNIT_SIZE)
        self.ledger_end_index = entry.index - 1
        if existed:
            self._append_index(entry.magic, entry.pos, entry.size, entry.index, entry.term)
            self._appended(entry)
        else:
            self._lay_down([entry], None, assign=False)
        self.flushed_index = min(self.flushed_index, entry.index - (0 if existed else 1))
        self._revise_begin_index()
        if self.committed_index > entry.index:
            # a committed entry is never cut by a legitimate leader; say so loudly if it is
            log.error(
                "%s: truncated below the committed index %d to %d",
                self.root.name,
                self.committed_index,
                entry.index,
            )
            self.committed_index = entry.index
            self._committed_pos = entry.pos + entry.size
        return entry.index

    def _rebuild(self, entry: DLedgerEntry, leader_term: int, leader_id: str) -> int:
        """This log and the leader's do not overlap (an empty or long-gone follower, the leader
        having deleted what it would need): start over with the leader's ``entry`` as the
        first, at its own position and index (DLedger's rebuild with the position)."""
        held = (
            f"entries {self.ledger_begin_index}-{self.ledger_end_index}"
            if self.ledger_end_index >= 0
            else "empty"
        )
        log.warning(
            "%s: the log (%s) cannot follow leader %s (term %d) at entry %d, "
            "position %d: starting the log again from there",
            self.root.name,
            held,
            leader_id,
            leader_term,
            entry.index,
            entry.pos,
        )
        self.data.destroy_all()
        self.index.destroy_all()
        self._rebuild_at(self.data, entry.pos)
        self._rebuild_at(self.index, entry.index * INDEX_UNIT_SIZE)
        self.ledger_begin_index = self.ledger_end_index = -1
        self.ledger_end_term = -1
        self._lay_down([entry], None, assign=False)
        self.flushed_index = -1
        if self.committed_index > entry.index:
            log.error(
                "%s: rebuilt below the committed index %d at %d",
                self.root.name,
                self.committed_index,
                entry.index,
            )
        if self.committed_index != entry.index:
            # the leader deletes only what it committed: everything before its first entry was
            self.committed_index = entry.index - 1
            self._committed_pos = entry.pos
        return entry.index

    def delete_expired(
        self, expired_before_ms: float, limit_pos: int, at_most: int | None = None
    ) -> int:
        """Retention: delete leading data files last modified before ``expired_before_ms``
        that end at or before ``limit_pos`` (never the last), then the index files that only
        hold units of deleted entries; the begin index moves to the first entry kept."""
        count = self.data.expired_files(expired_before_ms, limit_pos, at_most)
        if not count:
            return 0
        for mf in self.data.files[:count]:
            log.info("retention: deleting %s", mf.path)
        self.data.delete_first(count)
        self._revise_begin_index()
        below = self.ledger_begin_index * INDEX_UNIT_SIZE
        stale = 0
        for mf in self.index.files[:-1]:
            if mf.file_end_offset > below:
                break
            stale += 1
        if stale:
            self.index.delete_first(stale)
        return count

    # -- reads -----------------------------------------------------------------------------------
    def _pos_and_size(self, index: int) -> tuple[int, int] | None:
        if index < 0 or index < self.ledger_begin_index or index > self.ledger_end_index:
            return None
        unit = self._index_unit(index)
        if unit is None:
            return None
        return unit[1], unit[2]

    def get(self, index: int) -> DLedgerEntry | None:
        """The entry at ``index``, or None outside [ledger begin, ledger end]."""
        where = self._pos_and_size(index)
        if where is None:
            return None
        pos, size = where
        data = self._slice(pos, size)
        if data is None:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR, f"entry {index} at {pos} unreadable"
            )
        entry = decode(data)
        if entry.pos != pos or entry.index != index:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR,
                f"entry {index}: index unit says pos {pos}, the entry says {entry.pos}/{entry.index}",
            )
        return entry

    def raw_entries(self, first: int, max_count: int, max_bytes: int) -> list[memoryview]:
        """Entries from ``first`` (at most ``max_count``, about ``max_bytes``) as views of
        the data files: read them before anything is appended or cut.  The first is looked up
        by its index unit; the rest are walked in the data files (past blanks at file ends),
        each header checked for the index and position the walk expects."""
        out: list[memoryview] = []
        last = min(self.ledger_end_index, first + max_count - 1)
        where = self._pos_and_size(first)
        if where is None or first > last:
            return out
        pos = where[0]
        size_sum = 0
        index = first
        head = _ENTRY_HEAD.unpack_from
        find = self.data.find
        mf = find(pos)
        while mf is not None and index <= last and size_sum < max_bytes:
            view = mf.view
            wrote = mf.wrote_position
            rel = pos - mf.file_from_offset
            if rel + BODY_OFFSET <= wrote:
                magic, size, at_index, _term, at_pos = head(view, rel)
            elif rel + MIN_BLANK_LEN <= wrote:
                magic = _BLANK.unpack_from(view, rel)[0]
            else:
                break  # the file ends without a blank: nothing more was written
            if magic == BLANK_MAGIC_CODE:
                pos = mf.file_end_offset
                mf = find(pos)
                continue
            if at_index != index or at_pos != pos or size < BODY_OFFSET or rel + size > wrote:
                raise DLedgerStoreError(
                    DLedgerResponseCode.DISK_ERROR,
                    f"entry {index} not at {pos} where the walk from {first} expects it",
                )
            out.append(view[rel : rel + size])
            size_sum += size
            pos += size
            index += 1
        return out

    def _slice(self, pos: int, size: int) -> memoryview | None:
        mf = self.data.find(pos)
        if mf is None:
            return None
        rel = pos - mf.file_from_offset
        if rel + size > mf.wrote_position:
            return None
        return mf.view[rel : rel + size]

    def read_data(self, pos: int, size: int) -> bytes | None:
        """``size`` bytes at ``pos`` within one data file (a copy: files may be cut later)."""
        data = self._slice(pos, size)
        return None if data is None else bytes(data)

    # -- commit and flush ------------------------------------------------------------------------
    def update_committed_index(self, term: int, index: int) -> None:
        if (
            index == -1
            or self.ledger_end_index == -1
            or term < self.current_term()
            or index == self.committed_index
        ):
            return
        if index < self.committed_index or index < self.ledger_begin_index:
            log.warning(
                "%s: committed index %d not moved back to %d",
                self.root.name,
                self.committed_index,
                index,
            )
            return
        index = min(index, self.ledger_end_index)
        where = self._pos_and_size(index)
        if where is None:
            raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"no index unit for {index}")
        self.committed_index = index
        self._committed_pos = where[0] + where[1]

    def flush(self) -> None:
        end = self.ledger_end_index
        self.data.flush_blocking()
        self.index.flush_blocking()
        self.flushed_index = max(self.flushed_index, end)

    async def flush_async(self) -> None:
        end = self.ledger_end_index
        cuts = self.data.cuts, self.index.cuts
        await self.data.flush()
        await self.index.flush()
        if (self.data.cuts, self.index.cuts) == cuts:  # not cut (nor rebuilt) meanwhile
            self.flushed_index = max(self.flushed_index, end)

    def persist_checkpoint(self) -> None:
        """``endIndex`` and ``committedIndex`` as Java properties, replaced atomically; not
        rewritten (an fsync and a rename) while both are what it last wrote: an idle peer."""
        path = self.root / CHECKPOINT
        text = f"{END_INDEX_KEY}={self.ledger_end_index}\n{COMMITTED_INDEX_KEY}={self.committed_index}\n"
        if text == self._checkpoint_written:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(CHECKPOINT + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        self._checkpoint_written = text

    def close(self) -> None:
        self.data.close()
        self.index.close()
