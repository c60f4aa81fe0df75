"""An idle DLedger peer sleeps to its next deadline: the election loop does not poll every
10 ms, and the checkpoint is not rewritten (fsync + rename) while nothing changed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from habroker.config import parse_peers
from habroker.dledger import leader_elector as le
from habroker.dledger.leader_elector import DLedgerLeaderElector, ElectionTimings
from habroker.dledger.member_state import MemberState, Role
from habroker.dledger.mmap_file_store import CHECKPOINT, DLedgerMmapFileStore
from habroker.dledger.rpc_service import DLedgerRpcService

PEERS = "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3"


def _elector(tmp_path: Path, timings: ElectionTimings | None = None) -> DLedgerLeaderElector:
    peers = parse_peers(PEERS, "n1")
    state = MemberState("g", "n1", peers, tmp_path / "state")
    return DLedgerLeaderElector(state, DLedgerRpcService(peers, "n1"), lambda: (-1, -1), timings)


def test_the_next_check_is_the_roles_deadline_within_bounds(tmp_path: Path) -> None:
    el = _elector(tmp_path)  # DLedger's defaults: heartbeats every 2 s, 3 may be missed
    st, now = el.state, le._now_ms()
    st.term = 1
    st.change_to_follower(1, "n0")
    el.last_leader_heartbeat = now
    assert el._next_check_s() == le.MAX_CHECK_MS / 1000  # 6 s away: the cap
    el.last_leader_heartbeat = now - 6000 + 200
    assert 0.15 < el._next_check_s() < 0.21
    el.last_leader_heartbeat = now - 7000  # overdue: DLedger's own 10 ms, never a busy loop
    assert el._next_check_s() == le.MIN_CHECK_MS / 1000

    st.change_to_candidate(1)
    el.next_vote_at = now + 300
    assert 0.25 < el._next_check_s() < 0.31
    el.need_increase_term = True  # a newer term was seen: at once
    assert el._next_check_s() == le.MIN_CHECK_MS / 1000

    st.change_to_leader(1)
    el.last_send_heartbeat = now - 1900
    assert 0.05 < el._next_check_s() < 0.11
    el.last_send_heartbeat = -1  # "send now" (a membership change, a not-ready quorum)
    assert el._next_check_s() == le.MIN_CHECK_MS / 1000


def test_an_idle_follower_wakes_for_its_deadline_not_every_10_ms(tmp_path: Path) -> None:
    timings = ElectionTimings(heartbeat_interval_ms=200, max_heartbeat_leak=3)

    async def run() -> tuple[int, float, Role]:
        el = _elector(tmp_path, timings)
        el.state.term = 1
        el.state.change_to_follower(1, "n0")
        el.last_leader_heartbeat = le._now_ms()
        calls = 0
        follow = el._maintain_as_follower

        def counted() -> None:
            nonlocal calls
            calls += 1
            follow()

        el._maintain_as_follower = counted  # type: ignore[method-assign]
        candidate = asyncio.Event()
        el.listeners.append(lambda _term, role: role == Role.CANDIDATE and candidate.set())
        el.start()
        try:
            await asyncio.sleep(0.4)  # heartbeats would be missed only after 600 ms
            quiet = calls
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(candidate.wait(), 5)
            return quiet, time.monotonic() - started, el.state.role
        finally:
            await el.stop()

    quiet, waited, role = asyncio.run(run())
    print(f"follower loop passes in 400 ms: {quiet}; candidate {waited:.3f} s later")
    assert quiet <= 4  # polling every 10 ms: ~40
    assert role == Role.CANDIDATE  # and it still notices the silent leader


def test_an_unchanged_checkpoint_is_not_rewritten(tmp_path: Path) -> None:
    store = DLedgerMmapFileStore(tmp_path, "n0", data_file_size=1 << 20)
    try:
        store.persist_checkpoint()
        path = store.root / CHECKPOINT
        first = path.stat().st_ino
        store.persist_checkpoint()
        assert path.stat().st_ino == first  # os.replace gives a new inode on every write
        store.committed_index = 7
        store.ledger_end_index = 9
        store.persist_checkpoint()
        assert path.stat().st_ino != first
        assert path.read_text().split() == ["endIndex=9", "committedIndex=7"]
    finally:
        store.close()
