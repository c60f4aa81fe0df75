"""DLedgerMmapFileStore on real files: the entry and index layout, blanks at file ends,
recovery (a missing index unit rebuilt, a torn tail cut), truncation and the checkpoint."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from habroker.dledger.commit_log import (
    PARTS_PER_ENTRY,
    DLedgerCommitLog,
    DLedgerReput,
    encode_entries,
)
from habroker.dledger.entry import (
    BODY_OFFSET,
    INDEX_UNIT_SIZE,
    DLedgerEntry,
    decode,
    entries_json,
    from_json_dict,
    same_entry,
    to_json_dict,
)
from habroker.dledger.message_store import _patch_physical_offset
from habroker.dledger.mmap_file_store import DLedgerMmapFileStore, DLedgerStoreError
from habroker.dledger.protocol import encode
from habroker.message import encode_record, parse_record
from habroker.store.commit_log import encode_records_py as encode_records
from habroker.store.values import BatchEntry

FILE = 4096


def open_store(root: Path, *, size: int = FILE) -> DLedgerMmapFileStore:
    store = DLedgerMmapFileStore(root, "n0", data_file_size=size, index_file_size=32 * 64)
    store.recover()
    return store


def fill(store: DLedgerMmapFileStore, count: int, term: int = 1, size: int = 100) -> None:
    for i in range(count):
        store.append_as_leader(bytes([i % 251]) * size, term)


def test_entries_and_index_units_are_laid_out_as_dledger_writes_them(tmp_path):
    store = open_store(tmp_path)
    patched: list[int] = []

    def hook(entry: DLedgerEntry, data: bytearray) -> None:
        patched.append(entry.pos)
        struct.pack_into(">q", data, BODY_OFFSET, entry.pos + BODY_OFFSET)

    first = store.append_as_leader(b"\0" * 8 + b"hello", 3, hook)
    second = store.append_as_leader(b"\0" * 8 + b"world", 3, hook)
    store.close()
    data = (tmp_path / "dledger-n0" / "data" / f"{0:020d}").read_bytes()
    assert len(data) == FILE
    header = struct.unpack_from(">iiqqqiiii", data, 0)
    assert header == (1, 61, 0, 3, 0, 0, 0, 0, 13)
    assert data[48:56] == struct.pack(">q", 48), "the hook wrote the record's offset"
    assert struct.unpack_from(">iiqqq", data, 61)[:5] == (1, 61, 1, 3, 61)
    index = (tmp_path / "dledger-n0" / "index" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">iqiqq", index, 0) == (1, 0, 61, 0, 3)
    assert struct.unpack_from(">iqiqq", index, 32) == (1, 61, 61, 1, 3)
    assert patched == [0, 61] and (first.pos, second.pos) == (0, 61)
    assert second.body[:8] == struct.pack(">q", 61 + 48)


def test_a_batch_appended_to_an_empty_log_begins_at_its_first_entry(tmp_path):
    store = open_store(tmp_path)
    entries = store.append_batch_as_leader([b"a", b"b", b"c"], 1)
    assert [e.index for e in entries] == [0, 1, 2]
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, 2)
    follower = DLedgerMmapFileStore(tmp_path / "f", "n1", data_file_size=FILE)
    follower.recover()
    follower.append_batch_as_follower(entries, 1, "n0")
    assert (follower.ledger_begin_index, follower.ledger_end_index) == (0, 2)
    assert [follower.get(i) for i in range(3)] == entries


def test_a_file_without_room_for_the_entry_and_8_bytes_ends_with_a_blank(tmp_path):
    store = open_store(tmp_path)
    fill(store, 30, size=100)  # 148 bytes each: 27 fit in 4096 with 8 to spare
    last_in_first = max(i for i in range(30) if store.get(i).pos < FILE)  # type: ignore[union-attr]
    end = store.get(last_in_first).pos + 148  # type: ignore[union-attr]
    store.close()
    data = (tmp_path / "dledger-n0" / "data" / f"{0:020d}").read_bytes()
    assert struct.unpack_from(">ii", data, end) == (-1, FILE - end)
    again = open_store(tmp_path)
    assert (again.ledger_begin_index, again.ledger_end_index) == (0, 29)
    assert again.get(last_in_first + 1).pos == FILE  # type: ignore[union-attr]
    assert [again.get(i).body[0] for i in range(30)] == list(range(30))  # type: ignore[union-attr]


def test_an_entry_written_before_its_index_unit_is_kept_by_recovery(tmp_path):
    store = open_store(tmp_path)
    fill(store, 5)
    store.close()
    index_file = tmp_path / "dledger-n0" / "index" / f"{0:020d}"
    with open(index_file, "r+b") as fh:  # as if killed between the data and the index write
        fh.seek(4 * INDEX_UNIT_SIZE)
        fh.write(bytes(INDEX_UNIT_SIZE))
    again = open_store(tmp_path)
    assert again.ledger_end_index == 4
    assert again.get(4).body == bytes([4]) * 100  # type: ignore[union-attr]


def test_a_torn_tail_is_cut_at_the_last_whole_entry(tmp_path):
    store = open_store(tmp_path)
    fill(store, 6)
    torn_at = store.get(5).pos  # type: ignore[union-attr]
    store.close()
    data_file = tmp_path / "dledger-n0" / "data" / f"{0:020d}"
    with open(data_file, "r+b") as fh:  # half a header: a size that does not add up
        fh.seek(torn_at + 4)
        fh.write(struct.pack(">i", 7))
    again = open_store(tmp_path)
    assert again.ledger_end_index == 4
    assert again.data_end_pos == torn_at
    assert again.append_as_leader(b"next", 2).index == 5


def test_truncate_cuts_a_divergent_tail_and_writes_the_leaders_entry(tmp_path):
    store = open_store(tmp_path)
    fill(store, 5, term=1)
    fill(store, 3, term=2)  # 5..7, an old leader's uncommitted tail
    store.update_committed_index(1, 4)
    leaders = DLedgerEntry(5, 3, b"leader's five", pos=store.get(5).pos)  # type: ignore[union-attr]
    assert store.truncate(leaders, 3, "n1") == 5
    assert (store.ledger_end_index, store.ledger_end_term) == (5, 3)
    assert store.get(5) == leaders
    assert store.get(6) is None
    follow = DLedgerEntry(6, 3, b"six", pos=leaders.pos + leaders.size)
    store.append_as_follower(follow, 3, "n1")
    with pytest.raises(DLedgerStoreError, match="INCONSISTENT_INDEX"):
        store.append_as_follower(DLedgerEntry(9, 3, b"gap", pos=0), 3, "n1")
    store.close()
    again = open_store(tmp_path)
    assert again.ledger_end_index == 6 and again.get(6).body == b"six"  # type: ignore[union-attr]


def test_committed_index_never_goes_back_and_survives_a_restart(tmp_path):
    store = open_store(tmp_path)
    fill(store, 10)
    store.update_committed_index(1, 7)
    store.update_committed_index(1, 3)
    assert store.committed_index == 7
    assert store.committed_pos == store.get(7).pos + store.get(7).size  # type: ignore[union-attr]
    store.update_committed_index(1, 99)  # beyond the end: capped at the end
    assert store.committed_index == 9
    store.flush()
    store.persist_checkpoint()
    store.close()
    text = (tmp_path / "dledger-n0" / "checkpoint").read_text()
    assert sorted(text.split()) == ["committedIndex=9", "endIndex=9"]
    again = open_store(tmp_path)
    assert again.committed_index == 9


def test_an_entry_as_json_round_trips_and_decodes_from_disk(tmp_path):
    store = open_store(tmp_path)
    entry = store.append_as_leader(b"payload", 4)
    as_json = to_json_dict(entry)
    assert as_json["body"] == "cGF5bG9hZA==" and as_json["size"] == 55
    assert from_json_dict(as_json) == entry
    raw = store.read_data(entry.pos, entry.size)
    assert raw is not None and decode(raw) == entry
    store.close()


def test_a_push_built_from_the_files_is_the_json_of_its_entries(tmp_path):
    store = open_store(tmp_path)
    entries = store.append_batch_as_leader([b"one", bytes(range(256)), b""], 7)
    body = {"group": "g", "type": "APPEND", "entry": None, "commitIndex": 1, "term": 7}
    built = encode({**body, "batchEntry": entries_json(store.raw_entries(0, 64, 1 << 20))})
    plain = encode({**body, "batchEntry": [to_json_dict(e) for e in entries]})
    assert built == plain
    assert json.loads(built)["batchEntry"][1]["size"] == 48 + 256
    assert len(store.raw_entries(1, 1, 1 << 20)) == 1
    store.close()


def test_a_data_file_of_the_wrong_size_stops_recovery_with_its_name(tmp_path):
    store = open_store(tmp_path)
    fill(store, 2)
    store.close()
    data_file = tmp_path / "dledger-n0" / "data" / f"{0:020d}"
    os.truncate(data_file, 100)
    with pytest.raises(Exception, match=str(data_file)):
        open_store(tmp_path)


def test_dispatch_walks_the_files_across_blanks_as_an_index_lookup_would(tmp_path):
    """DLedgerReput walks the data files (blanks at file ends included) and dispatches exactly
    what looking each committed entry up by index gives, commit by commit, after a restart,
    and after the uncommitted tail was cut and rewritten."""
    store = open_store(tmp_path)
    store.current_term = lambda: 1
    bodies = [
        encode_record(topic="t", queue_id=0, body=bytes([i]) * (150 + 37 * (i % 7)), queue_offset=i)
        for i in range(60)
    ]
    store.append_batch_as_leader(bodies[:40], 1, _patch_physical_offset)
    assert len(store.data.files) > 3, "the entries must cross files (and blanks)"
    dispatched: list[tuple[object, ...]] = []
    reput = DLedgerReput(DLedgerCommitLog(store, FILE), dispatched.append)
    reput.start_after(-1)

    def by_index(upto: int) -> list[tuple[object, ...]]:
        out = []
        for i in range(upto + 1):
            entry = store.get(i)
            assert entry is not None
            parsed = parse_record(entry.body, 0, False)
            assert isinstance(parsed, tuple)
            out.append(parsed)
        return out

    for upto in (0, 7, 8, 25, 39):
        store.update_committed_index(1, upto)
        reput.do_reput()
        assert reput.dispatched_index == upto
        assert dispatched == by_index(upto)
    # the uncommitted tail is cut and the leader's entries written again: the walk goes on
    store.append_batch_as_leader(bodies[40:50], 1, _patch_physical_offset)
    tail = store.get(45)
    assert tail is not None
    store.truncate(tail, 1, "n0")
    store.append_batch_as_leader(bodies[46:60], 1, _patch_physical_offset)
    store.update_committed_index(1, 59)
    reput.do_reput()
    expected = by_index(59)
    assert dispatched == expected and reput.dispatched_index == 59
    # a restart: resume after what the consume queues already covered (PHYSICALOFFSET + size)
    again = DLedgerReput(DLedgerCommitLog(store, FILE), dispatched.append)
    covered = expected[29]
    covered_end = covered[2] + covered[3]
    again.start_after(covered_end)
    dispatched.clear()
    again.do_reput()
    # (start_after resumes at the last covered entry; the consume queue drops that duplicate)
    assert [d for d in dispatched if d[2] >= covered_end] == expected[30:]
    assert len(dispatched) - len(expected[30:]) <= 1


def _leader_batches() -> list[list[BatchEntry]]:
    """Batches of records of uneven sizes, some with properties, enough to cross files."""
    batches = []
    for b in range(6):
        batch = []
        for i in range(1 + 7 * (b % 3)):
            props = b"KEYS\x01k%d\x02" % i if i % 3 == 0 else b""
            batch.append(BatchEntry(i % 2, bytes([b * 16 + i]) * (90 + 53 * ((b + i) % 5)), props))
        batches.append(batch)
    return batches


def test_entries_encoded_in_one_pass_are_the_bytes_the_append_hook_writes(tmp_path):
    """The leader's produce path (entry and record headers packed together, PHYSICALOFFSET =
    position + 48, one pwritev per file) writes data and index files byte-identical to entries
    appended one object each with RocketMQ's append hook, blanks at file ends included, and
    the log recovers to the same end."""
    topic_tail = b"\x05topic"
    shared = (
        struct.pack(">iq", 0, 1_700_000_000_000)
        + bytes([127, 0, 0, 1])
        + struct.pack(">iq", 5555, 1_700_000_000_001)
        + bytes([127, 0, 0, 1])
        + struct.pack(">iiq", 10911, 0, 0)
    )
    assert len(shared) == 48
    record_base = 74 + 8 + 8 + 1 + 5
    hooked = open_store(tmp_path / "hooked")
    fast = open_store(tmp_path / "fast")
    queue_offset = 0

    def append_both(batch: list[BatchEntry], term: int) -> None:
        nonlocal queue_offset
        parts, _ = encode_records(topic_tail, 3, batch, queue_offset, shared, record_base, 0)
        bodies = [b"".join(parts[i : i + 3]) for i in range(0, len(parts), 3)]
        expected = hooked.append_batch_as_leader(bodies, term, _patch_physical_offset)
        sizes = [record_base + len(e.body) + len(e.properties) for e in batch]
        first, positions = fast.append_encoded_as_leader(
            term,
            [BODY_OFFSET + s for s in sizes],
            lambda t, f, where: encode_entries(
                topic_tail, 3, batch, sizes, queue_offset, shared, t, f, where
            ),
            PARTS_PER_ENTRY,
        )
        assert first == expected[0].index
        assert positions == [e.pos for e in expected]
        queue_offset += len(batch)

    for term, batch in enumerate(_leader_batches(), start=1):
        append_both(batch, term)
    # a batch whose first entry does not fit the rest of the file: it opens the next one
    room = FILE - fast.data.files[-1].wrote_position
    body_len = room - BODY_OFFSET - record_base + 1
    assert body_len > 0
    before = len(fast.data.files)
    append_both([BatchEntry(0, b"f" * body_len, b""), BatchEntry(0, b"g" * 50, b"")], 7)
    assert len(fast.data.files) == before + 1
    assert fast.get(fast.ledger_end_index - 1).pos == fast.data.files[-1].file_from_offset
    assert len(fast.data.files) > 3, "the entries must cross files (and blanks)"
    assert (fast.ledger_begin_index, fast.ledger_end_index, fast.ledger_end_term) == (
        hooked.ledger_begin_index,
        hooked.ledger_end_index,
        hooked.ledger_end_term,
    )
    for i in range(hooked.ledger_end_index + 1):
        mine, theirs = fast.get(i), hooked.get(i)
        assert mine is not None and same_entry(mine, theirs)
        parsed = parse_record(mine.body, 0, False)
        assert isinstance(parsed, tuple) and parsed[2] == mine.pos + BODY_OFFSET
    hooked.close()
    fast.close()
    for sub in ("data", "index"):
        names = sorted(p.name for p in (tmp_path / "hooked" / "dledger-n0" / sub).iterdir())
        assert names == sorted(p.name for p in (tmp_path / "fast" / "dledger-n0" / sub).iterdir())
        for name in names:
            a = (tmp_path / "hooked" / "dledger-n0" / sub / name).read_bytes()
            b = (tmp_path / "fast" / "dledger-n0" / sub / name).read_bytes()
            assert a == b, f"{sub}/{name} differs"
    again = open_store(tmp_path / "fast")
    assert again.ledger_end_index == queue_offset - 1


def test_push_entries_walked_in_the_files_are_the_entries_each_index_unit_points_to(tmp_path):
    """raw_entries looks the first entry up and walks the data files for the rest, past the
    blanks that end files, and stops at the count, the byte budget and the log's end; after the
    tail is cut and rewritten it reads the new entries."""
    store = open_store(tmp_path)
    store.append_batch_as_leader([bytes([i]) * (100 + 61 * (i % 9)) for i in range(50)], 1)
    assert len(store.data.files) > 3

    def by_index(first: int, count: int) -> list[bytes]:
        out = []
        for i in range(first, min(first + count, store.ledger_end_index + 1)):
            entry = store.get(i)
            assert entry is not None
            out.append(bytes(entry.header()) + entry.body)
        return out

    for first in (0, 1, 5, 17, 30, 49):
        for count in (1, 3, 64):
            got = [bytes(v) for v in store.raw_entries(first, count, 1 << 20)]
            assert got == by_index(first, count), (first, count)
    # 148 + 209 + 270 + 331 = 958 bytes are under the budget: a fifth entry goes, no sixth
    assert len(store.raw_entries(0, 64, 1000)) == 5, "stops once the byte budget is reached"
    assert store.raw_entries(50, 64, 1 << 20) == []
    tail = store.get(20)
    assert tail is not None
    store.truncate(tail, 2, "n1")
    store.append_batch_as_leader([b"new" * (i + 1) for i in range(10)], 2)
    got = [bytes(v) for v in store.raw_entries(15, 64, 1 << 20)]
    assert got == by_index(15, 64) and len(got) == 16
    assert [decode(v).body for v in store.raw_entries(21, 2, 1 << 20)] == [b"new", b"newnew"]
