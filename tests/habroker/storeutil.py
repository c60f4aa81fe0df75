"""Helpers for store tests: small files so records cross file ends often, and a raw log walker
written from the spec tables (independent of habroker's codec)."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path
from typing import Any

from habroker.config import BrokerConfig, BrokerRole
from habroker.message import encode_record
from habroker.store import BatchEntry, MessageStore

FILE_SIZE = 64 * 1024
CQ_FILE_SIZE = 20 * 64
BLANK = 0xCBD43194
V1 = 0xDAA320A7
V2 = 0xDAA320AB


def make_config(root: Path, **overrides: Any) -> BrokerConfig:
    values: dict[str, Any] = {
        "storePathRootDir": str(root),
        "mappedFileSizeCommitLog": FILE_SIZE,
        "mappedFileSizeConsumeQueue": CQ_FILE_SIZE,
        "maxMessageSize": 16 * 1024,
        "flushIntervalCommitLog": 50,
        "flushIntervalConsumeQueue": 50,
        "cleanResourceInterval": 3_600_000,
    }
    values.update(overrides)
    return BrokerConfig(**values)


async def started(root: Path, **overrides: Any) -> MessageStore:
    store = MessageStore(make_config(root, **overrides))
    await store.start()
    return store


def entries(n: int, size: int = 100, tag: str = "TagA", seed: int = 0) -> list[BatchEntry]:
    props = f"TAGS\x01{tag}\x02KEYS\x01k{seed}\x02".encode()
    return [
        BatchEntry(0, bytes([(seed + i) % 251]) * (size + (seed + i) % 17), props) for i in range(n)
    ]


def walk_file(data: bytes) -> tuple[list[tuple[int, int]], int | None]:
    """(position, TOTALSIZE) of each record in a commit-log file, and the BLANK position."""
    pos = 0
    records = []
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK:
            assert total == len(data) - pos, "BLANK must declare the rest of the file"
            return records, pos
        if magic not in (V1, V2) or total <= 0:
            break
        records.append((pos, total))
        pos += total
    return records, None


def commit_log_files(store_root: Path) -> list[Path]:
    return sorted((store_root / "commitlog").iterdir())


def cq_units(store_root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """Every unit of a consume queue, read straight from its files (zero units end it)."""
    units = []
    qdir = store_root / "consumequeue" / topic / str(queue_id)
    for path in sorted(qdir.iterdir()):
        data = path.read_bytes()
        for off in range(0, len(data), 20):
            unit = struct.unpack_from(">qiq", data, off)
            if unit[1] == 0:
                return units
            units.append(unit)
    return units


def producer_records(
    topic: str, queue_id: int, bodies: list[tuple[bytes, int]], start_ts: int = 1_700_000_000_000
) -> bytes:
    """Records as a master stores what producers sent: (body as sent, producer's sysFlag)
    each, at commit-log offset 0 onwards, queue offsets 0 onwards."""
    out = bytearray()
    for i, (body, sys_flag) in enumerate(bodies):
        out += encode_record(
            topic=topic,
            queue_id=queue_id,
            body=body,
            sys_flag=sys_flag,
            properties={"KEYS": f"k{i}", "UNIQ_KEY": f"u{i}"},
            queue_offset=i,
            commit_log_offset=len(out),
            born_timestamp=start_ts + i,
            store_timestamp=start_ts + i,
        )
    return bytes(out)


async def store_holding(root: Path, records: bytes, **overrides: Any) -> None:
    """A store (left shut down) holding exactly ``records`` from offset 0: written the way a
    slave takes replicated bytes, so sysFlags are kept exactly as given (a master's put path
    sets its own). A broker started on ``root`` then serves them."""
    store = await started(root, brokerRole=BrokerRole.SLAVE, brokerId=1, **overrides)
    try:
        assert store.append_to_commit_log(0, records)
        # a slave indexes behind its appends (the background dispatch): wait for it
        assert await settle(store) == len(records)
    finally:
        await store.shutdown()


async def settle(store: MessageStore, timeout: float = 10.0) -> int:  # noqa: ASYNC109
    """Wait until a slave store's background dispatch has indexed all it can (everything, or
    up to a record cut in half at the tail); returns the dispatched offset."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        now = store.dispatched_offset
        if now == store.max_phy_offset or now == last:
            return now
        last = now
    raise AssertionError(f"dispatch still moving at {store.dispatched_offset} after {timeout} s")
