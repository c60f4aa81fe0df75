"""The master indexes a batch from what its put already knows (``MessageStore._dispatch_put``)
instead of parsing the records back out of the commit log. Its consume-queue units must be the
ones the dispatcher makes from the bytes (``parse_record``, what a slave and a recovery run),
whatever the batch holds: TAGS in any form, SCHEDULE_TOPIC_XXXX delays, transaction halves,
batches pushed to the next file behind a BLANK."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from habroker.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
    parse_record,
)
from habroker.store import BatchEntry, MessageStore, native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .storeutil import FILE_SIZE, cq_units, started

BORN = ("10.0.0.9", 40001)
PROPS = (
    b"",
    b"TAGS\x01a\x02",
    "TAGS\x01é中\x02KEYS\x01k\x02".encode(),
    b"KEYS\x01x\x02TAGS\x01b\x02",
    b"TAGS\x01b\x02TAGS\x01c\x02",  # repeated: the later one counts
    b"XTAGS\x01q\x02",  # not TAGS
    b"DELAY\x013\x02TAGS\x01z\x02",
    b"DELAY\x01x\x02",  # not a level
    b"DELAY\x0199\x02",  # above the highest level: capped
)
ITEMS = st.lists(st.tuples(st.integers(1, 3000), st.sampled_from(PROPS)), min_size=1, max_size=6)
#: indexed batches (no transaction type, or a commit) ...
indexed = st.tuples(
    st.sampled_from(("T", "SCHEDULE_TOPIC_XXXX")),
    st.integers(0, 2),
    st.sampled_from((0, TRANSACTION_COMMIT_TYPE)),
    ITEMS,
)
#: ... and transaction halves (prepared, rolled back), which get no unit. They go to a topic
#: of their own: the store still counts their queue offsets, so a half followed by an indexed
#: batch in the same queue leaves a gap of blank units (RocketMQ gives halves queue offset 0;
#: habroker's client port refuses transactions, so halves reach a store only through this API).
halves = st.tuples(st.just("HALF"), st.integers(0, 2), st.sampled_from((0x4, 0xC)), ITEMS)
batch = indexed | halves


def reparsed_units(root: Path) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """Every unit the dispatcher would make, from the commit-log files alone."""
    out: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    files = sorted((root / "commitlog").iterdir())
    for path in files:
        data = path.read_bytes()
        base = int(path.name)
        pos = 0
        while pos < len(data):
            parsed = parse_record(data, pos, True)
            if parsed == 0:
                break  # BLANK: the rest of the file is filler
            if parsed == -1 and path == files[-1] and not any(data[pos : pos + 8]):
                break  # the last file's unwritten zeros
            assert isinstance(parsed, tuple), (path, pos, parsed)
            topic, queue_id, phys, size, tags, _ts, _qo, sys_flag = parsed
            assert phys == base + pos
            tran = sys_flag & TRANSACTION_TYPE_MASK
            if not tran or tran == TRANSACTION_COMMIT_TYPE:
                out.setdefault((topic, queue_id), []).append((phys, size, tags))
            pos += size
    return out


async def put_all(root: Path, batches: list[tuple[str, int, int, list[tuple[int, bytes]]]]) -> int:
    store: MessageStore = await started(root)
    reparses = 0
    real = store.reput.do_reput

    def counting() -> int:
        nonlocal reparses
        reparses += 1
        return real()

    store.reput.do_reput = counting  # type: ignore[method-assign]
    try:
        for i, (topic, queue_id, sys_flag, items) in enumerate(batches):
            entries = [BatchEntry(0, bytes([i % 251]) * size, props) for size, props in items]
            store.put_messages(topic, queue_id, entries, born_host=BORN, sys_flag=sys_flag)
        assert store.reput.reput_from_offset == store.commit_log.max_offset
        during_puts = reparses
    finally:
        await store.shutdown()
    return during_puts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch, min_size=1, max_size=40), st.booleans())
def test_units_from_the_put_equal_units_parsed_from_the_log(batches, python_loop) -> None:
    """Both ways of making them: the compiled ``put_cq_units`` (where built) and the Python
    loop of ``put_unit`` calls."""
    compiled = native.put_cq_units
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        native.put_cq_units = None if python_loop else compiled
        try:
            asyncio.run(put_all(root, batches))
        finally:
            native.put_cq_units = compiled
        expected = reparsed_units(root)
        for (topic, queue_id), units in expected.items():
            assert cq_units(root, topic, queue_id) == units, (topic, queue_id)
        made = {
            (t.name, int(q.name))
            for t in (root / "consumequeue").glob("*")
            for q in t.iterdir()
            if cq_units(root, t.name, int(q.name))
        }
        assert made == set(expected)


def test_the_put_path_parses_nothing_back_unless_a_blank_came_first(tmp_path) -> None:
    """Batches that fit their file are indexed without the parse; one that goes to the next
    file behind a BLANK is parsed (the BLANK must be walked over)."""
    small = [("T", 0, 0, [(1000, b"TAGS\x01a\x02")] * 4)] * 10  # ~40 KiB: fits one file
    assert asyncio.run(put_all(tmp_path / "a", small)) == 0
    crossing = [("T", 0, 0, [(1000, b"TAGS\x01a\x02")] * 4)] * (2 * FILE_SIZE // 4000)
    assert asyncio.run(put_all(tmp_path / "b", crossing)) >= 1
    assert cq_units(tmp_path / "b", "T", 0) == reparsed_units(tmp_path / "b")[("T", 0)]
