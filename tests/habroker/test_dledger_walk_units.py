"""A commit log indexed by the compiled walk (``walk_entries`` for committed DLedger entries,
``walk_records`` for a classic slave's replicated records → runs of units →
``ConsumeQueue.put_units``) must give the consume queues exactly what the one-by-one path
gives (parse each record, ``put_unit`` each unit): the same units at the same queue offsets,
the same skips, the same place to go on from. Both run over the same real files."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from habroker.dledger.commit_log import DLedgerCommitLog, DLedgerReput
from habroker.dledger.message_store import _patch_physical_offset
from habroker.message import (
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_V1,
    MAGIC_V2,
    SCHEDULE_TOPIC,
    TRANSACTION_TYPE_MASK,
    DispatchTuple,
    blank_record,
    encode_record,
    parse_record,
)
from habroker.store import native
from habroker.store.commit_log import CommitLog
from habroker.store.consume_queue import UNIT, ConsumeQueue
from habroker.store.dispatcher import ReputMessageService
from hypothesis import given, settings
from hypothesis import strategies as st

from .test_dledger_store import FILE, open_store

pytestmark = pytest.mark.skipif(
    native.walk_entries is None, reason="the compiled record codec is not built here"
)

PROPS = [
    b"",
    b"TAGS\x01TagA\x02",
    b"UNIQ_KEY\x01abc\x02TAGS\x01new\x02KEYS\x01k1\x02",
    "TAGS\x01タグ\x02".encode(),  # non-ASCII: the Python tags code
    b"TAGS\x01a\x02TAGS\x01b\x02",  # repeated: the Python tags code
    b"DELAY\x013\x02TAGS\x01x\x02",
]
TRAN = [0, 0, 0, 0x004, 0x008, 0x00C]  # none, prepared, commit, rollback


def _bodies(rng: random.Random, count: int) -> list[bytes]:
    """Records of a few topics and queues, queue offsets mostly consecutive (some repeated or
    skipped), some transaction halves, a few entries that hold no record at all."""
    next_offset: dict[tuple[str, int], int] = {}
    out = []
    for _ in range(count):
        if rng.random() < 0.04:
            out.append(rng.randbytes(rng.randint(100, 300)))  # no message record
            continue
        topic = rng.choice(("T", "T", "U", "a-long-topic-name", SCHEDULE_TOPIC))
        queue_id = rng.choice((0, 0, 1, 2))
        key = (topic, queue_id)
        offset = next_offset.get(key, rng.randint(0, 5)) + rng.choice((0, 0, 0, 0, 0, -1, 1))
        next_offset[key] = max(offset, 0) + 1
        out.append(
            encode_record(
                topic=topic,
                queue_id=queue_id,
                body=bytes([len(out) % 251]) * rng.randint(0, 600),
                properties=rng.choice(PROPS),
                queue_offset=max(offset, 0),
                sys_flag=rng.choice(TRAN),
                store_timestamp=1_700_000_000_000 + len(out),
                magic=rng.choice((MAGIC_V2, MAGIC_V1, MAGIC_V1, MAGIC_V1)),
            )
        )
    return out


def _queues(root: Path) -> tuple[dict[tuple[str, int], ConsumeQueue], Any, Any]:
    """Consume queues made on first use, fed one unit or one run at a time."""
    queues: dict[tuple[str, int], ConsumeQueue] = {}

    def queue(topic: str, queue_id: int) -> ConsumeQueue:
        if (topic, queue_id) not in queues:
            queues[(topic, queue_id)] = ConsumeQueue(
                topic, queue_id, root / "cq" / topic / str(queue_id), 20 * 16
            )
        return queues[(topic, queue_id)]

    def dispatch(unit: DispatchTuple) -> None:
        topic, queue_id, phys, size, tags, _ts, queue_offset, sys_flag = unit
        tran = sys_flag & TRANSACTION_TYPE_MASK
        if not tran or tran == 0x008:
            queue(topic, queue_id).put_unit(phys, size, tags, queue_offset)

    def dispatch_units(topic: str, queue_id: int, first: int, units: bytes, end: int) -> None:
        queue(topic, queue_id).put_units(units, first, end)

    return queues, dispatch, dispatch_units


def _files(queues: dict[tuple[str, int], ConsumeQueue]) -> dict[tuple[str, int], bytes]:
    return {
        key: b"".join(bytes(mf.view[: mf.wrote_position]) for mf in cq.queue.files)
        for key, cq in queues.items()
    }


def _index(root: Path, bodies: list[bytes], committed: int, units: bool) -> tuple:
    """Everything the walk leaves behind: each queue's file bytes and where the walk stopped."""
    store = open_store(root / "log")
    store.current_term = lambda: 1
    for at in range(0, len(bodies), 7):
        store.append_batch_as_leader(bodies[at : at + 7], 1, _patch_physical_offset)
    queues, dispatch, dispatch_units = _queues(root)
    reput = DLedgerReput(
        DLedgerCommitLog(store, FILE), dispatch, dispatch_units=dispatch_units if units else None
    )
    reput.start_after(-1)
    store.update_committed_index(1, committed)
    count = reput.do_reput()
    files = _files(queues)
    state = (count, reput.dispatched_index, reput.reput_from_offset, reput.last_store_timestamp)
    store.close()
    return files, state


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 120), cut=st.integers(0, 130))
def test_the_compiled_walk_indexes_what_the_entry_by_entry_path_does(
    tmp_path_factory: pytest.TempPathFactory, seed: int, count: int, cut: int
) -> None:
    bodies = _bodies(random.Random(seed), count)
    committed = min(cut, count - 1)  # not all committed: the walk stops at the commit point
    root = tmp_path_factory.mktemp("walk")
    by_entry = _index(root / "entry", bodies, committed, units=False)
    compiled = _index(root / "units", bodies, committed, units=True)
    assert compiled == by_entry


