"""epochFileCheckpoint as RocketMQ 5 writes it, and where two histories part."""

from __future__ import annotations

import zlib
from pathlib import Path

from habroker.ha.epoch_file import EpochEntry, EpochFileCache, consistent_point


def test_the_file_is_rocketmqs_checkpoint_format(tmp_path: Path) -> None:
    cache = EpochFileCache(tmp_path)
    cache.append(1, 0)
    cache.append(2, 4096)
    cache.append(3, 4096)  # an epoch that wrote nothing stays
    body = "1-0\n2-4096\n3-4096\n"
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF  # UtilAll.crc32
    assert (tmp_path / "epochFileCheckpoint").read_text() == f"3\n{crc}\n{body}"
    assert (tmp_path / "epochFileCheckpoint.bak").read_text().startswith("2\n")
    again = EpochFileCache(tmp_path)
    assert [(e.epoch, e.start_offset) for e in again.load()] == [(1, 0), (2, 4096), (3, 4096)]
    assert [e.to_json() for e in again.closed(9000)][-1] == {
        "epoch": 3, "startOffset": 4096, "endOffset": 9000,
    }  # fmt: skip


def test_a_damaged_file_falls_back_to_the_backup(tmp_path: Path) -> None:
    cache = EpochFileCache(tmp_path)
    cache.append(1, 0)
    cache.append(2, 100)
    (tmp_path / "epochFileCheckpoint").write_text("2\n12345\n1-0\n2-100\n")  # bad crc
    assert [(e.epoch, e.start_offset) for e in EpochFileCache(tmp_path).load()] == [(1, 0)]
    (tmp_path / "epochFileCheckpoint").write_text("2\n0\n1-0\n")  # torn: one line missing
    assert [e.epoch for e in EpochFileCache(tmp_path).load()] == [1]
    # crc 0 means "not checked", as Java reads it
    (tmp_path / "epochFileCheckpoint").write_text("2\n0\n1-0\n5-7\n")
    assert [e.epoch for e in EpochFileCache(tmp_path).load()] == [1, 5]


def test_going_backwards_is_refused(tmp_path: Path) -> None:
    cache = EpochFileCache(tmp_path)
    cache.append(2, 100)
    for epoch, start in ((2, 200), (1, 300), (3, 50)):
        try:
            cache.append(epoch, start)
        except ValueError:
            continue
        raise AssertionError(f"appended epoch {epoch} at {start}")


def e(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(epoch, start) for epoch, start in pairs]


def test_consistent_point() -> None:
    # same history, the slave behind: everything it has is consistent
    assert consistent_point(e((1, 0), (2, 100)), 150, e((1, 0), (2, 100)), 300) == 150
    # the old master wrote on in epoch 2 after the new master started epoch 3 at 120
    assert consistent_point(e((1, 0), (2, 100)), 180, e((1, 0), (2, 100), (3, 120)), 400) == 120
    # the new master never had epoch 2's bytes at all
    assert consistent_point(e((1, 0), (2, 100)), 180, e((1, 0), (3, 100)), 400) == 100
    # an epoch that wrote nothing on the new master still marks where the logs part
    assert consistent_point(e((1, 0)), 174, e((1, 0), (2, 0)), 500) == 0
    # nothing in common
    assert consistent_point(e((4, 0)), 10, e((1, 0)), 10) == -1
