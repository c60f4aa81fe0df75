"""A flush whose fdatasync runs (in a thread) while the log is cut must not claim what was cut.

A follower's truncation (DLedger TRUNCATE, a classic slave's ``truncate_to``) runs on the event
loop while a periodic flush may be syncing the same file in a thread.  Before the fix the flush
then set ``flushed_position`` back to the pre-cut write position: bytes appended again after
the cut counted as flushed without a sync, and a sync of a file removed meanwhile raised out of
the flush loop.  The interleaving is forced with a sync that waits for the test (the one fake
here: the timing of a thread cannot be produced on purpose otherwise); the files are real.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from habroker.store.mapped_file import MappedFile
from habroker.store.mapped_file_queue import MappedFileQueue

SIZE = 64 * 1024


HELD: dict[int, tuple[threading.Event, threading.Event]] = {}
_real_sync = MappedFile.sync


def _sync(self: MappedFile) -> None:
    """MappedFile.sync, held for the files a test names until it says go."""
    held = HELD.pop(id(self), None)
    if held is not None:
        started, go = held
        started.set()
        go.wait(10)
    _real_sync(self)


@pytest.fixture(autouse=True)
def held_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MappedFile, "sync", _sync)


async def _cut_during_sync(queue: MappedFileQueue, mf: MappedFile, cut: int) -> asyncio.Task[int]:
    started, go = threading.Event(), threading.Event()
    HELD[id(mf)] = (started, go)
    flush = asyncio.ensure_future(queue.flush())
    assert await asyncio.to_thread(started.wait, 10), "the flush never reached its sync"
    queue.truncate_dirty(cut)
    go.set()
    return flush


def test_a_cut_during_a_sync_is_not_claimed_as_flushed(tmp_path: Path) -> None:
    async def run() -> None:
        queue = MappedFileQueue(tmp_path / "log", SIZE)
        mf = queue.last_writable()
        mf.append(b"a" * 4000)
        flush = await _cut_during_sync(queue, mf, 1000)
        await flush
        assert mf.wrote_position == 1000
        assert mf.flushed_position <= 1000 and queue.flushed_where <= 1000
        mf.append(b"b" * 3000)  # the leader's entries again, up to 4000
        synced = queue.fsync_count
        assert await queue.flush() == 4000
        assert queue.fsync_count == synced + 1, "the bytes appended after the cut were synced"

    asyncio.run(run())


def test_a_file_removed_during_its_sync_does_not_fail_the_flush(tmp_path: Path) -> None:
    async def run() -> None:
        queue = MappedFileQueue(tmp_path / "log", SIZE)
        first = queue.last_writable()
        first.append(b"a" * SIZE)
        second = queue.last_writable()
        second.append(b"b" * 100)
        await queue.flush()
        second.append(b"c" * 100)
        # a cut into the first file: the second, syncing, goes away
        flush = await _cut_during_sync(queue, second, SIZE - 10)
        assert await flush == SIZE - 10
        assert queue.files == [first] and not second.path.exists()

    asyncio.run(run())