def test_runs_cover_consecutive_queue_offsets_of_one_queue(tmp_path: Path) -> None:
    """What the walk hands on: one run per stretch of one queue, none past the commit point."""
    store = open_store(tmp_path)
    store.current_term = lambda: 1
    bodies = [
        encode_record(topic=t, queue_id=q, body=b"x" * 100, queue_offset=o, properties=p)
        for t, q, o, p in [
            ("T", 0, 0, b"TAGS\x01TagA\x02"),
            ("T", 0, 1, b""),
            ("T", 0, 2, b""),
            ("T", 1, 0, b""),  # another queue
            ("U", 1, 1, b""),  # another topic
            ("U", 1, 3, b""),  # a gap
            ("U", 1, 4, b""),
            ("U", 1, 5, b""),  # not committed
        ]
    ]
    store.append_batch_as_leader(bodies, 1, _patch_physical_offset)
    store.update_committed_index(1, 6)
    first = store.get(0)
    assert first is not None
    mf = store.data.find(first.pos)
    assert mf is not None and native.walk_entries is not None
    count, walked, last_ts, runs = native.walk_entries(
        mf.view, first.pos - mf.file_from_offset, mf.wrote_position, first.pos, 0, 6, ()
    )
    entries = [store.get(i) for i in range(7)]
    assert count == 7 and walked == sum(e.size for e in entries if e is not None)
    assert [(t, q, o, len(u) // 20) for t, q, o, u, _end in runs] == [
        ("T", 0, 0, 3),
        ("T", 1, 0, 1),
        ("U", 1, 1, 1),
        ("U", 1, 3, 2),
    ]
    phys, size, tags = UNIT.unpack_from(runs[0][3], 0)
    assert (phys, size, tags) == (first.pos + 48, len(bodies[0]), 2598919)  # "TagA".hashCode()
    last = entries[6]
    assert last is not None and runs[-1][4] == last.pos + last.size
    assert last_ts == 0


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.tuples(
            st.integers(0, 40),  # first queue offset
            st.integers(0, 4000),  # first record's offset
            st.lists(st.tuples(st.integers(1, 300), st.integers(-(2**40), 2**40)), max_size=20),
        ),
        max_size=12,
    )
)
def test_put_units_writes_what_put_unit_writes(
    tmp_path_factory: pytest.TempPathFactory, runs: list[tuple[int, int, list[tuple[int, int]]]]
) -> None:
    """Runs that follow on, overlap (units the queue has), go back in the commit log or leave
    gaps, across file ends: the bytes and the dedup mark are put_unit's."""
    root = tmp_path_factory.mktemp("cq")
    bulk = ConsumeQueue("T", 0, root / "bulk", 20 * 16)
    single = ConsumeQueue("T", 0, root / "single", 20 * 16)
    for first_offset, phys, sizes in runs:
        units = b""
        for i, (size, tags) in enumerate(sizes):
            units += UNIT.pack(phys, size, tags)
            single.put_unit(phys, size, tags, first_offset + i)
            phys += size
        bulk.put_units(units, first_offset, phys)
        assert bulk.max_physic_offset == single.max_physic_offset
    assert [bytes(mf.view[: mf.wrote_position]) for mf in bulk.queue.files] == [
        bytes(mf.view[: mf.wrote_position]) for mf in single.queue.files
    ]


