"""Retention of DLedger data files, and what follows from it: the begin index moves to the
first entry kept, index files of deleted entries go, recovery finds the same log, and a peer
whose log does not reach the leader's first entry starts its log again there (at the same
positions, so entries stay byte-identical across peers) and indexes from there."""

from __future__ import annotations

import os
import time
from pathlib import Path

from habroker.dledger.commit_log import DLedgerCommitLog, DLedgerReput
from habroker.dledger.entry import INDEX_UNIT_SIZE
from habroker.dledger.message_store import _patch_physical_offset
from habroker.dledger.mmap_file_store import DLedgerMmapFileStore
from habroker.message import encode_record, parse_record

from .test_dledger_store import FILE, open_store

HOUR_MS = 3_600_000


def leader_log(root: Path, count: int = 120) -> DLedgerMmapFileStore:
    store = open_store(root)
    store.current_term = lambda: 1
    records = [
        encode_record(topic="t", queue_id=0, body=bytes([i % 251]) * (90 + i % 40), queue_offset=i)
        for i in range(count)
    ]
    store.append_batch_as_leader(records, 1, _patch_physical_offset)
    store.update_committed_index(1, count - 1)
    return store


def age_all_but_last(store: DLedgerMmapFileStore, hours: float = 3) -> None:
    old = time.time() - hours * 3600
    for mf in store.data.files[:-1]:
        os.utime(mf.path, (old, old))


def now_ms() -> float:
    return time.time() * 1000


def test_expired_files_go_and_the_log_begins_at_the_first_entry_kept(tmp_path: Path) -> None:
    store = leader_log(tmp_path)
    files = len(store.data.files)
    assert files > 4
    end = store.ledger_end_index
    # fresh files are kept whatever the limit
    assert store.delete_expired(now_ms() - HOUR_MS, store.data_end_pos) == 0
    age_all_but_last(store)
    # only files ending at or before the limit (what is committed, flushed and indexed)
    limit = store.data.files[2].file_end_offset
    assert store.delete_expired(now_ms() - HOUR_MS, limit) == 3
    first = store.data.files[0]
    begin = store.ledger_begin_index
    entry = store.get(begin)
    assert entry is not None and entry.pos == first.file_from_offset
    assert store.get(begin - 1) is None
    assert store.ledger_end_index == end
    assert store.index.min_offset <= begin * INDEX_UNIT_SIZE < store.index.min_offset + 32 * 64
    # the rest but the last file
    assert store.delete_expired(now_ms() - HOUR_MS, store.data_end_pos) == files - 4
    assert len(store.data.files) == 1
    begin = store.ledger_begin_index
    kept = [store.get(i) for i in range(begin, end + 1)]
    store.close()
    again = open_store(tmp_path)
    assert (again.ledger_begin_index, again.ledger_end_index) == (begin, end)
    assert [again.get(i) for i in range(begin, end + 1)] == kept


def test_a_follower_behind_the_leaders_first_entry_starts_again_there(tmp_path: Path) -> None:
    leader = leader_log(tmp_path / "leader")
    age_all_but_last(leader)
    assert leader.delete_expired(now_ms() - HOUR_MS, leader.data.files[3].file_end_offset) == 4
    begin, end = leader.ledger_begin_index, leader.ledger_end_index
    first = leader.get(begin)
    assert first is not None and begin > 0

    for name, had in (("empty", 0), ("behind", 5)):
        follower = open_store(tmp_path / name)
        if had:  # a follower that went away long ago with the first entries
            other = leader_log(tmp_path / f"{name}-source", had)
            for i in range(had):
                e = other.get(i)
                assert e is not None
                follower.append_as_follower(e, 1, "n0")
            other.close()
        assert follower.truncate(first, 1, "n0") == begin
        rest = [leader.get(i) for i in range(begin + 1, end + 1)]
        follower.append_batch_as_follower([e for e in rest if e is not None], 1, "n0")
        assert (follower.ledger_begin_index, follower.ledger_end_index) == (begin, end)
        for i in range(begin, end + 1):
            mine, theirs = follower.get(i), leader.get(i)
            assert mine is not None and theirs is not None
            assert follower.read_data(mine.pos, mine.size) == leader.read_data(
                theirs.pos, theirs.size
            )
            assert mine.pos == theirs.pos
        assert follower.get(begin - 1) is None
        follower.update_committed_index(1, end)
        # the follower's dispatcher had indexed nothing (or entries now gone): it goes on from
        # the first entry
        dispatched: list[object] = []
        reput = DLedgerReput(DLedgerCommitLog(follower, FILE), dispatched.append)
        reput.start_after(-1)
        reput.dispatched_index = had - 1
        reput.do_reput()
        expected = [parse_record(e.body, 0, False) for e in [first, *rest] if e is not None]
        assert dispatched == expected
        follower.close()
        again = open_store(tmp_path / name)  # recovery finds the log that starts mid-file
        assert (again.ledger_begin_index, again.ledger_end_index) == (begin, end)
        assert again.get(begin) == first
        again.close()
