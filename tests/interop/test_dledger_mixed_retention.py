"""Retention in a DLedger group of two real RocketMQ 4.9.7 brokers and one habroker peer.

Every peer deletes its expired data files (RocketMQ keeps them fileReservedTime + 1 hours; the
files' modification times are set two hours back so the test need not wait), so the group's
logs begin at a later entry. A follower of the other kind than the leader is then wiped and
restarted: it cannot catch up from entry 0, the leader TRUNCATEs it at its first entry, and
the follower starts its log again there (DLedger's rebuild at a position), holding the same
bytes at the same positions as the leader. Run both ways: a habroker leader with a Java
follower rebuilt, and a Java leader with the habroker follower rebuilt.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.interop.rocketmq_java import NetNS
from tests.interop.test_dledger_mixed_group import (
    HABROKER_ID,
    JAVA_IDS,
    Peer,
    create_topic,
    produce,
    read_entries,
    start_mixed_group,
    wait_leader,
    wait_until,
)

FILE = 1024 * 1024  # small data files: a few thousand messages fill several


def retention_config() -> dict[str, object]:
    hours = {time.gmtime().tm_hour, time.localtime().tm_hour}
    hours |= {(h + 1) % 24 for h in hours}  # the hour may turn during the test
    return {
        "mappedFileSizeCommitLog": FILE,
        "fileReservedTime": 0,  # kept 0 + 1 hours (RocketMQ's DLedgerCommitLog adds one)
        "deleteWhen": ";".join(f"{h:02d}" for h in sorted(hours)),
    }


def age_data_files(peer: Peer) -> int:
    files = sorted(peer.data_dir.glob("[0-9]" * 20))
    two_hours_ago = time.time() - 7200
    for path in files[:-1]:
        os.utime(path, (two_hours_ago, two_hours_ago))
    return len(files)


def store_root(peer: Peer) -> Path:
    if peer.java is not None:
        return peer.java.store_dir
    assert peer.habroker is not None
    return Path(peer.habroker.config["storePathRootDir"])


@pytest.mark.parametrize(
    "leader_id", [HABROKER_ID, JAVA_IDS[0]], ids=["habroker-leads", "java-leads"]
)
def test_retention_and_a_wiped_follower_of_the_other_kind_rebuilt_at_the_leaders_first_entry(
    netns: NetNS, leader_id: str
) -> None:
    extra = {**retention_config(), "preferredLeaderId": leader_id}
    # whichever peer wins the first election hands leadership to the preferred one
    peers = start_mixed_group(netns, extra)
    habroker = peers[-1].habroker
    assert habroker is not None
    leader, term = wait_leader(peers, only=leader_id)
    create_topic(netns, leader)
    acked = produce(netns, "old", 9000)

    def files_everywhere() -> tuple[bool, object]:
        logs = {p.self_id: read_entries(p.data_dir) for p in peers}
        counts = {i: len(e) for i, e in logs.items()}
        return len(set(counts.values())) == 1 and min(counts.values()) >= len(acked), counts

    wait_until(files_everywhere, "every peer holds every entry", timeout=120)
    time.sleep(1.5)  # flushed: no dirty page left to move a file's modification time again
    counts = {p.self_id: age_data_files(p) for p in peers}
    assert min(counts.values()) >= 3, counts
    # the habroker peer at once (its cleaner would too, within cleanResourceInterval); the Java
    # peers' DLedger CleanSpaceService looks every 100 ms
    code, body = habroker.request("POST", "/v1/admin/clean-expired")
    assert code == 200, body

    def all_deleted() -> tuple[bool, object]:
        left = {p.self_id: len(list(p.data_dir.glob("[0-9]" * 20))) for p in peers}
        return all(n == 1 for n in left.values()), left

    wait_until(all_deleted, "every peer deleted its expired data files", timeout=60)
    kept = read_entries(leader.data_dir)
    begin = min(kept)
    assert begin > 0
    print(f"\nleader {leader} term {term}: {len(acked)} acked; the log now begins at entry {begin}")

    victim = next(p for p in peers if p is not leader and (p.java is None) != (leader.java is None))
    victim.kill()
    shutil.rmtree(store_root(victim))
    victim.start()
    acked_after = produce(netns, "new", 30)

    def rebuilt() -> tuple[bool, object]:
        mine, theirs = read_entries(victim.data_dir), read_entries(leader.data_dir)
        span = (min(mine, default=None), max(mine, default=None))
        return bool(mine) and mine == theirs and min(mine) == begin, span

    span = wait_until(rebuilt, f"{victim} rebuilt at entry {begin} and caught up", timeout=120)
    print(f"{victim} wiped, rebuilt and caught up: entries {span}, byte-identical with {leader}")
    stored = b"".join(read_entries(victim.data_dir).values())
    missing = [
        i for i in acked_after if not re.search(b"id\x01" + re.escape(i.encode()) + b"\\b", stored)
    ]
    assert not missing, f"acknowledged after the rebuild but not on {victim}: {missing}"
    for peer in peers:
        peer.kill()