def _classic_log(bodies: list[bytes], file_size: int) -> bytes:
    """The records as a master lays them out: PHYSICALOFFSET patched, a BLANK before a record
    that would leave fewer than 8 bytes in its file."""
    out = bytearray()
    for body in bodies:
        room = file_size - len(out) % file_size
        if len(body) + END_FILE_MIN_BLANK_LENGTH > room:
            out += blank_record(room) + bytes(room - END_FILE_MIN_BLANK_LENGTH)
        record = bytearray(body)
        if len(record) >= 36:
            record[28:36] = len(out).to_bytes(8, "big")
        out += record
    return bytes(out)


def _replicate(root: Path, log: bytes, chunks: list[int], units: bool, file_size: int) -> tuple:
    """A slave's commit log filled chunk by chunk (cut anywhere, never across a file end), the
    dispatcher run after each chunk, in slices as a slave runs it."""
    commit_log = CommitLog(root / "commitlog", file_size)
    queues, dispatch, dispatch_units = _queues(root)
    reput = ReputMessageService(
        commit_log, dispatch, lambda: True, dispatch_units=dispatch_units if units else None
    )
    at = 0
    counts = []
    for size in [*chunks, *[file_size] * (len(log) // file_size + 1)]:
        end = min(len(log), at + size, (at // file_size + 1) * file_size)
        if end > at:
            assert commit_log.append_raw(at, log[at:end])
            at = end
        counts.append(reput.do_reput_slice(size * 3) + reput.do_reput())
    assert at == len(log)
    state = (counts, reput.reput_from_offset, reput.last_store_timestamp)
    commit_log.queue.close()
    return _files(queues), state


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 120),
    chunks=st.lists(st.integers(1, 5000), max_size=30),
)
def test_the_compiled_walk_of_a_slaves_records_indexes_what_the_record_by_record_path_does(
    tmp_path_factory: pytest.TempPathFactory, seed: int, count: int, chunks: list[int]
) -> None:
    # records only: a slave waits at bytes that are none, however many follow
    bodies = [
        b
        for b in _bodies(random.Random(seed), count)
        if isinstance(parse_record(b, 0, False), tuple)
    ]
    log = _classic_log(bodies, FILE)
    root = tmp_path_factory.mktemp("slave")
    by_record = _replicate(root / "record", log, chunks, units=False, file_size=FILE)
    compiled = _replicate(root / "units", log, chunks, units=True, file_size=FILE)
    assert compiled == by_record
